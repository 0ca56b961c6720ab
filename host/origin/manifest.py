"""The manifest of a published set: which library files, compiled stores and access file it holds.

A published set is content-addressed blobs (`objects/sha256/<hex>`, written once, never changed)
and one `manifest.json` naming them, written last. A replica switches sets only when the manifest
changes, so a publish is all-or-nothing for every replica; the blobs a manifest names exist before
it does. The manifest is read strictly (unknown fields, wrong types and unsafe paths are refused
with one line), because a replica writes files at the paths it names: a path is relative, made of
`/`-separated parts that are not empty, `.`, `..` nor hidden, without backslashes or controls.

    {"format": "polymath-host/published-1", "published_at": "2026-11-25T17:00:00Z",
     "libraries": [{"path": "access/team/notes.json", "sha256": "<hex>", "size": 123, "mtime_ns": 1,
                    "compiled": {"store_format": 6, "files": [{"name": "embeddings.npy", "sha256": "<hex>",
                                                               "size": 4096}, ...]}}],
     "access": {"sha256": "<hex>", "size": 456} | null}

`mtime_ns` is the publisher's modification time of the file, which its compiled store's source key
holds: a replica gives the file that time, so the store opens without hashing the file again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FORMAT = "polymath-host/published-1"
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
    store_format: int | None = None  # of the compiled store published beside it; None: none
    compiled: tuple[CompiledFile, ...] = ()

    @property
    def name(self) -> str:
        return self.path.removesuffix(".json")


@dataclass(frozen=True)
class Manifest:
    libraries: tuple[PublishedLibrary, ...]
    access: Blob | None = None
    published_at: str = ""

    def blobs(self) -> list[Blob]:
        """Every blob the set needs, each once, in a stable order."""
        found: dict[str, Blob] = {}
        for library in self.libraries:
            found.setdefault(library.blob.sha256, library.blob)
            for file in library.compiled:
                found.setdefault(file.blob.sha256, file.blob)
        if self.access:
            found.setdefault(self.access.sha256, self.access)
        return list(found.values())

    def library(self, path: str) -> PublishedLibrary | None:
        return next((library for library in self.libraries if library.path == path), None)


def render_manifest(manifest: Manifest) -> bytes:
    def blob(item: Blob) -> dict[str, Any]:
        return {"sha256": item.sha256, "size": item.size}

    def library(item: PublishedLibrary) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": item.path, **blob(item.blob), "mtime_ns": item.mtime_ns}
        if item.store_format is not None:
            entry["compiled"] = {"store_format": item.store_format,
                                 "files": [{"name": file.name, **blob(file.blob)} for file in item.compiled]}
        return entry

    document = {"format": FORMAT, "published_at": manifest.published_at,
                "libraries": [library(item) for item in manifest.libraries],
                "access": blob(manifest.access) if manifest.access else None}
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
    _fields(document, "the manifest", {"format", "published_at", "libraries", "access"}, {"format", "libraries"})
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
    access = document.get("access")
    return Manifest(libraries, None if access is None else _blob(access, "access"), published_at)


def _library(entry: Any, where: str) -> PublishedLibrary:
    _fields(entry, where, {"path", "sha256", "size", "mtime_ns", "compiled"}, {"path", "sha256", "size", "mtime_ns"})
    path = entry["path"]
    if not is_safe_path(path) or not path.endswith(".json"):
        raise ManifestError(f"{where}.path: {str(path)[:200]!r} is not a relative path of a .json file")
    mtime_ns = _integer(entry["mtime_ns"], f"{where}.mtime_ns")
    compiled = entry.get("compiled")
    if compiled is None:
        return PublishedLibrary(path, _blob(entry, where), mtime_ns)
    _fields(compiled, f"{where}.compiled", {"store_format", "files"}, {"store_format", "files"})
    store_format = _integer(compiled["store_format"], f"{where}.compiled.store_format")
    if not isinstance(compiled["files"], list):
        raise ManifestError(f"{where}.compiled.files: must be a list")
    files = []
    for index, file in enumerate(compiled["files"]):
        _fields(file, f"{where}.compiled.files[{index}]", {"name", "sha256", "size"}, {"name", "sha256", "size"})
        name = file["name"]
        if not is_safe_path(name) or "/" in name:
            raise ManifestError(f"{where}.compiled.files[{index}].name: {str(name)[:200]!r} is not a file name")
        files.append(CompiledFile(name, _blob(file, f"{where}.compiled.files[{index}]")))
    if len({file.name for file in files}) != len(files):
        raise ManifestError(f"{where}.compiled.files: a name is listed twice")
    return PublishedLibrary(path, _blob(entry, where), mtime_ns, store_format, tuple(files))


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
