"""Hot publishing: notice changed library files (or SIGHUP) and swap in a new catalog generation.

The new generation is built on this background thread, never on a request's path, and swapped in
with one reference assignment: a request keeps the generation it started with. A file is only
picked up once it has stopped changing for `SETTLE_SECONDS` (looked at again that much later), so a
publisher's half-written file is not read mid-write; if it is bad anyway, the previous version of
that library keeps serving. Only the changed files are compiled (host/catalog/plan.py); a publisher
folder's access file appearing or going counts as a change of its libraries (their tags' scope),
and so does the plan changing under another worker (a merge). Merges (host/catalog/merging.py) run
on a thread of their own after a reload, and the watcher reloads when one is done.

With a replica (`--libraries` an origin's URL), each poll syncs the local mirror instead
(host/catalog/replica.py) and reloads from the new set's folder as soon as it is complete: a set
is swapped in whole, so there is nothing to wait for. An access file followed at an origin
(`--access URL`) is fetched on the same poll, before the access rules are looked at.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from host.catalog.generations import Catalog, default_cache_dir, load_catalog
from host.catalog.merging import merge, merge_lock, merges_due, segment_uses
from host.catalog.plan import PLAN_FILE, Placed, Plan, read_refused
from host.catalog.replica import AccessFollower, Replica
from host.catalog.scopes import PUBLISHER_ACCESS_FILE
from host.store.compiled import Segment

log = logging.getLogger("polymath_host.reload")

Snapshot = dict[str, tuple[int, int]]  # a file's path -> its (size, mtime_ns)


class Reloadable(Protocol):
    catalog: Catalog

    def install(self, catalog: Catalog) -> None: ...


SETTLE_SECONDS = 0.2  # a changed file is read once it has not changed for this long


class FolderWatch:
    """What a poll looks at under `root`: every library file, every publisher folder's access file,
    and the plan in `cache` (another worker's merge), each one's size and time.

    The files are listed again only when a folder's time moved (a file added, removed or renamed
    over, a folder made); otherwise each listed file is stat'ed, as a file written in place moves
    only its own time: ten thousand files cost ten thousand stats a poll (~40 ms), not a walk.
    """

    def __init__(self, root: Path, cache: Path | None) -> None:
        self.root, self.cache = root, cache
        self._folders: dict[str, int | None] = {}  # every folder walked -> its mtime then (None: not there)
        self._files: list[str] = []

    def snapshot(self) -> Snapshot:
        if not self._folders or any(_mtime(folder) != mtime for folder, mtime in self._folders.items()):
            self._list()
        found: Snapshot = {}
        for path in self._files:
            with contextlib.suppress(OSError):
                stat = os.stat(path)
                found[path] = (stat.st_size, stat.st_mtime_ns)
        return found

    def _list(self) -> None:
        root = str(self.root)
        if os.path.isfile(root):
            self._folders, self._files = {root: _mtime(root)}, [root]
            return
        folders: dict[str, int | None] = {}
        files, waiting = [], [root]
        while waiting:
            folder = waiting.pop()
            folders[folder] = _mtime(folder)
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    waiting.append(entry.path)
                elif entry.name.endswith(".json") and (".SECRET." not in entry.name or (
                        entry.name == PUBLISHER_ACCESS_FILE and folder != root)):
                    files.append(entry.path)
        if self.cache is not None:
            files.append(str(self.cache / PLAN_FILE))
        self._folders, self._files = folders, files


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def settled(before: Snapshot, after: Snapshot) -> Snapshot:
    """`after`, once its changes since `before` have stood still for SETTLE_SECONDS: the changed
    files are looked at again, and the snapshot is returned as it is then."""
    time.sleep(SETTLE_SECONDS)
    again = dict(after)
    for path in {*before, *after}:
        if before.get(path) != after.get(path):
            try:
                stat = os.stat(path)
                again[path] = (stat.st_size, stat.st_mtime_ns)
            except OSError:
                again.pop(path, None)
    return again


class LibraryWatcher:
    """Polls `root` every `interval` seconds on its own thread; `also_each_poll` runs there too (the
    access file is followed that way, so it is current even when no token arrives)."""

    def __init__(self, host: Reloadable, root: Path, *, cache_dir: Path | None, max_bytes: int,
                 interval: float = 1.0, also_each_poll: Callable[[], object] = lambda: None,
                 replica: Replica | None = None, access_follower: AccessFollower | None = None) -> None:
        self.host = host
        self.replica = replica
        self.access_follower = access_follower
        self.also_each_poll = also_each_poll
        self.root = root
        self.cache_dir = cache_dir
        self.max_bytes = max_bytes
        self.interval = interval
        # What the running catalog was loaded from, not what is there now: a file published while
        # the catalog was loading (a first compile can take minutes) must still count as a change.
        self._watch = FolderWatch(root, self.cache)
        plan = str(self.cache / PLAN_FILE)
        self._seen: Snapshot = {path: stat for path, stat in self._watch.snapshot().items()
                                if path.endswith(PUBLISHER_ACCESS_FILE) or path == plan}
        self._seen.update((str(library.source), (library.source_key.size, library.source_key.mtime_ns))
                          for library in host.catalog.libraries)
        if not root.is_file():  # the bad files, as they were when refused: unchanged, they are no change
            self._seen.update((f"{root}/{name}.json", (refused.size, refused.mtime_ns))
                              for name, refused in read_refused(self.cache).items())
        self._merging: threading.Thread | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._forced = False
        self._thread = threading.Thread(target=self._run, name="library-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def request_reload(self) -> None:
        """SIGHUP: reload now, whatever the files' times say."""
        self._forced = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self.access_follower is not None:
                    self.access_follower.poll()
                self._poll()
                self.also_each_poll()  # after the poll: a replica's sync may have brought a new access file
            except Exception:  # the watcher must outlive any one bad reload
                log.exception("library reload failed; still serving generation %s", self.host.catalog.generation)

    def _poll(self) -> None:
        if self.replica is not None:
            switched = self.replica.poll()
            forced, self._forced = self._forced, False
            if switched is not None or forced:
                self.root = switched or self.replica.current() or self.root
                self.reload()
                self.replica.serving = self.replica.current()
            return
        current = self._watch.snapshot()
        forced, self._forced = self._forced, False
        if not forced:
            if current == self._seen:
                return
            still = settled(self._seen, current)
            if still != current:  # still being written: look again next poll
                return
        self.reload()
        # What the reload read, not what is there now (a file written during it must count as a
        # change), but for the plan, which the reload itself may have written.
        self._seen = dict(current)
        with contextlib.suppress(OSError):
            plan = os.stat(self.cache / PLAN_FILE)
            self._seen[str(self.cache / PLAN_FILE)] = (plan.st_size, plan.st_mtime_ns)

    def reload(self) -> Catalog:
        started = time.perf_counter()
        previous = self.host.catalog
        catalog = load_catalog(self.root, cache_dir=self.cache_dir, previous=previous, max_bytes=self.max_bytes,
                               digests=self.replica.digests() if self.replica is not None else None)
        for problem in catalog.new_problems:  # each bad file is named once, by the worker that read it
            log.error("library not loaded: %s", problem)
        self.host.install(catalog)
        log.info(
            "libraries reloaded: generation %d, %d libraries, %d problems, %.2f s",
            catalog.generation, len(catalog.libraries), len(catalog.problems), time.perf_counter() - started,
        )
        self._merge_if_due(catalog)
        return catalog

    @property
    def cache(self) -> Path:
        return self.cache_dir or default_cache_dir(self.root)

    def _merge_if_due(self, catalog: Catalog) -> None:
        """Start the merges due (host/catalog/merging.py) on a thread, unless some are running."""
        if self._merging is not None and self._merging.is_alive():
            return
        plan = {library.name: Placed(library.segment.name, library.member, library.source_key)
                for library in catalog.libraries}
        segments = {segment.name: segment for segment in catalog.segments}
        due = merges_due(segment_uses(plan, segments))
        if due:
            self._merging = threading.Thread(target=self._merge, args=(due, plan, segments), name="merge", daemon=True)
            self._merging.start()

    def _merge(self, due: list[list[str]], plan: Plan, segments: dict[str, Segment]) -> None:
        try:
            with merge_lock(self.cache) as mine:
                if not mine:
                    return  # another worker merges: its plan reaches this one as a change
                for group in due:
                    merge(self.cache, group, segments, plan)
        except Exception:  # a merge that fails leaves the segments as they were
            log.exception("merging segments failed; serving them as they are")
            return
        self.request_reload()
