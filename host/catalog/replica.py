"""A replica's local mirror of a published set, kept in step with its origin.

The catalog only ever reads local files: this module brings them. Under the cache folder:

    blobs/<sha256>      every blob of the sets kept, whole and checked (host/origin/blobs.py)
    sets/<id>/          one published set as a library folder: hard links to blobs at the paths
                        the manifest names, its manifest as .manifest.json and, when keys are
                        pinned, its signature as .signature.json (hidden: not libraries)
    current             the id of the last good set; a set is named here only once it is complete
    access.json         the access file in force (the manifest's, or the one --access URL names)
    compiled/           the compiled cache (host/catalog/plan.py): published segments put in place
                        whole, and the plan saying which serves each library; the others compiled here

`sync()` asks the origin for the manifest (conditionally), and when it changed: downloads the blobs
it lacks (each checked), builds the new set folder under a temporary name (with each publisher
folder's access file), puts the published segments of this host's store format in place and plans
them, checks the access file, then renames the set into place, names it in `current` and swaps the
access file. Any fault on the way (origin down, a
5xx, a stall, a cut or corrupt transfer, a manifest naming a missing blob, refused credentials)
leaves the last good set serving: nothing of the new set is in use until all of it is there. A
missing manifest after a good one is such a fault too: unpublishing is publishing an empty set.

With pinned publisher keys (`serve --origin-key`), a changed manifest is used only once a pinned
key's signature of its exact bytes verifies (host/origin/signatures.py), before anything it names is
downloaded, and only if it was published after the set in force (an old signed manifest put back
is a replay); an unsigned, badly signed or replayed manifest is a fault like the others, counted by
reason and said in one line for each manifest refused. A cached set is served at start only if
it still verifies with the keys pinned now (a key removed from the pins takes its sets with it).

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
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from access.config import parse_settings, read_json_object
from access.errors import AccessConfigError
from host.catalog.plan import SEGMENTS, Placed, plan_lock, read_plan, write_plan
from host.catalog.scopes import PUBLISHER_ACCESS_FILE
from host.origin import ObjectMissing, Origin, OriginError
from host.origin.blobs import BlobStore
from host.origin.history import published_time
from host.origin.manifest import MANIFEST_KEY, MANIFEST_LIMIT, Blob, Manifest, ManifestError, parse_manifest
from host.origin.publisher_keys import PublicKey
from host.origin.signatures import (
    REASONS,
    REPLAYED,
    SIGNATURE_LIMIT,
    SignatureRefused,
    signature_key,
    verify_manifest,
)
from host.store.compiled import STORE_FORMAT, install_segment
from host.store.members import SourceKey

log = logging.getLogger("polymath_host.origin")

ACCESS_LIMIT = 16 << 20
DOWNLOADS = 4  # blobs downloaded at once
SETS_KEPT = 2  # the set in force and the one before it (another worker may still be reading it)
MANIFEST_FILE, SIGNATURE_FILE = ".manifest.json", ".signature.json"  # in a set's folder


@dataclass
class SyncStatus:
    """What /metrics and the log say about syncing; per process."""

    last_good: float | None = None  # time.time() of the last poll that left this process current
    failures: int = 0  # polls that failed, since start
    problem: str | None = None  # the fault of the current outage, said once; None while all is well
    refusals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))  # manifests refused, by reason

    def good(self, origin: str) -> None:
        if self.problem is not None:
            log.warning("origin %s: in step again (the fault was: %s)", origin, self.problem)
        self.problem = None
        self.last_good = time.time()

    def failed(self, origin: str, problem: str, serving: str, *, each_new: bool = False) -> None:
        """Count a failed poll; say it if it starts an outage (or, `each_new`, if it is a new problem)."""
        self.failures += 1
        if self.problem is None or (each_new and problem != self.problem):
            log.error("origin sync failed, %s: %s", serving, problem)
        self.problem = problem


class Replica:
    """The mirror of the set published at `origin`, in `cache`."""

    def __init__(self, origin: Origin, cache: Path, *, access_from_manifest: bool = True,
                 keys: Sequence[PublicKey] = ()) -> None:
        self.origin = origin
        self.keys = tuple(keys)  # pinned publisher keys: none means the origin is trusted unsigned
        self.cache_refused: str | None = None  # why a cached set was not taken at start, if one was not
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
            if isinstance(problem, SignatureRefused):
                self.status.refusals[problem.reason] += 1
            self.status.failed(self.origin.url, one_line(problem), serving, each_new=isinstance(problem, SignatureRefused))
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
        where = f"{self.origin.url}/{MANIFEST_KEY}"
        signature = self._verified(fetched.body, f"{where} (set {set_id[:12]})") if self.keys else None
        manifest = parse_manifest(fetched.body, where)
        if self.keys:
            self._check_newer(manifest, f"{where} (set {set_id[:12]})")
        with self._locked():
            folder = self.sets / set_id
            if not (folder / MANIFEST_FILE).exists():
                self._build(manifest, fetched.body, folder, signature)
            elif signature is not None:  # built before keys were pinned, or by a worker a moment ago
                _write_atomically(folder / SIGNATURE_FILE, signature)
            self._install_compiled(manifest)
            self._install_access(manifest)
            _write_atomically(self.cache / "current", set_id.encode())
            self._set_id, self._etag = set_id, fetched.etag
            self._collect_garbage()
        log.info("origin %s: switched to the set published %s (%d libraries)", self.origin.url,
                 manifest.published_at or "(no date)", len(manifest.libraries))
        return folder

    def _verified(self, body: bytes, where: str) -> bytes:
        """The signature object of the manifest `body`, once a pinned key's signature verifies (else SignatureRefused)."""
        try:
            fetched = self.origin.fetch(signature_key(body), limit=SIGNATURE_LIMIT)
        except ObjectMissing:
            fetched = None
        document = fetched.body if fetched is not None else None
        verify_manifest(body, document, self.keys, where)
        assert document is not None
        return document

    def _check_newer(self, manifest: Manifest, where: str) -> None:
        """SignatureRefused (replayed) unless `manifest` was published after the set in force."""
        current = self.current()
        if current is None:
            return
        try:
            before = parse_manifest((current / MANIFEST_FILE).read_bytes(), str(current))
        except (OSError, ManifestError):
            return
        then, now = published_time(before.published_at), published_time(manifest.published_at)
        if then is not None and (now is None or now <= then):
            raise SignatureRefused(f"{where}: published {manifest.published_at or '(no date)'}, not after the set in force "
                                   f"({before.published_at}): refused as a replayed manifest (if the publisher's clock "
                                   "went back, publish again with the right time)", REPLAYED)

    def _build(self, manifest: Manifest, body: bytes, folder: Path, signature: bytes | None) -> None:
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
                # The publisher's time: the plan's source key then matches without hashing.
                os.utime(stored, ns=(library.mtime_ns, library.mtime_ns))
                target = building / library.path
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(stored, target)
            for scope in manifest.publishers:  # a copy of mode 0600, as the host's access file
                check_access_file(self.blobs.path(scope.blob), f"{self.origin.url}/{scope.blob.key} ({scope.folder}/)")
                target = building / scope.folder / PUBLISHER_ACCESS_FILE
                target.parent.mkdir(parents=True, exist_ok=True)
                _write_atomically(target, self.blobs.path(scope.blob).read_bytes())
            (building / MANIFEST_FILE).write_bytes(body)
            if signature is not None:
                (building / SIGNATURE_FILE).write_bytes(signature)
            building.rename(folder)
        finally:
            shutil.rmtree(building, ignore_errors=True)

    def _needed(self, manifest: Manifest) -> list[Blob]:
        """The library files, the segments this host can open (of its store format), the access files."""
        needed = {library.blob.sha256: library.blob for library in manifest.libraries}
        for segment in manifest.segments:
            if segment.store_format == STORE_FORMAT:
                needed.update((file.blob.sha256, file.blob) for file in segment.files)
        if self.access_from_manifest and manifest.access:
            needed[manifest.access.sha256] = manifest.access
        needed.update((scope.blob.sha256, scope.blob) for scope in manifest.publishers)
        return list(needed.values())

    def _install_compiled(self, manifest: Manifest) -> None:
        """Published segments of this host's format go in place whole, and the plan names them; a library
        of another format, or published without its segment, is compiled by the catalog."""
        usable = {segment.name: segment for segment in manifest.segments if segment.store_format == STORE_FORMAT}
        folder = self.compiled / SEGMENTS
        with plan_lock(self.compiled):
            for segment in usable.values():
                if not (folder / segment.name / "meta.json").exists():  # a segment is never changed once named
                    install_segment({file.name: self.blobs.path(file.blob) for file in segment.files},
                                    folder / segment.name)
            plan = read_plan(self.compiled)
            for library in manifest.libraries:
                if library.segment in usable:
                    plan[library.name] = Placed(library.segment, library.member,
                                                SourceKey(library.blob.size, library.mtime_ns, library.blob.sha256))
            write_plan(self.compiled, plan)

    def digests(self) -> dict[Path, str]:
        """Each library file of the set in force and its SHA-256, as its manifest says (the catalog then
        never hashes a file whose time moved: a blob linked at two paths has one time)."""
        current = self.current()
        if current is None:
            return {}
        try:
            manifest = parse_manifest((current / MANIFEST_FILE).read_bytes(), str(current))
        except (OSError, ManifestError):
            return {}
        return {current / library.path: library.blob.sha256 for library in manifest.libraries}

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
                manifest = parse_manifest((entry / MANIFEST_FILE).read_bytes(), str(entry))
                wanted.update(blob.sha256 for blob in manifest.blobs())
        self.blobs.keep_only(wanted)

    def _current_id(self) -> str | None:
        """The cached set named current, if it is whole (and, with pinned keys, still verifies with them)."""
        try:
            set_id = (self.cache / "current").read_text().strip()
            folder = self.sets / set_id
            body = (folder / MANIFEST_FILE).read_bytes() if set_id else None
        except OSError:
            return None
        if body is None or not self.keys:
            return set_id or None
        try:
            signature = (folder / SIGNATURE_FILE).read_bytes() if (folder / SIGNATURE_FILE).exists() else None
            verify_manifest(body, signature, self.keys, f"the cached set {set_id[:12]} in {self.cache}")
        except (OSError, SignatureRefused) as problem:
            self.cache_refused = one_line(problem)
            return None
        return set_id

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

