"""Query answers as a ready-to-paste context block (`Accept: text/plain` on `POST /`, the MCP tool).

Chat clients paste retrieved bits into a prompt; this is the plain-text form of a result, best
bit first, one block per bit, blocks separated by one empty line:

    [1] Jonah 2
    Source: https://example.com/jonah/2

    Then Jonah prayed unto the LORD his God out of the fish's belly, ...

    [2] <title, or the URL when the bit has no title>
    Source: <info.url>

    <text>

The numbers let a model cite its sources ("[2]"). Header lines never break: line breaks inside
a title or URL become spaces. The text is the bit's own (cut like the JSON answer's when the
first bit alone overflowed the budget), with trailing white space removed. An answer without
bits is an empty body. Nothing else is added (no similarity, no token count): every character
here costs the reader tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TEXT_PLAIN = "text/plain; charset=utf-8"


def _one_line(value: str) -> str:
    return " ".join(value.split())


def render_context_block(bits: Iterable[Mapping[str, Any]]) -> str:
    """The bits (as `result_bit` builds them, with text and info) as one context block."""
    blocks = []
    for number, bit in enumerate(bits, start=1):
        info = bit.get("info") or {}
        url = _one_line(str(info.get("url") or ""))
        title = _one_line(str(info.get("title") or "")) or url
        blocks.append(f"[{number}] {title}\nSource: {url}\n\n{str(bit.get('text') or '').rstrip()}\n")
    return "\n".join(blocks)
