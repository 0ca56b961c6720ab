"""Which library files a folder holds, and the loaded set of them grouped by embedding model.

A generation (`Catalog`) is immutable: a reload builds the next one and swaps it in. Loading one
follows the plan (host/catalog/plan.py): every library file still the one its segment was made from
is served from there as it is; the files that are new or changed are compiled into new segments
(host/store/packing.py: small ones packed together), whatever the number of files left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path, PurePath, PurePosixPath

from host.catalog.libraries import Library
from host.catalog.model_index import ModelIndex
from host.catalog.plan import (
    SEGMENTS,
    Placed,
    Plan,
    Refusals,
    Refused,
    new_segment_name,
    plan_lock,
    read_plan,
    read_refused,
    remove_unplanned,
    write_plan,
    write_refused,
)
from host.catalog.scopes import PUBLISHER_ACCESS_FILE, scope_of
from host.library.problems import LibraryFormatError
from host.store.compiled import DEFAULT_MAX_SOURCE_BYTES, Segment, StoreError, file_sha256, open_segment
from host.store.members import SourceKey
from host.store.packing import FileToCompile, Packer

COMPILED_FOLDER = ".compiled"
NAMED = 5  # libraries named when they are compiled together
log = logging.getLogger("polymath_host.catalog")


@dataclass(frozen=True)
class LibraryFile:
    path: Path
    name: str  # relative path without ".json", with "/" separators: the URL name
    access_tag: str | None
    scope: str = ""  # the publisher folder whose access file grants its tags ("" for the host's)


def access_tag_for(relative: PurePath) -> str | None:
    """`access/<tag>/...` (the folder after the first `access` folder) tags every bit."""
    parts = relative.parts[:-1]
    if "access" in parts:
        position = parts.index("access")
        if position + 1 < len(parts):
            return parts[position + 1]
    return None


def discover(root: Path) -> list[LibraryFile]:
    """Library files under `root` (or `root` itself if it is a file), in a stable order, each with
    the publisher folder it is in (the nearest folder below `root` holding an access file)."""
    return survey(root)[0]


def survey(root: Path) -> tuple[list[LibraryFile], list[str]]:
    """`discover`'s library files, and the publisher folders (those holding an access file), in one
    walk that never enters a hidden folder (the compiled cache): ten thousand files in ~30 ms."""
    if root.is_file():
        return [LibraryFile(root, root.stem, None)], []
    scopes: set[str] = set()
    names: list[str] = []
    folders = [""]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(root / folder if folder else root))
        except OSError:
            continue  # gone, or not readable: nothing of it is served
        for entry in entries:
            if entry.name.startswith("."):
                continue
            relative = f"{folder}/{entry.name}" if folder else entry.name
            if entry.is_dir():
                folders.append(relative)
            elif not entry.name.endswith(".json") or not entry.is_file():
                continue
            elif entry.name == PUBLISHER_ACCESS_FILE and folder:
                scopes.add(folder)
            elif ".SECRET." not in entry.name:
                names.append(relative)
    names.sort()
    text = str(root)
    files = [LibraryFile(Path(f"{text}/{name}"), name.removesuffix(".json"),
                         access_tag_for(PurePosixPath(name)) if "access/" in name else None,
                         scope_of(name.removesuffix(".json"), scopes) if scopes else "") for name in names]
    return files, sorted(scopes)


def compiled_as_they_are(root: Path, cache_dir: Path | None = None) -> set[Path]:
    """The library files under `root` that the compiled cache's plan serves from their present
    version (the size and time they were compiled at): they were read and checked then, as `serve`
    trusts, so `publish` need not read them again."""
    plan = read_plan(cache_dir or default_cache_dir(root))
    found = set()
    for entry in discover(root) if plan else ():
        where = plan.get(entry.name)
        with contextlib.suppress(OSError):
            if where is not None and where.source.matches_stat(entry.path.stat()):
                found.add(entry.path)
    return found


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
    libraries: tuple[Library, ...]  # by name
    problems: tuple[str, ...] = ()
    public_problems: int = 0  # problems with files outside `access/` folders (the rest are private)
    segments: tuple[Segment, ...] = ()  # every segment a library is served from
    new_problems: tuple[str, ...] = ()  # those of `problems` found by this load (the rest were said before)
    root: Path | None = None  # the folder it was loaded from
    scopes: tuple[str, ...] = ()  # its publisher folders, those holding an access file (host/catalog/scopes.py)

    @cached_property
    def models(self) -> dict[str, ModelIndex]:
        """Each embedding model's libraries as one `ModelIndex`. Built when first asked: a serving
        worker asks before it serves (host/web/state.py), `serve`'s first process never needs it."""
        groups: dict[str, list[Library]] = {}
        for library in self.libraries:
            groups.setdefault(library.embedding_model, []).append(library)
        return {model: ModelIndex.build(tuple(members)) for model, members in groups.items()
                if any(member.bit_count for member in members)}

    def dimension_of(self, model: str) -> int | None:
        """The dimension of a model's libraries (None: no library of it has a bit)."""
        return next((library.dimension for library in self.libraries
                     if library.embedding_model == model and library.bit_count), None)

    @property
    def model_names(self) -> list[str]:
        return sorted({library.embedding_model for library in self.libraries if library.bit_count})

    def public_libraries(self) -> list[Library]:
        return [library for library in self.libraries if library.visible_bit_count(frozenset())]

    def library(self, name: str) -> Library | None:
        return self._by_name.get(name)

    @cached_property
    def _by_name(self) -> dict[str, Library]:
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
    digests: Mapping[Path, str] | None = None,
) -> Catalog:
    """Load every library under `root` as the next generation, compiling only what changed.

    A bad file is reported in `problems` (one line each, naming the file) and skipped: one
    publisher's broken file must not take the others offline. A library whose file went bad keeps
    serving the version compiled last (the plan's). With `previous` (a reload), segments already
    open are used as they are. `digests` (a replica's: each file's SHA-256 as its manifest says) spares
    hashing a file whose mtime moved. With `bars`, a compile that takes more than two seconds shows
    how far it is on stderr (host/store/progress.py).
    """
    cache = cache_dir or default_cache_dir(root)
    opened = {segment.name: segment for segment in previous.segments} if previous else {}
    with plan_lock(cache):
        plan, refused_before = read_plan(cache), read_refused(cache)
        segments = _open_planned(cache, plan, opened)
        entries, scopes = survey(root) if root.exists() else ([], [])
        placed, to_compile, refused, problems = _reconcile(entries, plan, segments, max_bytes, digests or {},
                                                           refused_before)
        said_before = {name for name, refusal in refused.items() if refused_before.get(name) == refusal}
        failed = _compile(cache, to_compile, placed, segments, bars, progress)
        refused.update(failed)
        new_problems = list(problems)
        for name, refusal in sorted(refused.items()):  # its previous version keeps serving, if there is one
            still = name in plan and plan[name].segment in segments
            if still:
                placed[name] = plan[name]
            problems.append(refusal.problem + ("; still serving its previous version" if still else ""))
            if name not in said_before:
                new_problems.append(problems[-1])
        if placed != plan:
            write_plan(cache, placed)
        if refused != refused_before:
            write_refused(cache, refused)
        removed = remove_unplanned(cache, placed)
    if progress:
        compiled = len(to_compile) - len(failed)
        progress(f"{_count(len(placed), 'library', 'libraries')} in "
                 f"{_count(len({where.segment for where in placed.values()}), 'segment', 'segments')}, "
                 f"{f'{compiled:,} compiled now' if compiled else 'none compiled'}"
                 + (f", {_count(removed, 'segment', 'segments')} no longer used removed" if removed else ""))
    public = {entry.name for entry in entries if entry.access_tag is None and not entry.scope}
    public_problems = sum(1 for name in refused if name in public)
    return replace(build_catalog(entries, placed, segments, previous, problems, public_problems), root=root,
                   scopes=tuple(scopes), new_problems=tuple(new_problems))


def catalog_as_planned(root: Path, *, cache_dir: Path | None = None, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
                       digests: Mapping[Path, str] | None = None) -> Catalog:
    """The generation the plan names, opened without looking at a library file: what a worker serves
    at once when `serve`'s first process has just brought the plan up to date (its watcher's first
    poll notices whatever changed since). Without a plan whose segments all open: `load_catalog`."""
    cache = cache_dir or default_cache_dir(root)
    with plan_lock(cache):
        plan, refused = read_plan(cache), read_refused(cache)
        segments = _open_planned(cache, plan, {})
    if not plan or any(where.segment not in segments for where in plan.values()):
        return load_catalog(root, cache_dir=cache_dir, max_bytes=max_bytes, digests=digests)
    alone = root.is_file()
    entries = []
    for name, where in plan.items():
        member = segments[where.segment].members[where.member]
        entries.append(LibraryFile(root if alone else Path(f"{root}/{name}.json"), name, member.access_tag, member.scope))
    problems = [refusal.problem + ("; still serving its previous version" if name in plan else "")
                for name, refusal in sorted(refused.items())]
    public_problems = sum(1 for name in refused if access_tag_for(PurePosixPath(name)) is None)
    scopes = sorted({entry.scope for entry in entries if entry.scope})
    return replace(build_catalog(entries, plan, segments, None, problems, public_problems), root=root,
                   scopes=tuple(scopes))


def _open_planned(cache: Path, plan: Plan, opened: dict[str, Segment]) -> dict[str, Segment]:
    """The segments the plan names, open: the previous generation's as they are, the others opened
    now. One that cannot be opened (a corrupt cache) is left out: its libraries compile again."""
    segments = {}
    for name in {placed.segment for placed in plan.values()}:
        segment = opened.get(name)
        if segment is None:
            try:
                segment = open_segment(cache / SEGMENTS / name)
            except StoreError as problem:
                log.warning("rebuilding what segment %s held: %s", name, problem)
                continue
        segments[name] = segment
    return segments


def _reconcile(entries: list[LibraryFile], plan: Plan, segments: dict[str, Segment], max_bytes: int,
               digests: Mapping[Path, str], refused_before: Refusals) -> tuple[Plan, list[LibraryFile], Refusals, list[str]]:
    """What stays where it is (the plan, updated), what must be compiled, the files refused (those
    found bad before and unchanged since are not read again), and the files that cannot be stat'ed."""
    placed: Plan = {}
    to_compile, refused, problems = [], {}, []
    for entry in entries:
        try:
            stat = entry.path.stat()
        except OSError as problem:
            problems.append(f"{entry.path}: {describe_problem(problem)}")
            continue
        before = refused_before.get(entry.name)
        if before is not None and before.matches_stat(stat):
            refused[entry.name] = before
            continue
        if stat.st_size > max_bytes:
            refused[entry.name] = Refused(stat.st_size, stat.st_mtime_ns, f"{entry.path}: file is {stat.st_size:,} bytes, "
                                          f"over the {max_bytes:,}-byte limit (raise --max-library-bytes)")
            continue
        where = plan.get(entry.name)
        segment = segments.get(where.segment) if where else None
        if where is None or segment is None or not _same_place(segment, where, entry):
            to_compile.append(entry)
            continue
        if where.source.matches_stat(stat):
            placed[entry.name] = where
        elif where.source.size == stat.st_size and _digest(entry.path, digests) == where.source.sha256:
            placed[entry.name] = Placed(where.segment, where.member, SourceKey(stat.st_size, stat.st_mtime_ns,
                                                                             where.source.sha256))  # only touched
        else:
            to_compile.append(entry)
    return placed, to_compile, refused, problems


def _same_place(segment: Segment, where: Placed, entry: LibraryFile) -> bool:
    """Whether the member the plan names is still this file's, under the same folder tag and scope."""
    if where.member >= len(segment.members):
        return False
    member = segment.members[where.member]
    return (member.name, member.access_tag, member.scope) == (entry.name, entry.access_tag, entry.scope)


def _digest(path: Path, digests: Mapping[Path, str]) -> str:
    known = digests.get(path)
    return known if known is not None else file_sha256(path)


def _compile(cache: Path, entries: list[LibraryFile], placed: Plan, segments: dict[str, Segment],
             bars: bool, progress: Callable[[str], None] | None) -> Refusals:
    """Compile `entries` into new segments, place them in `placed` and open them in `segments`; the
    entries that failed, by name, each as it was found and its problem in one line."""
    if not entries:
        return {}
    failed = {}
    packer = Packer(cache / SEGMENTS, new_segment_name, bars=bars)
    try:
        for entry in entries:
            size, mtime_ns = -1, -1  # a file that cannot be stat'ed is read again next time
            try:
                stat = entry.path.stat()
                size, mtime_ns = stat.st_size, stat.st_mtime_ns
                packer.add(FileToCompile(entry.path, entry.name, entry.access_tag, entry.scope, stat.st_size))
            except Exception as problem:  # one publisher's file, however broken, must not stop the others
                failed[entry.name] = Refused(size, mtime_ns, f"{entry.path}: {describe_problem(problem)}")
        made = packer.finish()
    finally:
        packer.close()
    paths = {entry.name: entry.path for entry in entries}
    for compiled in made:
        segment = open_segment(cache / SEGMENTS / compiled.name)
        segments[compiled.name] = segment
        if progress and len(compiled.members) == 1:
            progress(f"compiled {compiled.members[0].name}: {segment.bit_count:,} bits, {segment.embedding_model}")
        elif progress:
            names = ", ".join(member.name for member in compiled.members[:NAMED])
            more = f" and {len(compiled.members) - NAMED:,} more" if len(compiled.members) > NAMED else ""
            progress(f"compiled {len(compiled.members):,} libraries together ({names}{more}): "
                     f"{segment.bit_count:,} bits, {segment.embedding_model}")
        for number, member in enumerate(compiled.members):
            placed[member.name] = Placed(compiled.name, number, member.source)
            _warn_if_changed(paths[member.name], member.source)
    return failed


def _count(number: int, one: str, many: str) -> str:
    return f"{number:,} {one if number == 1 else many}"


def _warn_if_changed(path: Path, key: SourceKey) -> None:
    try:
        if not key.matches_stat(path.stat()):
            log.info("%s changed while it was compiled: the next poll compiles it again", path)
    except OSError:
        pass


def build_catalog(entries: Iterable[LibraryFile], placed: Plan, segments: Mapping[str, Segment],
                  previous: Catalog | None, problems: list[str], public_problems: int) -> Catalog:
    """The generation serving `placed`: its libraries by name, grouped by model."""
    paths = {entry.name: entry.path for entry in entries}
    libraries = tuple(Library(name, paths[name], segments[where.segment], where.member, where.source)
                      for name, where in sorted(placed.items()) if name in paths)
    reused = {library.name: library for library in previous.libraries} if previous else {}
    libraries = tuple(_same_or(reused.get(library.name), library) for library in libraries)
    kept, conflicts = one_dimension_a_model(libraries)
    served = {id(library) for library in kept}
    public_problems += sum(1 for library in libraries if id(library) not in served and library.visible_bit_count(frozenset()))
    used = tuple(dict.fromkeys(library.segment for library in kept))
    generation = previous.generation + 1 if previous else 1
    return Catalog(generation, kept, tuple(problems + conflicts), public_problems, used)


def _same_or(earlier: Library | None, library: Library) -> Library:
    """The previous generation's object where nothing changed (its cached values are kept)."""
    if earlier is not None and (earlier.segment, earlier.member, earlier.source_key, earlier.source) == (
            library.segment, library.member, library.source_key, library.source):
        return earlier
    return library


def one_dimension_a_model(libraries: tuple[Library, ...]) -> tuple[tuple[Library, ...], list[str]]:
    """The libraries to serve: a library whose dimension differs from its model's first is refused."""
    firsts: dict[str, Library] = {}  # each model's first library with bits: its dimension is the model's
    kept: list[Library] = []
    problems: list[str] = []
    for library in libraries:
        first = firsts.setdefault(library.embedding_model, library) if library.bit_count else None
        if first is not None and library.dimension != first.dimension:
            problems.append(
                f"{library.source}: dimension {library.dimension} differs from {first.dimension} "
                f"of {first.name}, the first library of {library.embedding_model}"
            )
            continue
        kept.append(library)
    return tuple(kept), problems
