"""The manifest of a published set: which library files, compiled segments and access files it holds.

A published set is content-addressed blobs (`objects/sha256/<hex>`, written once, never changed)
and one `manifest.json` naming them, written last. A replica switches sets only when the manifest
changes, so a publish is all-or-nothing for every replica; the blobs a manifest names exist before
it does. The manifest is read strictly (unknown fields, wrong types and unsafe paths are refused
with one line), because a replica writes files at the paths it names: a path is relative, made of
`/`-separated parts that are not empty, `.`, `..` nor hidden, without backslashes or controls.

    {"format": "polymath-host/published-2", "published_at": "2026-11-25T17:00:00Z",
     "libraries": [{"path": "access/team/notes.json", "sha256": "<hex>", "size": 123, "mtime_ns": 1,
                    "segment": "018c2e4f9a10-3fa1b2c4", "member": 0}],
     "segments": [{"name": "018c2e4f9a10-3fa1b2c4", "store_format": 11,
                   "files": [{"name": "embeddings.npy", "sha256": "<hex>", "size": 4096}, ...]}],
     "access": {"sha256": "<hex>", "size": 456} | null,
     "publishers": [{"folder": "writers/ada", "sha256": "<hex>", "size": 321}]}

`segment` and `member` (with `--compiled`) say which published segment serves the file
(host/catalog/plan.py): a replica of the same store format puts the segments in place and serves
them without compiling. A segment is immutable and named once: a change to one library publishes
that library's file and the small segment it was compiled into, nothing of the others. `mtime_ns`
is the publisher's modification time of the file: a replica gives the file that time, so its plan
matches without hashing the file again. `publishers` are the edge editions of the access files of
publisher folders (host/catalog/scopes.py), each put at `<folder>/access.SECRET.json`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FORMAT = "polymath-host/published-2"  # 2: segments of many library files, publishers' access files
MANIFEST_KEY = "manifest.json"
MANIFEST_LIMIT = 64 << 20  # bytes: a manifest names files, it never holds them
OBJECTS = "objects/sha256"
_HEX = re.compile(r"[0-9a-f]{64}")
_PART = re.compile(r"[^/\\\x00-\x1f\x7f]+")


class ManifestError(ValueError):
    """A manifest that cannot be trusted; one line saying what is wrong with it."""


@dataclass(frozen=True)
class Blob:
    sha256: str
    size: int

    @property
    def key(self) -> str:
        return f"{OBJECTS}/{self.sha256}"


@dataclass(frozen=True)
class CompiledFile:
    name: str
    blob: Blob


@dataclass(frozen=True)
class PublishedLibrary:
    path: str  # relative, "/"-separated, ends in .json: where the file goes in the replica's folder
    blob: Blob
    mtime_ns: int
    segment: str | None = None  # the published segment serving it; None: none (a replica compiles it)
    member: int = 0  # its member number in that segment

    @property
    def name(self) -> str:
        return self.path.removesuffix(".json")


@dataclass(frozen=True)
class PublishedSegment:
    name: str  # a folder name
    store_format: int
    files: tuple[CompiledFile, ...]


@dataclass(frozen=True)
class PublishedScope:
    folder: str  # a publisher folder: its access file's edge edition goes at <folder>/access.SECRET.json
    blob: Blob


@dataclass(frozen=True)
class Manifest:
    libraries: tuple[PublishedLibrary, ...]
    access: Blob | None = None
    published_at: str = ""
    segments: tuple[PublishedSegment, ...] = ()
    publishers: tuple[PublishedScope, ...] = ()

    def blobs(self) -> list[Blob]:
        """Every blob the set needs, each once, in a stable order."""
        found: dict[str, Blob] = {}
        for library in self.libraries:
            found.setdefault(library.blob.sha256, library.blob)
        for segment in self.segments:
            for file in segment.files:
                found.setdefault(file.blob.sha256, file.blob)
        if self.access:
            found.setdefault(self.access.sha256, self.access)
        for scope in self.publishers:
            found.setdefault(scope.blob.sha256, scope.blob)
        return list(found.values())

    def library(self, path: str) -> PublishedLibrary | None:
        return next((library for library in self.libraries if library.path == path), None)


def render_manifest(manifest: Manifest) -> bytes:
    def blob(item: Blob) -> dict[str, Any]:
        return {"sha256": item.sha256, "size": item.size}

    def library(item: PublishedLibrary) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": item.path, **blob(item.blob), "mtime_ns": item.mtime_ns}
        if item.segment is not None:
            entry.update(segment=item.segment, member=item.member)
        return entry

    def segment(item: PublishedSegment) -> dict[str, Any]:
        return {"name": item.name, "store_format": item.store_format,
                "files": [{"name": file.name, **blob(file.blob)} for file in item.files]}

    document = {"format": FORMAT, "published_at": manifest.published_at,
                "libraries": [library(item) for item in manifest.libraries],
                "segments": [segment(item) for item in manifest.segments],
                "access": blob(manifest.access) if manifest.access else None,
                "publishers": [{"folder": item.folder, **blob(item.blob)} for item in manifest.publishers]}
    return (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode()


def parse_manifest(body: bytes, where: str) -> Manifest:
    """The manifest in `body`, or ManifestError naming `where` and the first problem."""
    try:
        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as problem:
        raise ManifestError(f"{where}: not a JSON manifest ({str(problem).splitlines()[0][:120]})") from None
    try:
        return _manifest(document)
    except ManifestError as problem:
        raise ManifestError(f"{where}: {problem}") from None


def _manifest(document: Any) -> Manifest:
    _fields(document, "the manifest", {"format", "published_at", "libraries", "segments", "access", "publishers"},
            {"format", "libraries"})
    if document["format"] != FORMAT:
        raise ManifestError(f"format {document['format']!r} is not {FORMAT!r} (publish with this version, "
                            "or upgrade the replica)")
    published_at = document.get("published_at", "")
    if not isinstance(published_at, str):
        raise ManifestError("published_at: must be a string")
    entries = document["libraries"]
    if not isinstance(entries, list):
        raise ManifestError("libraries: must be a list")
    libraries = tuple(_library(entry, f"libraries[{index}]") for index, entry in enumerate(entries))
    seen: set[str] = set()
    for library in libraries:
        if library.path.lower() in seen:
            raise ManifestError(f"libraries: {library.path!r} is listed twice")
        seen.add(library.path.lower())
    segments = tuple(_segment(entry, f"segments[{index}]") for index, entry in enumerate(_list(document, "segments")))
    names = {segment.name for segment in segments}
    if len(names) != len(segments):
        raise ManifestError("segments: a name is listed twice")
    for index, library in enumerate(libraries):
        if library.segment is not None and library.segment not in names:
            raise ManifestError(f"libraries[{index}].segment: {library.segment!r} is not among the segments")
    publishers = tuple(_publisher(entry, f"publishers[{index}]")
                       for index, entry in enumerate(_list(document, "publishers")))
    if len({scope.folder for scope in publishers}) != len(publishers):
        raise ManifestError("publishers: a folder is listed twice")
    access = document.get("access")
    return Manifest(libraries, None if access is None else _blob(access, "access"), published_at, segments, publishers)


def _list(document: dict[str, Any], name: str) -> list[Any]:
    value = document.get(name, [])
    if not isinstance(value, list):
        raise ManifestError(f"{name}: must be a list")
    return value


def _library(entry: Any, where: str) -> PublishedLibrary:
    _fields(entry, where, {"path", "sha256", "size", "mtime_ns", "segment", "member"}, {"path", "sha256", "size", "mtime_ns"})
    path = entry["path"]
    if not is_safe_path(path) or not path.endswith(".json"):
        raise ManifestError(f"{where}.path: {str(path)[:200]!r} is not a relative path of a .json file")
    mtime_ns = _integer(entry["mtime_ns"], f"{where}.mtime_ns")
    segment = entry.get("segment")
    if segment is not None and (not is_safe_path(segment) or "/" in segment):
        raise ManifestError(f"{where}.segment: {str(segment)[:200]!r} is not a segment's name")
    return PublishedLibrary(path, _blob(entry, where), mtime_ns, segment, _integer(entry.get("member", 0), f"{where}.member"))


def _segment(entry: Any, where: str) -> PublishedSegment:
    _fields(entry, where, {"name", "store_format", "files"}, {"name", "store_format", "files"})
    name = entry["name"]
    if not is_safe_path(name) or "/" in name:
        raise ManifestError(f"{where}.name: {str(name)[:200]!r} is not a folder name")
    store_format = _integer(entry["store_format"], f"{where}.store_format")
    if not isinstance(entry["files"], list):
        raise ManifestError(f"{where}.files: must be a list")
    files = []
    for index, file in enumerate(entry["files"]):
        _fields(file, f"{where}.files[{index}]", {"name", "sha256", "size"}, {"name", "sha256", "size"})
        file_name = file["name"]
        if not is_safe_path(file_name) or "/" in file_name:
            raise ManifestError(f"{where}.files[{index}].name: {str(file_name)[:200]!r} is not a file name")
        files.append(CompiledFile(file_name, _blob(file, f"{where}.files[{index}]")))
    if len({file.name for file in files}) != len(files):
        raise ManifestError(f"{where}.files: a name is listed twice")
    return PublishedSegment(name, store_format, tuple(files))


def _publisher(entry: Any, where: str) -> PublishedScope:
    _fields(entry, where, {"folder", "sha256", "size"}, {"folder", "sha256", "size"})
    folder = entry["folder"]
    if not is_safe_path(folder):
        raise ManifestError(f"{where}.folder: {str(folder)[:200]!r} is not a relative folder")
    return PublishedScope(folder, _blob(entry, where))


def _blob(entry: Any, where: str) -> Blob:
    if not isinstance(entry, dict):
        raise ManifestError(f"{where}: must be an object with sha256 and size")
    sha256 = entry.get("sha256")
    if not isinstance(sha256, str) or not _HEX.fullmatch(sha256):
        raise ManifestError(f"{where}.sha256: must be 64 lowercase hexadecimal digits")
    return Blob(sha256, _integer(entry.get("size"), f"{where}.size"))


def _integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ManifestError(f"{where}: must be a whole number >= 0")
    return value


def _fields(entry: Any, where: str, allowed: set[str], required: set[str]) -> None:
    if not isinstance(entry, dict):
        raise ManifestError(f"{where}: must be an object")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ManifestError(f"{where}: unknown field {unknown[0]!r}")
    missing = sorted(required - set(entry))
    if missing:
        raise ManifestError(f"{where}: missing field {missing[0]!r}")


def is_safe_path(path: Any) -> bool:
    """A relative `/`-separated path that stays inside the folder it is joined to, and is not hidden."""
    if not isinstance(path, str) or not path or len(path) > 1024:
        return False
    return all(part not in (".", "..") and not part.startswith(".") and _PART.fullmatch(part)
               for part in path.split("/"))
