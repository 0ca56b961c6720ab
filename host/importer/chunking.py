"""Cut documents into chunks that follow the text's structure, each within a token budget.

Structure, coarsest first: a heading with everything under it (its subsections too, when all of it
fits), then one section's blocks (paragraphs, list items, code...), then the lines of a block, then
sentences, then words. A piece is only cut at the next finer level when it does not fit whole, and
neighbouring pieces of one level are packed together while they fit: so a chunk is as large a
stretch of one section as the budget allows, and never starts or ends inside a word.

Invariants: every chunk's `token_count` is `count_tokens(chunk.text)` exactly; it is at most the
budget, except for a single word longer than the whole budget (a chunk of its own: a word is never
cut); chunks never cross a heading of a different section (each keeps its heading path and anchor).

Counting: each piece is counted once and neighbours are packed by the sum of their counts, then
the packed text is counted exactly. For WordPiece tokenizers (MiniLM) the sum is exact, since
whitespace adds no tokens; for tokenizers where joining text changes the count (BPE), a packed
chunk that comes out over the budget is split in two and counted again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from host.importer.document import TITLE_SEPARATOR, Chunk, Document, Section

CountTokens = Callable[[str], int]

BLOCK_SEPARATOR = "\n\n"
# A sentence ends at . ! ? or an ellipsis, maybe followed by one closing quote or bracket, then
# whitespace; a CJK full stop ends one even without a space. Abbreviations ("e.g. this") end a
# sentence early: harmless, since sentences are only packed back together up to the budget.
_SENTENCE_END = re.compile(
    r"(?<=[.!?\u2026])\s+"  # . ! ? or an ellipsis, then whitespace
    r"|(?<=[.!?\u2026][\"'\u201d\u2019)\]])\s+"  # ... then a closing quote or bracket, then whitespace
    r"|(?<=[\u3002\uff01\uff1f])\s*"  # CJK full stop, exclamation or question mark
)
_SPACES = re.compile(r"[ \t\f\v\u00a0\u2000-\u200a\u202f\u205f\u3000]+")


def tidy(text: str) -> str:
    """One space between words, none at line ends, no blank lines inside a block; indentation stays
    (a nested list item, an indented verse)."""
    lines = []
    for line in text.splitlines():
        words = _SPACES.sub(" ", line).strip()
        if words:
            lines.append(line[: len(line) - len(line.lstrip(" \t"))] + words)
    return "\n".join(lines)


def chunk_document(document: Document, budget: int, count_tokens: CountTokens) -> list[Chunk]:
    """All chunks of a document, in reading order."""
    if budget < 1:
        raise ValueError(f"the chunk budget must be at least 1 token, got {budget}")
    chunks: list[Chunk] = []
    sections = [section for section in document.sections if section.path]
    index = 0
    while index < len(sections):
        section = sections[index]
        end = _subtree_end(sections, index)
        title = TITLE_SEPARATOR.join(section.path)
        if end > index + 1:
            whole = BLOCK_SEPARATOR.join(_subtree_blocks(sections[index:end]))
            if whole:
                count = count_tokens(whole)
                if count <= budget:
                    chunks.append(Chunk(whole, count, title, section.anchor))
                    index = end
                    continue
        for text, count in pack_blocks(section.blocks, budget, count_tokens):
            chunks.append(Chunk(text, count, title, section.anchor))
        index += 1
    return chunks


def _subtree_end(sections: Sequence[Section], index: int) -> int:
    """One past the last section under `sections[index]` (its subsections, theirs, ...)."""
    path = sections[index].path
    end = index + 1
    while end < len(sections) and len(sections[end].path) > len(path) and sections[end].path[: len(path)] == path:
        end += 1
    return end


def _subtree_blocks(sections: Sequence[Section]) -> list[str]:
    """A heading's own blocks, then each subsection's heading line and blocks: the text read straight through."""
    blocks = [block for block in sections[0].blocks if block.strip()]
    for section in sections[1:]:
        own = [block for block in section.blocks if block.strip()]
        if own:
            blocks.append(section.path[-1])
            blocks.extend(own)
    return blocks


def pack_blocks(blocks: Sequence[str], budget: int, count_tokens: CountTokens) -> list[tuple[str, int]]:
    """A section's blocks packed into `(text, token_count)` chunks of at most `budget` tokens."""
    return _pack([block for block in blocks if block.strip()], BLOCK_SEPARATOR, budget, count_tokens, _split_lines)


def _split_lines(block: str, budget: int, count_tokens: CountTokens) -> list[tuple[str, int]]:
    return _pack(block.split("\n"), "\n", budget, count_tokens, _split_sentences)


def _split_sentences(line: str, budget: int, count_tokens: CountTokens) -> list[tuple[str, int]]:
    return _pack(_SENTENCE_END.split(line), " ", budget, count_tokens, _split_words)


def _split_words(sentence: str, budget: int, count_tokens: CountTokens) -> list[tuple[str, int]]:
    return _pack(sentence.split(), " ", budget, count_tokens, _lone_word)


def _lone_word(word: str, budget: int, count_tokens: CountTokens) -> list[tuple[str, int]]:
    # The one case over budget: a word is never cut (the embedder truncates what it cannot read).
    return [(word, count_tokens(word))]


Split = Callable[[str, int, CountTokens], list[tuple[str, int]]]


def _pack(pieces: Sequence[str], separator: str, budget: int, count_tokens: CountTokens,
          split_finer: Split) -> list[tuple[str, int]]:
    """Greedy: add pieces to the current chunk while their counts sum within the budget."""
    chunks: list[tuple[str, int]] = []
    group: list[str] = []
    group_tokens = 0
    for piece in pieces:
        if not piece.strip():
            continue
        tokens = count_tokens(piece)
        if tokens > budget:
            chunks.extend(_exact(group, separator, budget, count_tokens))
            group, group_tokens = [], 0
            chunks.extend(split_finer(piece, budget, count_tokens))
            continue
        if group and group_tokens + tokens > budget:
            chunks.extend(_exact(group, separator, budget, count_tokens))
            group, group_tokens = [], 0
        group.append(piece)
        group_tokens += tokens
    chunks.extend(_exact(group, separator, budget, count_tokens))
    return chunks


def _exact(group: Sequence[str], separator: str, budget: int, count_tokens: CountTokens) -> list[tuple[str, int]]:
    """The group joined, counted exactly; halved until each half fits (each piece alone fits)."""
    if not group:
        return []
    text = separator.join(group)
    tokens = count_tokens(text)
    if tokens <= budget or len(group) == 1:
        return [(text, tokens)]
    half = len(group) // 2
    return _exact(group[:half], separator, budget, count_tokens) + _exact(group[half:], separator, budget, count_tokens)
