"""RAGFlow's `highlight`: the sentences of a chunk that hold a question word, the words in `<em>`.

As RAGFlow does for English text: the content is split into sentences at `.`, `?`, `!`, `;` and
line breaks; in each sentence every word that is a word of the question is wrapped in
`<em>...</em>`; the sentences holding one are joined by `...`. When no sentence holds one, the
highlight is the content itself. The highlight is HTML (clients render the `<em>`), so the
text around the marks is escaped (`&`, `<`, `>`): a library's text never becomes markup. Words
are host/constraints/words.py's (case-folded), the words the constraints match, found in the
original text, so the highlight keeps its spelling.
No expression from the client is ever compiled: only the fixed patterns below run.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from html import escape

from host.constraints.words import WORD, fold

SENTENCE_END = re.compile(r"[.?!;\n]")


def highlight(content: str, question_words: Collection[str]) -> str:
    sentences = []
    for sentence in SENTENCE_END.split(content):
        marked, found = _mark(sentence, question_words)
        if found:
            sentences.append(marked)
    return "...".join(sentences) if sentences else escape(content, quote=False)


def _mark(sentence: str, question_words: Collection[str]) -> tuple[str, bool]:
    pieces, end, found = [], 0, False
    for match in WORD.finditer(sentence):
        if fold(match.group()) in question_words:
            pieces += [escape(sentence[end : match.start()], quote=False), f"<em>{escape(match.group())}</em>"]
            end, found = match.end(), True
    return "".join(pieces) + escape(sentence[end:], quote=False), found
