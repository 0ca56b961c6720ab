"""Which library files a folder holds, and the loaded set of them grouped by embedding model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from host.library_format import LibraryFormatError
from host.store import DEFAULT_MAX_SOURCE_BYTES, CompiledLibrary, load_library

COMPILED_FOLDER = ".compiled"


@dataclass(frozen=True)
class LibraryFile:
    path: Path
    name: str  # relative path without ".json", with "/" separators: the URL name
    access_tag: str | None


def access_tag_for(relative: Path) -> str | None:
    """`access/<tag>/...` (the folder after the first `access` folder) tags every bit."""
    parts = relative.parts[:-1]
    if "access" in parts:
        position = parts.index("access")
        if position + 1 < len(parts):
            return parts[position + 1]
    return None


def is_library_file(relative: Path) -> bool:
    """JSON files, but never `.SECRET.` ones nor anything in hidden folders (the cache)."""
    return (
        relative.suffix == ".json"
        and ".SECRET." not in relative.name
        and not any(part.startswith(".") for part in relative.parts)
    )


def discover(root: Path) -> list[LibraryFile]:
    """Library files under `root` (or `root` itself if it is a file), in a stable order."""
    if root.is_file():
        return [LibraryFile(root, root.stem, None)]
    found = []
    for path in sorted(root.rglob("*.json")):
        relative = path.relative_to(root)
        if is_library_file(relative) and path.is_file():
            found.append(LibraryFile(path, relative.with_suffix("").as_posix(), access_tag_for(relative)))
    return found


def default_cache_dir(root: Path) -> Path:
    return (root.parent if root.is_file() else root) / COMPILED_FOLDER


@dataclass
class ModelIndex:
    """Every library of one embedding model, addressed by one global row number."""

    model: str
    dimension: int
    libraries: tuple[CompiledLibrary, ...]
    offsets: np.ndarray  # row where each library starts, plus the total
    token_counts: np.ndarray
    tag_ids: np.ndarray  # into `tags`; 0 is public
    tags: tuple[str, ...]
    ids: np.ndarray  # canonical ids (S32) of every row
    has_duplicates: bool  # the same bit in two libraries
    _masks: dict[frozenset[str], np.ndarray | None] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def build(cls, libraries: tuple[CompiledLibrary, ...]) -> ModelIndex:
        tags: list[str] = [""]
        tag_ids = []
        for library in libraries:
            mapping = np.array([_intern(tags, tag) for tag in library.tags], dtype=np.uint16)
            tag_ids.append(mapping[library.tag_ids])
        offsets = np.zeros(len(libraries) + 1, dtype=np.int64)
        np.cumsum([library.bit_count for library in libraries], out=offsets[1:])
        ids = np.concatenate([library.ids for library in libraries])
        return cls(
            model=libraries[0].embedding_model,
            dimension=libraries[0].dimension,
            libraries=libraries,
            offsets=offsets,
            token_counts=np.concatenate([library.token_counts for library in libraries]).astype(np.int64),
            tag_ids=np.concatenate(tag_ids),
            tags=tuple(tags),
            ids=ids,
            has_duplicates=_has_duplicates(ids),
        )

    @property
    def bit_count(self) -> int:
        return int(self.offsets[-1])

    @property
    def max_norm(self) -> float:
        return max(library.max_norm for library in self.libraries)

    def locate(self, row: int) -> tuple[CompiledLibrary, int]:
        position = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.libraries[position], row - int(self.offsets[position])

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The embeddings of some global rows, in that order (read in row order from the maps)."""
        order = np.argsort(rows)
        gathered = np.empty((len(rows), self.dimension), dtype=np.float32)
        sorted_rows = rows[order]
        bounds = np.searchsorted(sorted_rows, self.offsets)
        for position, library in enumerate(self.libraries):
            start, stop = bounds[position], bounds[position + 1]
            if stop > start:
                gathered[order[start:stop]] = library.embeddings[sorted_rows[start:stop] - self.offsets[position]]
        return gathered

    def visible_count(self, granted: frozenset[str]) -> int:
        mask = self.visible_rows(granted)
        return self.bit_count if mask is None else int(np.count_nonzero(mask))

    def visible_rows(self, granted: frozenset[str]) -> np.ndarray | None:
        """Bool mask of rows a caller holding `granted` tags may see; None means every row."""
        key = frozenset(tag for tag in granted if tag in self.tags)
        with self._lock:
            if key not in self._masks:
                self._masks[key] = self._mask_for(key)
            return self._masks[key]

    def _mask_for(self, granted: frozenset[str]) -> np.ndarray | None:
        allowed = [0, *(self.tags.index(tag) for tag in granted)]
        if len(allowed) == len(self.tags) and not self.has_duplicates:
            return None
        mask = np.isin(self.tag_ids, allowed)
        if self.has_duplicates:
            # The first copy *this caller may see* wins, so a private copy listed first never
            # hides the public one from a caller without the tag.
            rows = np.flatnonzero(mask)
            _, first = np.unique(self.ids[rows], return_index=True)
            mask = np.zeros(len(mask), dtype=bool)
            mask[rows[first]] = True
        return mask


def _has_duplicates(ids: np.ndarray) -> bool:
    """Whether two rows share an id. Ids are SHA-256 digests: distinct 8-byte prefixes prove
    distinct ids, so the full comparison (0.9 s for 1M ids) runs only on a prefix collision."""
    heads = np.sort(np.ascontiguousarray(ids, dtype="S32").view("<u8")[::4])
    return bool(np.any(heads[1:] == heads[:-1])) and len(np.unique(ids)) < len(ids)


def _intern(tags: list[str], tag: str) -> int:
    if tag not in tags:
        tags.append(tag)
    return tags.index(tag)


@dataclass(frozen=True)
class Catalog:
    """An immutable generation of loaded libraries; a reload builds a new one and swaps it in."""

    generation: int
    libraries: tuple[CompiledLibrary, ...]
    models: dict[str, ModelIndex]
    problems: tuple[str, ...] = ()

    def public_libraries(self) -> list[CompiledLibrary]:
        return [library for library in self.libraries if library.visible_bit_count(frozenset())]

    def library(self, name: str) -> CompiledLibrary | None:
        return next((library for library in self.libraries if library.name == name), None)


def load_catalog(
    root: Path,
    *,
    cache_dir: Path | None = None,
    previous: Catalog | None = None,
    max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
    progress: Callable[[str], None] | None = None,
) -> Catalog:
    """Load every library under `root`, compiling what changed, as the next generation.

    A bad file is reported in `problems` (one line each, naming the file) and skipped: one
    publisher's broken file must not take the others offline. With `previous` (a reload), an
    unchanged library is reused as it is, and a library whose file went bad keeps serving its
    previous version.
    """
    cache_dir = cache_dir or default_cache_dir(root)
    earlier = {library.name: library for library in previous.libraries} if previous else {}
    loaded: list[CompiledLibrary] = []
    problems: list[str] = []
    for entry in discover(root):
        before = earlier.get(entry.name)
        try:
            if before is not None and before.source_key.matches_stat(entry.path.stat()):
                loaded.append(before)
                continue
            library, compiled = load_library(
                entry.path,
                cache_dir / entry.name,
                name=entry.name,
                access_tag=entry.access_tag,
                max_bytes=max_bytes,
            )
        except (LibraryFormatError, OSError) as problem:
            kept = "; still serving its previous version" if before is not None else ""
            problems.append(f"{entry.path}: {problem}{kept}")
            if before is not None:
                loaded.append(before)
            continue
        if progress:
            verb = "compiled" if compiled else "opened"
            progress(f"{verb} {entry.name}: {library.bit_count} bits, {library.embedding_model}")
        loaded.append(library)
    generation = previous.generation + 1 if previous else 1
    models, kept, conflicts = group_by_model(loaded)
    return Catalog(generation, tuple(kept), models, tuple(problems + conflicts))


def group_by_model(libraries: Iterable[CompiledLibrary]) -> tuple[dict[str, ModelIndex], list[CompiledLibrary], list[str]]:
    """Index libraries by model. A library whose dimension differs from its model's first is refused."""
    groups: dict[str, list[CompiledLibrary]] = {}
    kept: list[CompiledLibrary] = []
    problems: list[str] = []
    for library in libraries:
        members = groups.setdefault(library.embedding_model, [])
        if members and library.bit_count and library.dimension != members[0].dimension:
            problems.append(
                f"{library.source}: dimension {library.dimension} differs from {members[0].dimension} "
                f"of {members[0].name}, the first library of {library.embedding_model}"
            )
            continue
        kept.append(library)
        if library.bit_count:
            members.append(library)
    return {model: ModelIndex.build(tuple(members)) for model, members in groups.items() if members}, kept, problems
