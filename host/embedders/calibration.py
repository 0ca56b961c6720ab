"""Texts the int8 graph is calibrated on: which input channels of each layer run large.

A few channels of MiniLM's hidden states (and of its feed-forward activations) are many times
larger than the rest, for any input: quantizing a whole tensor to int8 with one scale would spend
its 256 steps on them. `int8` keeps those channels in float32, and finds them by running the
float32 model over these texts. They were written for this purpose (no one else's text, so no
licence to track) and mix what a library holds and what people ask: prose, instructions, lists,
numbers, code, dialogue, questions and short queries. They are deliberately not the sample
library's passages nor the benchmark corpora, on which the int8 graph's fidelity is measured.
"""

from __future__ import annotations

CALIBRATION_TEXTS = (
    "The harbour was quiet at dawn. Fishing boats rocked against the pier while gulls argued over "
    "scraps, and the smell of tar and salt drifted up the narrow streets toward the market square.",
    "To reset the router, hold the small button on the back for ten seconds until the lights blink "
    "twice, then wait two minutes before connecting your laptop again.",
    "How do I keep tomatoes from splitting after heavy rain?",
    "best budget laptop for students 2024",
    "She laughed. \"You told me the bridge was closed,\" she said, \"and then you drove across it anyway.\"",
    "Quarterly revenue rose 12% to $4.3 million, driven by subscriptions in Europe; operating costs "
    "stayed flat at $2.1 million, and the company expects similar growth next quarter.",
    "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()",
    "Ingredients: 200 g flour, 2 eggs, 300 ml milk, a pinch of salt. Whisk until smooth, rest for "
    "thirty minutes, then fry thin pancakes in a hot buttered pan.",
    "The committee rejected the proposal because it did not explain how the new bus routes would "
    "reach the villages north of the river during the winter months.",
    "what is the capital of australia",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It happens in the "
    "chloroplasts, where chlorophyll absorbs mostly red and blue light.",
    "Error 502: the upstream server did not answer in time. Check that the service is running and "
    "that its port is open, then try the request again.",
    "My grandmother kept bees behind the orchard. Every August we helped her lift the frames, heavy "
    "with honey, and carried them to the shed where the extractor hummed all afternoon.",
    "- Pack a torch and spare batteries\n- Tell someone your route\n- Check the weather forecast\n"
    "- Carry more water than you think you need",
    "Is it safe to take ibuprofen and paracetamol together?",
    "The treaty of 1648 ended decades of war in central Europe and set out the principle that each "
    "state governs its own territory without outside interference.",
    "In this tutorial we build a small web server that answers JSON requests, stores data in SQLite "
    "and logs every error with the time, the path and the client's address.",
    "He had never seen snow before. When the first flakes fell on the platform he held out both hands "
    "and stood there, smiling, until the train pulled away without him.",
    "shipping times to canada",
    "Interest is calculated daily and paid monthly. If you withdraw money before the end of the fixed "
    "term, you lose the interest earned in the last ninety days.",
    "The novel follows three sisters who inherit a failing vineyard and must decide whether to sell "
    "it to a developer or risk everything on one more harvest.",
    "Volcanoes form where tectonic plates pull apart or dive beneath one another, letting molten rock "
    "rise through cracks in the crust.",
    "Why does my sourdough starter smell like nail polish remover?",
    "Meeting notes, 14 March: agreed to move the launch to April; Priya to draft the press release; "
    "budget review postponed until the auditors report.",
    "A long time ago, in a valley surrounded by mountains, there lived a shepherd who could speak "
    "with the wind, and the wind told him where the lost sheep had wandered.",
    "The function returns None when the file is missing and raises ValueError when its header cannot "
    "be parsed; callers should handle both cases.",
    "cheap flights london to rome in may",
    "Stretch slowly and never bounce. Hold each position for thirty seconds, breathe out as you reach "
    "further, and stop at once if you feel a sharp pain.",
    "The museum's new wing displays tools, pottery and jewellery found at the Bronze Age settlement, "
    "together with a model of the village as it may have looked.",
    "Thank you for your order! Your parcel will be dispatched within two working days, and you will "
    "receive an email with a tracking link.",
)
