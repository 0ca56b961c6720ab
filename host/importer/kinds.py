"""Every kind of writing the importer reads, in one table: its name, its files' suffixes, how its
content is recognised, and the functions that read it.

A kind is found for a file by its name and, where a suffix is shared, by its content: the first
kind in `KINDS` whose suffixes include the file's and whose `sniff` (if it has one) accepts it. A
folder is an unzipped export when a kind with `folder=True` sniffs it as one. `--format NAME`
skips detection and takes the kind by name.

- `read(data, fallback_title)`: a file's bytes (or an export part's `data`) into documents;
  raises ImporterError naming what is wrong, or `Draft` for a page its author left unpublished.
- `expand(path, options)`: for an export, its posts as `Part`s (see `exports`), each then read by
  `read`; None for a file that is one piece of writing (a feed is one file of many documents).
- `sniff(probe)`: whether the file (its first bytes, or the names in a zip or folder) is of this
  kind; None when the suffix alone says so.
- `named_only`: a file of the kind is read when named as a SOURCE (or by `--format`), never found
  in a folder: images are scanned pages when named, but a folder of writing holds pictures far more
  often than scans, and OCR would make text of every photo.

Adding a kind is one line here and a module with its `read` (and `sniff`, `expand`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from host.importer.errors import ImporterError
from host.importer.exports import Expansion, ExportOptions, ghost, medium, substack, wordpress, x
from host.importer.probe import Probe
from host.importer.readers import Reader, docx, epub, feed, html, image, markdown, pdf, plain

Sniff = Callable[[Probe], bool]
Expander = Callable[[Path, ExportOptions], Expansion]


@dataclass(frozen=True)
class Kind:
    name: str
    read: Reader
    suffixes: frozenset[str] = frozenset()
    sniff: Sniff | None = None
    expand: Expander | None = None
    folder: bool = False  # an unzipped export: a folder may be one
    describes: str = ""  # for --help: what the kind is
    named_only: bool = False  # read only when named as a SOURCE, never found in a folder


MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdown", ".mkd"})
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff"})

KINDS: tuple[Kind, ...] = (
    Kind("markdown", markdown.read, MARKDOWN_SUFFIXES, describes="Markdown with front matter"),
    Kind("text", plain.read, frozenset({".txt", ".text"}), describes="plain text"),
    Kind("html", html.read, frozenset({".html", ".htm", ".xhtml"}), describes="an HTML page"),
    Kind("wordpress", wordpress.read, frozenset({".xml"}), sniff=wordpress.sniff, expand=wordpress.expand,
         describes="WordPress's export (WXR .xml): published posts and pages"),
    Kind("feed", feed.read, frozenset({".xml", ".rss", ".atom"}), sniff=feed.sniff, describes="an RSS or Atom feed"),
    Kind("pdf", pdf.read, frozenset({".pdf"}), describes="a PDF (pages without a text layer by OCR: the ocr extra)"),
    Kind("docx", docx.read, frozenset({".docx"}), describes="a Word document (also Google Docs' download as Word)"),
    Kind("epub", epub.read, frozenset({".epub"}), describes="an EPUB book: one document per chapter, #chapter-N"),
    Kind("image", image.read, IMAGE_SUFFIXES, named_only=True,
         describes="a scanned page (PNG, JPEG, TIFF) read by OCR (the ocr extra); named, not found in folders"),
    Kind("substack", substack.read, frozenset({".zip"}), sniff=substack.sniff, expand=substack.expand, folder=True,
         describes="Substack's export zip (posts.csv, posts/*.html); pass --base-url https://NAME.substack.com/"),
    Kind("medium", medium.read, frozenset({".zip"}), sniff=medium.sniff, expand=medium.expand, folder=True,
         describes="Medium's export zip (posts/*.html)"),
    Kind("ghost", ghost.read, frozenset({".json"}), sniff=ghost.sniff, expand=ghost.expand,
         describes="Ghost's JSON export; pass --base-url https://your.site/"),
    Kind("x", x.read, frozenset({".zip"}), sniff=x.sniff, expand=x.expand, folder=True,
         describes="an X (Twitter) archive zip (data/tweets.js): one bit per thread"),
)
KIND_BY_NAME = {kind.name: kind for kind in KINDS}


def kind_named(name: str) -> Kind:
    """The kind `--format NAME` asks for (ImporterError listing the names when there is none)."""
    kind = KIND_BY_NAME.get(name.lower())
    if kind is None:
        raise ImporterError(f"--format {name}: not a format this importer reads; use one of "
                            f"{', '.join(sorted(KIND_BY_NAME))}")
    return kind


def kinds_for(suffix: str, named: bool = True) -> list[Kind]:
    """The kinds whose files may end in `suffix`, in the table's order (for a file found in a folder,
    not `named`, only kinds read there)."""
    return [kind for kind in KINDS if suffix.lower() in kind.suffixes and (named or not kind.named_only)]


def read_only_when_named(suffix: str) -> bool:
    """Whether a file ending in `suffix` is read only where it is named as a SOURCE (an image)."""
    kinds = kinds_for(suffix)
    return bool(kinds) and all(kind.named_only for kind in kinds)


def detect(probe: Probe, candidates: list[Kind]) -> Kind | None:
    """The first candidate that recognises what `probe` looks at."""
    for kind in candidates:
        if kind.sniff is None or kind.sniff(probe):
            return kind
    return None


def detect_folder(folder: Path) -> Kind | None:
    """The export kind of an unzipped export folder, or None for a folder of writing to walk."""
    probe = Probe(folder)
    try:
        return detect(probe, [kind for kind in KINDS if kind.folder])
    finally:
        probe.close()
