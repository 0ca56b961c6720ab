"""Which library files a folder holds, and the loaded set of them grouped by embedding model."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from host.catalog.model_index import ModelIndex
from host.library.problems import LibraryFormatError
from host.store.compiled import DEFAULT_MAX_SOURCE_BYTES, CompiledLibrary, StoreError, load_library, open_compiled
from host.store.progress import CompileProgress

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


def last_compiled(folder: Path, source: Path) -> CompiledLibrary | None:
    try:
        return open_compiled(folder, source) if (folder / "meta.json").exists() else None
    except StoreError:
        return None


def describe_problem(problem: Exception) -> str:
    """One line for what went wrong with a file: our own errors as they are, others with their type."""
    if isinstance(problem, LibraryFormatError | OSError):
        return str(problem)
    return f"{type(problem).__name__}: {str(problem).splitlines()[0] if str(problem) else 'unreadable'}"[:300]


def default_cache_dir(root: Path) -> Path:
    return (root.parent if root.is_file() else root) / COMPILED_FOLDER


@dataclass(frozen=True)
class Catalog:
    """An immutable generation of loaded libraries; a reload builds a new one and swaps it in."""

    generation: int
    libraries: tuple[CompiledLibrary, ...]
    models: dict[str, ModelIndex]
    problems: tuple[str, ...] = ()

    public_problems: int = 0  # problems with files outside `access/` folders (the rest are private)

    def public_libraries(self) -> list[CompiledLibrary]:
        return [library for library in self.libraries if library.visible_bit_count(frozenset())]

    def library(self, name: str) -> CompiledLibrary | None:
        return self._by_name.get(name)

    @cached_property
    def _by_name(self) -> dict[str, CompiledLibrary]:
        return {library.name: library for library in self.libraries}

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Every library's name, sorted by code point: what host/catalog/selection.py bisects."""
        return tuple(sorted(library.name for library in self.libraries))

    def public_fingerprint(self) -> tuple[tuple[str, str], ...]:
        """What anyone may see of this generation: a reload changes it only if the public view changed."""
        return tuple((library.name, library.public_digest) for library in self.public_libraries())


def load_catalog(
    root: Path,
    *,
    cache_dir: Path | None = None,
    previous: Catalog | None = None,
    max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
    progress: Callable[[str], None] | None = None,
    bars: bool = False,
) -> Catalog:
    """Load every library under `root`, compiling what changed, as the next generation.

    A bad file is reported in `problems` (one line each, naming the file) and skipped: one
    publisher's broken file must not take the others offline. With `previous` (a reload), an
    unchanged library is reused as it is, and a library whose file went bad keeps serving its
    previous version. With `bars`, a compile that takes more than two seconds shows how far it is
    on stderr (host/store/progress.py).
    """
    cache_dir = cache_dir or default_cache_dir(root)
    earlier = {library.name: library for library in previous.libraries} if previous else {}
    loaded: list[CompiledLibrary] = []
    problems: list[str] = []
    public_problems = 0
    for entry in discover(root):
        before = earlier.get(entry.name)
        try:
            if before is not None and before.source_key.matches_stat(entry.path.stat()):
                loaded.append(before)
                continue
            bar = CompileProgress(entry.name, entry.path.stat().st_size) if bars else None
            try:
                library, compiled = load_library(
                    entry.path,
                    cache_dir / entry.name,
                    name=entry.name,
                    access_tag=entry.access_tag,
                    max_bytes=max_bytes,
                    progress=bar,
                )
            finally:
                if bar is not None:
                    bar.close()
        except Exception as problem:  # one publisher's file, however broken, must not stop the others
            # Its previous version keeps serving: the one in memory, or else the last one compiled
            # (a worker starting while a publisher is mid-write must serve what the others serve).
            previous_version = before or last_compiled(cache_dir / entry.name, entry.path)
            still = "; still serving its previous version" if previous_version is not None else ""
            problems.append(f"{entry.path}: {describe_problem(problem)}{still}")
            public_problems += entry.access_tag is None
            if previous_version is not None:
                loaded.append(previous_version)
            continue
        if progress:
            verb = "compiled" if compiled else "opened"
            progress(f"{verb} {entry.name}: {library.bit_count} bits, {library.embedding_model}")
        loaded.append(library)
    generation = previous.generation + 1 if previous else 1
    models, kept, conflicts = group_by_model(loaded)
    refused = [library for library in loaded if not any(library is taken for taken in kept)]
    public_problems += sum(1 for library in refused if library.visible_bit_count(frozenset()))
    return Catalog(generation, tuple(kept), models, tuple(problems + conflicts), public_problems)


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
