"""Which files of the SOURCE paths are writing to import, and of what kind, in a stable order.

Folders are walked in sorted order (folders and files sorted by name at each level, without
following symbolic links to folders), so the same tree always gives the same library. Never
read: anything hidden (a name starting with "."; `.git`, drafts folders, editor files) and any
file with `.SECRET.` in its name. Files of an unknown kind are skipped and counted by suffix.
A feed is told from other XML by its first element (`rss`, `feed` or `rdf:RDF`).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from host.importer.errors import ImporterError

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdown", ".mkd"})
KIND_BY_SUFFIX = {
    **dict.fromkeys(MARKDOWN_SUFFIXES, "markdown"),
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".xml": "feed",
    ".rss": "feed",
    ".atom": "feed",
}
_FEED_ROOT = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?(rss|feed|RDF)[\s>/]")
_FEED_SNIFF_BYTES = 4096


@dataclass(frozen=True)
class SourceFile:
    """A file to import. `relative` is its path under the SOURCE it was found in, with `/`
    separators (for a SOURCE that is a file: its name); URLs are made from it."""

    path: Path
    relative: str
    kind: str


@dataclass
class Found:
    files: list[SourceFile] = field(default_factory=list)
    skipped_by_suffix: Counter[str] = field(default_factory=Counter)
    not_feeds: int = 0  # .xml files that are some other XML


def find_sources(sources: list[Path]) -> Found:
    """Every file to import under `sources`, in the order given; a file reached twice is read once.

    Raises ImporterError for a SOURCE that does not exist: a mistyped path must not quietly
    publish a library without that writing.
    """
    found = Found()
    seen: set[Path] = set()
    for source in sources:
        if not source.exists():
            raise ImporterError(f"{source}: does not exist")
        if source.is_file():
            candidates = [(source, source.name)]
        else:
            candidates = [(path, path.relative_to(source).as_posix()) for path in _walk(source)]
        for path, relative in candidates:
            resolved = path.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            kind = kind_of(path)
            if kind is None:
                found.skipped_by_suffix[path.suffix.lower() or "(no suffix)"] += 1
            elif kind == "feed" and not looks_like_a_feed(path):
                found.not_feeds += 1
            else:
                found.files.append(SourceFile(path, relative, kind))
    return found


def is_hidden_or_secret(name: str) -> bool:
    return name.startswith(".") or ".SECRET." in name


def _walk(root: Path) -> list[Path]:
    files: list[Path] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if not is_hidden_or_secret(name))
        files.extend(Path(folder) / name for name in sorted(names) if not is_hidden_or_secret(name))
    # os.walk visits a folder's files before its subfolders; sort the whole list by path parts so
    # `a/b.md` and `a.md` come in one well-defined order however the walk met them.
    return sorted(files, key=lambda path: path.relative_to(root).parts)


def kind_of(path: Path) -> str | None:
    return KIND_BY_SUFFIX.get(path.suffix.lower())


def looks_like_a_feed(path: Path) -> bool:
    """True when the first element of an XML file is an RSS, Atom or RSS 1.0 (RDF) root."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_FEED_SNIFF_BYTES)
    except OSError:
        return True  # let the reader report the file as unreadable, naming it
    return _FEED_ROOT.search(head) is not None
