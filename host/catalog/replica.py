"""A replica's local mirror of a published set, kept in step with its origin.

The catalog only ever reads local files: this module brings them. Under the cache folder:

    blobs/<sha256>      every blob of the sets kept, whole and checked (host/origin/blobs.py)
    sets/<id>/          one published set as a library folder: hard links to blobs at the paths
                        the manifest names, and its manifest as .manifest.json (hidden: not a library)
    current             the id of the last good set; a set is named here only once it is complete
    access.json         the access file in force (the manifest's, or the one --access URL names)
    compiled/<name>/    compiled stores: published ones put in place whole, the others compiled here

`sync()` asks the origin for the manifest (conditionally), and when it changed: downloads the blobs
it lacks (each checked), builds the new set folder under a temporary name, puts the published
compiled stores of this host's store format in place, checks the access file, then renames the set
into place, names it in `current` and swaps the access file. Any fault on the way (origin down, a
5xx, a stall, a cut or corrupt transfer, a manifest naming a missing blob, refused credentials)
leaves the last good set serving: nothing of the new set is in use until all of it is there. A
missing manifest after a good one is such a fault too: unpublishing is publishing an empty set.

Several worker processes may share one cache: syncs take turns under an flock on `.sync.lock`,
and a worker that finds a set already built just switches to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from access.config import parse_settings, read_json_object
from access.errors import AccessConfigError
from host.origin import ObjectMissing, Origin, OriginError
from host.origin.blobs import BlobStore, file_digest
from host.origin.manifest import MANIFEST_KEY, MANIFEST_LIMIT, Blob, Manifest, ManifestError, parse_manifest
from host.store.compiled import STORE_FORMAT, install_compiled

log = logging.getLogger("polymath_host.origin")

ACCESS_LIMIT = 16 << 20
DOWNLOADS = 4  # blobs downloaded at once
SETS_KEPT = 2  # the set in force and the one before it (another worker may still be reading it)


@dataclass
class SyncStatus:
    """What /metrics and the log say about syncing; per process."""

    last_good: float | None = None  # time.time() of the last poll that left this process current
    failures: int = 0  # polls that failed, since start
    problem: str | None = None  # the fault of the current outage, said once; None while all is well

    def good(self, origin: str) -> None:
        if self.problem is not None:
            log.warning("origin %s: in step again (the fault was: %s)", origin, self.problem)
        self.problem = None
        self.last_good = time.time()

    def failed(self, origin: str, problem: str, serving: str) -> None:
        self.failures += 1
        if self.problem is None:
            log.error("origin sync failed, %s: %s", serving, problem)
        self.problem = problem


class Replica:
    """The mirror of the set published at `origin`, in `cache`."""

    def __init__(self, origin: Origin, cache: Path, *, access_from_manifest: bool = True) -> None:
        self.origin = origin
        self.cache = cache
        self.blobs = BlobStore(cache / "blobs")
        self.sets = cache / "sets"
        self.compiled = cache / "compiled"
        self.access_file = cache / "access.json"
        self.access_from_manifest = access_from_manifest
        self.status = SyncStatus()
        self._etag: str | None = None
        self._set_id = self._current_id()
        self.serving: Path | None = None  # the set the catalog in force was loaded from (set by its loader)

    def current(self) -> Path | None:
        """The folder of the set this process serves: None until a first good sync (or a warm cache)."""
        return self.sets / self._set_id if self._set_id else None

    def poll(self) -> Path | None:
        """`sync()`, with faults counted and said once: the new set's folder when it switched."""
        try:
            switched = self.sync()
        except (OriginError, ManifestError, AccessConfigError, OSError) as problem:
            serving = "still serving the set synced before" if self._set_id else "not ready until the first good sync"
            self.status.failed(self.origin.url, one_line(problem), serving)
            return None
        self.status.good(self.origin.url)
        return switched

    def sync(self) -> Path | None:
        """Bring the mirror in step with the origin; the new set's folder when it switched, else None."""
        try:
            fetched = self.origin.fetch(MANIFEST_KEY, etag=self._etag, limit=MANIFEST_LIMIT)
        except ObjectMissing:
            raise ObjectMissing(f"{self.origin.url}: nothing is published there (no {MANIFEST_KEY}); "
                                "publish with: polymath-host publish FOLDER " + self.origin.url) from None
        if fetched is None:
            return None
        set_id = hashlib.sha256(fetched.body).hexdigest()[:32]
        if set_id == self._set_id:
            self._etag = fetched.etag
            return None
        manifest = parse_manifest(fetched.body, f"{self.origin.url}/{MANIFEST_KEY}")
        with self._locked():
            folder = self.sets / set_id
            if not (folder / ".manifest.json").exists():
                self._build(manifest, fetched.body, folder)
            self._install_compiled(manifest)
            self._install_access(manifest)
            _write_atomically(self.cache / "current", set_id.encode())
            self._set_id, self._etag = set_id, fetched.etag
            self._collect_garbage()
        log.info("origin %s: switched to the set published %s (%d libraries)", self.origin.url,
                 manifest.published_at or "(no date)", len(manifest.libraries))
        return folder

    def _build(self, manifest: Manifest, body: bytes, folder: Path) -> None:
        """Download what is missing and lay the set out under a temporary name, then rename it in."""
        missing = [blob for blob in self._needed(manifest) if not self.blobs.has(blob)]
        with ThreadPoolExecutor(DOWNLOADS) as downloads:  # a few at once: small blobs cost round trips
            for done in [downloads.submit(self.blobs.fetch, self.origin, blob) for blob in missing]:
                done.result()
        if self.access_from_manifest and manifest.access:
            check_access_file(self.blobs.path(manifest.access), f"{self.origin.url}/{manifest.access.key}")
        self.sets.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=self.sets))
        try:
            for library in manifest.libraries:
                stored = self.blobs.path(library.blob)
                # The publisher's time: its compiled store's source key then matches without hashing.
                os.utime(stored, ns=(library.mtime_ns, library.mtime_ns))
                target = building / library.path
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(stored, target)
            (building / ".manifest.json").write_bytes(body)
            building.rename(folder)
        finally:
            shutil.rmtree(building, ignore_errors=True)

    def _needed(self, manifest: Manifest) -> list[Blob]:
        """The library files, the compiled stores this host can open (of its store format), the access file."""
        needed = {library.blob.sha256: library.blob for library in manifest.libraries}
        for library in manifest.libraries:
            if library.store_format == STORE_FORMAT:
                needed.update((file.blob.sha256, file.blob) for file in library.compiled)
        if self.access_from_manifest and manifest.access:
            needed[manifest.access.sha256] = manifest.access
        return list(needed.values())

    def _install_compiled(self, manifest: Manifest) -> None:
        """Published stores of this host's format go in place whole; of another format, the catalog compiles."""
        for library in manifest.libraries:
            if library.store_format != STORE_FORMAT or not library.compiled:
                continue
            folder = self.compiled / library.name
            meta = next((file.blob for file in library.compiled if file.name == "meta.json"), None)
            with contextlib.suppress(OSError):
                if meta is not None and file_digest(folder / "meta.json") == meta.sha256:
                    continue  # already in place
            install_compiled({file.name: self.blobs.path(file.blob) for file in library.compiled}, folder)

    def _install_access(self, manifest: Manifest) -> None:
        if not self.access_from_manifest:
            return
        if manifest.access is None:
            with contextlib.suppress(FileNotFoundError):
                self.access_file.unlink()  # the publisher removed it: public bits only (fail closed)
            return
        # A copy of mode 0600, not a link to the blob: the access file may hold secrets elsewhere.
        _write_atomically(self.access_file, self.blobs.path(manifest.access).read_bytes())

    def _collect_garbage(self) -> None:
        """Keep the newest sets (by when they were named current) and the blobs they use."""
        kept = sorted((entry for entry in self.sets.iterdir() if not entry.name.startswith(".")),
                      key=lambda entry: entry.stat().st_mtime_ns, reverse=True)
        current = self.sets / (self._set_id or "")
        keep = [current, *[entry for entry in kept if entry != current][: SETS_KEPT - 1]]
        for entry in kept:
            if entry not in keep:
                shutil.rmtree(entry, ignore_errors=True)
        wanted: set[str] = set()
        for entry in keep:
            with contextlib.suppress(OSError, ManifestError):
                manifest = parse_manifest((entry / ".manifest.json").read_bytes(), str(entry))
                wanted.update(blob.sha256 for blob in manifest.blobs())
        self.blobs.keep_only(wanted)

    def _current_id(self) -> str | None:
        with contextlib.suppress(OSError):
            set_id = (self.cache / "current").read_text().strip()
            if set_id and (self.sets / set_id / ".manifest.json").exists():
                return set_id
        return None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.cache.mkdir(parents=True, exist_ok=True)
        with open(self.cache / ".sync.lock", "wb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


class AccessFollower:
    """`--access URL`: the access file at an origin, fetched when it changes, checked, then swapped in."""

    def __init__(self, origin: Origin, key: str, target: Path) -> None:
        self.origin = origin
        self.key = key
        self.target = target
        self.status = SyncStatus()
        self._etag: str | None = None

    @property
    def url(self) -> str:
        return f"{self.origin.url}/{self.key}"

    def poll(self) -> bool:
        """Fetch and swap in a changed file; True if it changed. Faults are counted and said once."""
        try:
            changed = self.sync()
        except (OriginError, AccessConfigError, OSError) as problem:
            self.status.failed(self.url, one_line(problem), "keeping the access rules in force")
            return False
        self.status.good(self.url)
        return changed

    def sync(self) -> bool:
        fetched = self.origin.fetch(self.key, etag=self._etag, limit=ACCESS_LIMIT)
        if fetched is None:
            return False
        with contextlib.suppress(OSError):
            if self.target.read_bytes() == fetched.body:
                self._etag = fetched.etag
                return False
        check_access_text(fetched.body, self.url)
        _write_atomically(self.target, fetched.body)
        self._etag = fetched.etag
        log.info("access rules from %s: swapped in", self.url)
        return True


def check_access_file(path: Path, where: str) -> None:
    check_access_text(path.read_bytes(), where)


def check_access_text(body: bytes, where: str) -> None:
    """AccessConfigError unless `body` is an access file the host accepts: a bad one never replaces a good one."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise AccessConfigError(f"{where}: is not UTF-8 text") from None
    parse_settings(read_json_object(text, where), where)


def one_line(problem: Exception) -> str:
    text = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
    return text[:400]


def _write_atomically(path: Path, body: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)

