"""Hot publishing: notice changed library files (or SIGHUP) and swap in a new catalog generation.

The new generation is built on this background thread, never on a request's path, and swapped in
with one reference assignment: a request keeps the generation it started with. A file is only
picked up once it has stopped changing for one poll, so a publisher's half-written file is not
read mid-write; if it is bad anyway, the previous version of that library keeps serving.

With a replica (`--libraries` an origin's URL), each poll syncs the local mirror instead
(host/catalog/replica.py) and reloads from the new set's folder as soon as it is complete: a set
is swapped in whole, so there is nothing to wait for. An access file followed at an origin
(`--access URL`) is fetched on the same poll, before the access rules are looked at.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from host.catalog.generations import Catalog, discover, load_catalog
from host.catalog.replica import AccessFollower, Replica

log = logging.getLogger("polymath_host.reload")

Snapshot = dict[Path, tuple[int, int]]


class Reloadable(Protocol):
    catalog: Catalog

    def install(self, catalog: Catalog) -> None: ...


def snapshot(root: Path) -> Snapshot:
    """Size and mtime of every library file: what tells us something was published."""
    found: Snapshot = {}
    for entry in discover(root):
        try:
            stat = entry.path.stat()
        except OSError:
            continue
        found[entry.path] = (stat.st_size, stat.st_mtime_ns)
    return found


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
        self._seen: Snapshot = {library.source: (library.source_key.size, library.source_key.mtime_ns)
                                for library in host.catalog.libraries}
        self._settling: Snapshot | None = None
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
        current = snapshot(self.root) if self.root.exists() else {}
        forced, self._forced = self._forced, False
        if not forced:
            if current == self._seen:
                self._settling = None
                return
            if current != self._settling:  # still being written: look again next poll
                self._settling = current
                return
        self._settling = None
        self._seen = current
        self.reload()

    def reload(self) -> Catalog:
        started = time.perf_counter()
        previous = self.host.catalog
        catalog = load_catalog(self.root, cache_dir=self.cache_dir, previous=previous, max_bytes=self.max_bytes,
                               digests=self.replica.digests() if self.replica is not None else None)
        for problem in catalog.problems:
            log.error("library not loaded: %s", problem)
        self.host.install(catalog)
        log.info(
            "libraries reloaded: generation %d, %d libraries, %d problems, %.2f s",
            catalog.generation, len(catalog.libraries), len(catalog.problems), time.perf_counter() - started,
        )
        return catalog
