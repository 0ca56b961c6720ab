"""Which files of the SOURCE paths are writing to import, and of what kind, in a stable order.

Folders are walked in sorted order (folders and files sorted by name at each level, without
following symbolic links to folders), so the same tree always gives the same library. Never
read: anything hidden (a name starting with "."; `.git`, drafts folders, editor files) and any
file with `.SECRET.` in its name. A file's kind comes from its name and, where names are shared,
its content (`kinds`: a feed is told from other XML by its first element, a WordPress export
from a feed, an export zip by its layout); files of no kind are skipped and counted by suffix.
A folder that is an unzipped export (Substack's, Medium's, an X archive) is read as that export,
not walked. Images (scanned pages, read by OCR) are read only when named as a SOURCE: in a folder
they are skipped and counted like files of no kind (`kinds.Kind.named_only`). `--format NAME`
gives every SOURCE named that kind instead.

An export becomes one `SourceFile` per post (`exports`). An export that cannot be read at all is
one line in `Found.failed`; a post of it that cannot be read is one line too, the others imported.

A SOURCE that is an http(s) URL (a string, not a path) is a website: `read_site` (the pipeline's
`website.source.read_site`) crawls it into one `SourceFile` per page, its `url` the page's own.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from host.importer.errors import ImporterError, MissingExtra
from host.importer.exports import ExportOptions
from host.importer.kinds import (
    MARKDOWN_SUFFIXES,
    Kind,
    detect,
    detect_folder,
    kind_named,
    kinds_for,
    read_only_when_named,
)
from host.importer.probe import Probe
from host.importer.readers import fallback_title
from host.importer.website.addresses import is_web_address

__all__ = ["MARKDOWN_SUFFIXES", "Found", "SourceFile", "find_sources"]


@dataclass(frozen=True)
class SourceFile:
    """A file to import, or one post of an export. `relative` is its path under the SOURCE it was
    found in, with `/` separators (for a SOURCE that is a file: its name; for a post, the export's
    followed by `/` and `member`); URLs and cache keys are made from it. A post's bytes are `data`,
    taken out of the export when it was found. A page of a website has its `url` (also its
    `relative`), its bytes in `data`, and no `path` to speak of (`Path()`)."""

    path: Path
    relative: str
    kind: str
    member: str | None = None  # where in the export at `path` the post is (a zip member, `item 3 (hello)`)
    data: bytes | None = None
    url: str | None = None  # a web page's URL: the page's URL in the library, whatever --base-url says

    @property
    def name(self) -> str:
        """How messages name it: the file, or the export and the post in it, or the page's URL."""
        if self.url is not None:
            return self.url
        return str(self.path) if self.member is None else f"{self.path}: {self.member}"

    def load(self) -> bytes:
        return self.data if self.data is not None else self.path.read_bytes()

    def fallback_title(self) -> str:
        if self.url is not None:
            return fallback_title(PurePosixPath(self.url.split("?", 1)[0].rstrip("/")))
        return fallback_title(PurePosixPath(self.member) if self.member else self.path)


@dataclass
class Found:
    files: list[SourceFile] = field(default_factory=list)
    skipped_by_suffix: Counter[str] = field(default_factory=Counter)
    not_feeds: int = 0  # .xml files that are some other XML
    skipped: Counter[str] = field(default_factory=Counter)  # posts an export left out, by reason (`exports.SKIPS`)
    failed: list[str] = field(default_factory=list)  # "path: problem" for exports (or their posts) that failed


SiteReader = Callable[[str], tuple[list[SourceFile], list[str]]]  # a website's pages, and its failures' lines


def find_sources(sources: Sequence[Path | str], format: str | None = None, options: ExportOptions | None = None,
                 read_site: SiteReader | None = None) -> Found:
    """Every file (and export post, and web page) to import under `sources`, in the order given; a file
    reached twice is read once. `format`: the kind to read every SOURCE file as, instead of detecting it.

    Raises ImporterError for a SOURCE that does not exist, or that `format` cannot read: a mistyped
    path must not quietly publish a library without that writing.
    """
    options = options or ExportOptions()
    found = Found()
    seen: set[Path] = set()
    forced = kind_named(format) if format else None
    named = {Path(given).resolve() for given in sources if not isinstance(given, str) or not is_web_address(given)}
    for given in sources:
        if isinstance(given, str) and is_web_address(given):
            if read_site is None:
                raise ImporterError(f"{given}: a website; this import reads files only")
            pages, failed = read_site(given)
            found.files.extend(pages)
            found.failed.extend(failed)
            continue
        source = Path(given)
        if not source.exists():
            raise ImporterError(f"{source}: does not exist")
        if forced is not None:
            if source.is_dir() and not forced.folder:
                raise ImporterError(f"--format {forced.name}: {source} is a folder; name its files, or leave "
                                    "--format out to have each file's kind found")
            candidates: list[tuple[Path, str, Kind | None]] = [(source, source.name, forced)]
        elif source.is_file():
            candidates = [(source, source.name, None)]
        else:
            candidates = [(path, path.relative_to(source).as_posix() if path != source else source.name, kind)
                          for path, kind in _walk(source)]
        for path, relative, kind in candidates:
            resolved = path.resolve()
            if resolved in seen or (path != source and resolved in named and read_only_when_named(path.suffix)):
                continue  # an image named as a SOURCE too is read there, never skipped here
            seen.add(resolved)
            kind = kind or _kind_of_file(path, found, named=path == source)
            if kind is not None:
                _add(found, path, relative, kind, options)
    return found


def is_hidden_or_secret(name: str) -> bool:
    return name.startswith(".") or ".SECRET." in name


def _walk(root: Path) -> list[tuple[Path, Kind | None]]:
    """The files under `root`, and the unzipped exports in it (with their kind), not looked inside."""
    found: list[tuple[Path, Kind | None]] = []
    for folder, subfolders, names in os.walk(root):
        here = Path(folder)
        export = detect_folder(here)
        if export is not None:
            subfolders[:] = []
            found.append((here, export))
            continue
        subfolders[:] = sorted(name for name in subfolders if not is_hidden_or_secret(name))
        found.extend((here / name, None) for name in sorted(names) if not is_hidden_or_secret(name))
    # os.walk visits a folder's files before its subfolders; sort the whole list by path parts so
    # `a/b.md` and `a.md` come in one well-defined order however the walk met them.
    return sorted(found, key=lambda entry: entry[0].relative_to(root).parts)


def _kind_of_file(path: Path, found: Found, named: bool) -> Kind | None:
    """The file's kind by its name and content (some kinds only when `named` as a SOURCE); None (counted)
    when it is of none."""
    suffix = path.suffix.lower()
    candidates = kinds_for(suffix, named)
    probe = Probe(path)
    try:
        kind = detect(probe, candidates) if candidates else None
    finally:
        probe.close()
    if kind is None:
        if suffix == ".xml":
            found.not_feeds += 1
        else:
            found.skipped_by_suffix[suffix or "(no suffix)"] += 1
    return kind


def _add(found: Found, path: Path, relative: str, kind: Kind, options: ExportOptions) -> None:
    if kind.expand is None:
        found.files.append(SourceFile(path, relative, kind.name))
        return
    try:
        expansion = kind.expand(path, options)
    except ImporterError as problem:
        found.failed.append(f"{path}: {problem}")
        return
    except MissingExtra:
        raise
    except OSError as problem:
        found.failed.append(f"{path}: cannot be read ({problem.strerror or problem})")
        return
    except Exception as problem:  # a parser's own error on a damaged export: it fails, not the import
        said = " ".join(str(problem).split())
        found.failed.append(f"{path}: cannot be read ({type(problem).__name__}: {said})")
        return
    found.files.extend(SourceFile(path, f"{relative}/{part.member}", kind.name, part.member, part.data)
                       for part in expansion.parts)
    found.skipped.update(expansion.skipped)
    found.failed.extend(f"{path}: {problem}" for problem in expansion.problems)
