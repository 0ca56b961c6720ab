"""Markdown (CommonMark with tables) with front matter: title, description, url, draft.

Front matter is YAML between `---` lines (read with PyYAML's safe loader: plain data only, no
arbitrary objects) or TOML between `+++` lines. Text is rendered plain: emphasis, links and code
marks dropped, images as their alt text, list items as `- item`/`1. item`, table rows as
`a | b`, code blocks kept line by line. Each heading gets GitHub's slug as its anchor.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from host.importer.document import Document
from host.importer.errors import Draft, ImporterError, decode_text, require
from host.importer.readers.html import fragment_text
from host.importer.readers.outline import Outline
from host.importer.slugs import Slugger

_YAML_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?:(.*?)\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_TOML_FRONT_MATTER = re.compile(r"\A\+\+\+[ \t]*\r?\n(?:(.*?)\r?\n)?\+\+\+[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def read(data: bytes, fallback_title: str) -> list[Document]:
    text = decode_text(data)
    meta, body = split_front_matter(text)
    title = _text_field(meta, "title")
    outline = Outline(title or fallback_title, title_is_fallback=not title)
    _render(body, outline)
    documents = [outline.document(description=_text_field(meta, "description"), own_url=_text_field(meta, "url"))]
    if meta.get("draft") is True or meta.get("published") is False:
        raise Draft(documents)
    return documents


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """(front matter as a dict, the Markdown after it); `{}` when there is none."""
    for pattern, parse in ((_YAML_FRONT_MATTER, _parse_yaml), (_TOML_FRONT_MATTER, _parse_toml)):
        match = pattern.match(text)
        if match:
            meta = parse(match.group(1) or "")
            if meta is None:
                meta = {}
            if not isinstance(meta, dict):
                raise ImporterError(f"front matter: expected key: value pairs, got {type(meta).__name__}")
            return meta, text[match.end():]
    return {}, text


def _parse_yaml(text: str) -> Any:
    yaml = require("yaml", "Markdown front matter")
    try:
        return yaml.safe_load(text)  # safe_load: plain data only, never arbitrary Python objects
    except yaml.YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""  # +1 for 0-based, +1 for the opening ---
        raise ImporterError(f"front matter: not valid YAML{where}: {getattr(problem, 'problem', problem)}") from None


def _parse_toml(text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as problem:
        raise ImporterError(f"front matter: not valid TOML: {problem}") from None


def _text_field(meta: dict[str, Any], key: str) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise ImporterError(f"front matter: {key} must be text, got a {type(value).__name__}")
    return " ".join(str(value).split()) or None  # one line: a title or description spread over lines in YAML


def _render(markdown: str, outline: Outline) -> None:
    markdown_it = require("markdown_it", "Markdown")
    parser = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])
    slugger = Slugger()
    lines: list[str] = []  # of the top-level block being read
    row: list[str] = []  # cells of the table row being read
    lists: list[bool] = []  # open lists, innermost last: ordered or not
    item_prefix: str | None = None  # "- " or "3. " until the first line of a list item is written
    heading_level = 0
    in_cell = False

    def finish_block() -> None:
        if lines:
            outline.block("\n".join(lines))
            lines.clear()

    for token in parser.parse(markdown):
        kind = token.type
        if kind == "heading_open":
            finish_block()
            heading_level = int(token.tag[1])
        elif kind == "inline" and heading_level:
            text = inline_text(token.children or [])
            outline.heading(heading_level, text, slugger.slug(text))
            heading_level = 0
        elif kind == "inline" and in_cell:
            row.append(inline_text(token.children or []))
        elif kind == "inline":
            indent = "  " * max(len(lists) - 1, 0)
            prefix, item_prefix = item_prefix or ("  " if lists else ""), None
            lines.append(indent + prefix + inline_text(token.children or []))
        elif kind in ("bullet_list_open", "ordered_list_open"):
            lists.append(kind == "ordered_list_open")
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif kind == "list_item_open":
            item_prefix = f"{token.info}{token.markup} " if token.info else "- "
        elif kind in ("th_open", "td_open", "th_close", "td_close"):
            in_cell = kind.endswith("_open")
        elif kind == "tr_close":
            lines.append(" | ".join(row))
            row.clear()
        elif kind in ("fence", "code_block"):
            finish_block()
            outline.block(token.content, preformatted=True)
        elif kind == "html_block":
            finish_block()
            outline.block(fragment_text(token.content))
        if token.level == 0 and token.nesting <= 0:
            finish_block()  # a top-level block has ended
    finish_block()


def inline_text(children: list[Any]) -> str:
    """Plain text of an inline token: marks dropped, links as their text, images as their alt text."""
    parts: list[str] = []
    for child in children:
        if child.type in ("text", "code_inline", "image"):
            parts.append(child.content)
        elif child.type == "softbreak":
            parts.append(" ")
        elif child.type == "hardbreak":
            parts.append("\n")
    return "".join(parts)
