"""Ghost's stored post formats as HTML, for a post whose export has no rendered `html`.

- Lexical (Ghost 5+): a JSON tree, `{"root": {"children": [...]}}`; a node has a `type` and
  either `children` (paragraph, heading with its `tag`, quote, list with `listType`, listitem,
  link) or its own content: `text`, a code block's `code`, a markdown card's `markdown`, or HTML
  in a card's fields (`html`, `calloutText`, `caption`, `header`...).
- Mobiledoc (Ghost 1-4): `{"markups", "atoms", "cards", "sections"}`; a section is `[1, tag,
  markers]` (text), `[3, "ul"|"ol", items]` (a list), `[10, card index]` or `[2, src]` (an image);
  a marker is `[0 text | 1 atom, opened markups, closed count, value]`.

Only text is wanted: formatting marks are dropped, images become their captions.
"""

from __future__ import annotations

from html import escape
from typing import Any

from host.importer.errors import require

# Card fields that hold HTML (or text) a reader sees, in the order Ghost shows them.
_CARD_HTML = ("header", "subheader", "heading", "html", "calloutText", "content", "caption", "title", "description")
_BLOCK = {"paragraph": "p", "quote": "blockquote", "aside": "blockquote", "listitem": "li"}
_MARKUP_SECTION_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote"})
_QUOTES = {"aside": "blockquote", "pull-quote": "blockquote"}


def lexical_html(document: Any) -> str:
    root = document.get("root") if isinstance(document, dict) else None
    return _lexical_node(root) if isinstance(root, dict) else ""


def _lexical_node(node: dict[str, Any]) -> str:
    kind = node.get("type", "")
    if isinstance(node.get("text"), str):
        return escape(node["text"])
    if kind == "linebreak":
        return "<br>"
    if "children" in node:
        inner = "".join(_lexical_node(child) for child in node["children"] if isinstance(child, dict))
        if kind in ("heading", "extended-heading"):
            tag = node.get("tag") if node.get("tag") in ("h1", "h2", "h3", "h4", "h5", "h6") else "h2"
            return f"<{tag}>{inner}</{tag}>"
        if kind == "list":
            tag = "ol" if node.get("listType") == "number" else "ul"
            return f"<{tag}>{inner}</{tag}>"
        tag = _BLOCK.get(kind.removeprefix("extended-"))
        return f"<{tag}>{inner}</{tag}>" if tag else inner
    return _card(kind, node)


def _card(kind: str, payload: dict[str, Any]) -> str:
    """A card of either format: markdown rendered, code kept as code, HTML fields as they are."""
    if kind == "markdown" and isinstance(payload.get("markdown"), str):
        markdown_it = require("markdown_it", "Ghost's markdown cards")
        return str(markdown_it.MarkdownIt("commonmark").render(payload["markdown"]))
    if kind in ("codeblock", "code") and isinstance(payload.get("code"), str):
        return f"<pre>{escape(payload['code'])}</pre>"
    parts = [payload[field] for field in _CARD_HTML if isinstance(payload.get(field), str) and payload[field].strip()]
    return "".join(f"<div>{part}</div>" for part in parts)


def mobiledoc_html(document: Any) -> str:
    if not isinstance(document, dict):
        return ""
    atoms = document.get("atoms") or []
    cards = document.get("cards") or []
    out = []
    for section in document.get("sections") or []:
        if not isinstance(section, list) or not section:
            continue
        if section[0] == 1 and len(section) >= 3:
            tag = str(section[1]).lower()
            tag = _QUOTES.get(tag, tag if tag in _MARKUP_SECTION_TAGS else "p")
            out.append(f"<{tag}>{_markers(section[2], atoms)}</{tag}>")
        elif section[0] == 3 and len(section) >= 3:
            tag = "ol" if section[1] == "ol" else "ul"
            items = "".join(f"<li>{_markers(item, atoms)}</li>" for item in section[2])
            out.append(f"<{tag}>{items}</{tag}>")
        elif section[0] == 10 and len(section) >= 2 and isinstance(section[1], int) and section[1] < len(cards):
            name, payload = (cards[section[1]] + [{}])[:2]
            out.append(_card(str(name).removeprefix("card-"), payload if isinstance(payload, dict) else {}))
    return "\n".join(out)


def _markers(markers: Any, atoms: list[Any]) -> str:
    text = []
    for marker in markers if isinstance(markers, list) else []:
        if not isinstance(marker, list) or len(marker) < 4:
            continue
        if marker[0] == 0:
            text.append(escape(str(marker[3])))
        elif marker[0] == 1 and isinstance(marker[3], int) and marker[3] < len(atoms):
            atom = atoms[marker[3]]
            text.append(escape(str(atom[1])) if isinstance(atom, list) and len(atom) > 1 else "")
    return "".join(text)
