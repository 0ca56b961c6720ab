"""The steps of `scripts/bench.py`, one module each, and what they share.

- `config`: the command line and the run's settings (`Config`); `report`: progress lines,
  number formats, Markdown tables, the report's header; `step`: what a step is (`Step`) and
  what it is given (`Size`).
- `libraries`: the synthetic libraries (generated once, compiled, reused) and their queries;
  `measure`: interleaved timing and the searches compared (host, numpy floor, faiss);
  `servers`: a real `polymath-host serve` (host.service.harness) and POST / against it.
- One module per step, each with one `STEP`: `latency`, `approximate`, `fixtures`, `encoding`,
  `compiling`, `coldstart`, `memory`, `http_load`. `scripts/bench.py` lists them in `STEPS`.

Everything here imports the installed `host` package (`pip install -e .`).
"""
