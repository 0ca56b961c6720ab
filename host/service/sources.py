"""Where a serving process reads its libraries and access rules: local files, or a replica's mirror.

`--libraries` is a local folder (or file), read in place as always, or the URL of a published set
(`s3://`, `https://`, `http://`, `file://`), mirrored under the cache folder by a `Replica`
(host/catalog/replica.py): the catalog then reads the mirror's current set, a local folder too.
`--access` is a local file, or a URL followed into the cache; with `--libraries URL` and no
`--access`, the access file published with the set is used. `--origin-key` pins the publisher keys
a replica's manifests must be signed with; the access file then must come with the set (or be a
local file): one followed at a URL is not covered by any signature.

`open_sources` only decides and opens; nothing is fetched. `first_sync` is what `serve` runs once
before it loads: it says in one line what went wrong, and whether that is fatal (a refusal, such as
missing credentials or a bucket that does not exist, with nothing cached to serve) or only means
"not ready yet" (an unreachable origin: the replica serves once a sync succeeds).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from access.cli import DEFAULT_ACCESS_FILE
from host.catalog.replica import AccessFollower, Replica, one_line
from host.embedders.graph_cache import default_cache_dir
from host.origin import OriginError, OriginRefused, is_origin_url, open_origin
from host.origin.manifest import MANIFEST_KEY, OBJECTS, ManifestError
from host.origin.publisher_keys import KeyProblem, PublicKey, load_pinned_key
from host.origin.signatures import SignatureRefused
from host.service.settings import Settings

NOTHING_YET = ".none"  # the folder a replica without any set loads from: it does not exist


class StartRefused(Exception):
    """`serve` cannot start this way: one line saying why and what to do."""


@dataclass(frozen=True)
class Sources:
    settings: Settings  # with cache_dir filled in for a replica, so workers find the same mirror
    replica: Replica | None
    access_file: Path
    access_follower: AccessFollower | None

    @property
    def root(self) -> Path:
        """The folder the catalog loads now: the local one, or the replica's current set."""
        if self.replica is None:
            return Path(self.settings.libraries)
        return self.replica.current() or self.replica.sets / NOTHING_YET

    @property
    def compiled_dir(self) -> Path | None:
        return self.replica.compiled if self.replica is not None else self.settings.cache_dir

    def digests(self) -> dict[Path, str]:
        """A replica's library files and their SHA-256s, as the set's manifest says (none for a local folder)."""
        return self.replica.digests() if self.replica is not None else {}

    def trust_line(self) -> str | None:
        """What a replica trusts its origin with, in one line for `serve` to say at start (None: not a replica)."""
        if self.replica is None:
            return None
        keys = self.replica.keys
        if not keys:
            return (f"origin {self.replica.origin.url}: trusted unsigned (no --origin-key): whoever can write to it "
                    "decides what this replica serves")
        return (f"origin {self.replica.origin.url}: only sets signed by {'one of ' if len(keys) > 1 else ''}"
                f"{', '.join(key.short for key in keys)} are served")

    def first_sync(self) -> list[str]:
        """Sync once before loading: lines to say (empty when all went well); StartRefused when fatal."""
        said = []
        if self.access_follower is not None:
            follower = self.access_follower
            try:
                follower.sync()
                follower.status.good(follower.url)
            except OriginRefused as problem:
                if not follower.target.exists():
                    raise StartRefused(f"--access {follower.url}: {one_line(problem)}") from None
                said.append(self._fault(follower, problem, "keeping the access rules cached before"))
            except (OriginError, OSError, ValueError) as problem:
                said.append(self._fault(follower, problem, "keeping the access rules cached before"
                                        if follower.target.exists() else "public bits only until it answers"))
        if self.replica is not None:
            replica = self.replica
            if replica.cache_refused is not None:
                said.append(f"origin: not serving the cached set: {replica.cache_refused}")
            try:
                replica.sync()
                replica.status.good(replica.origin.url)
            except OriginRefused as problem:
                if replica.current() is None:
                    raise StartRefused(one_line(problem)) from None
                said.append(self._fault(replica, problem, "serving the set cached before"))
            except (OriginError, ManifestError, OSError, ValueError) as problem:
                said.append(self._fault(replica, problem, "serving the set cached before" if replica.current()
                                        else "alive, and not ready (/readyz 503) until a sync succeeds"))
        return said

    @staticmethod
    def _fault(source: Replica | AccessFollower, problem: Exception, serving: str) -> str:
        line = one_line(problem)
        if isinstance(problem, SignatureRefused):
            source.status.refusals[problem.reason] += 1
        source.status.failures += 1
        source.status.problem = line  # said here, once: the watcher does not say it again
        return f"origin: {line}; {serving}"


def open_sources(settings: Settings) -> Sources:
    """The sources `settings` name, opened but not fetched; StartRefused for what cannot work."""
    libraries, access = str(settings.libraries), settings.access
    replica = None
    keys = pinned_keys(settings.origin_key)
    if keys and not is_origin_url(libraries):
        raise StartRefused(f"--origin-key: --libraries {libraries} is a local folder, read as it is; pinned keys check a "
                           "published set (--libraries s3://..., https://... or file://...)")
    if keys and access is not None and is_origin_url(str(access)):
        raise StartRefused(f"--access {access}: an access file followed at a URL is not covered by the set's "
                           "signature (--origin-key): publish it with the set (publish --access FILE), or give a local file")
    try:
        if is_origin_url(libraries):
            cache = settings.cache_dir or origin_cache(libraries)
            settings = replace(settings, cache_dir=cache)
            replica = Replica(open_origin(libraries), cache, access_from_manifest=access is None, keys=keys)
        follower = None
        if access is not None and is_origin_url(str(access)):
            folder, _, key = str(access).rstrip("/").rpartition("/")
            cache = replica.cache if replica is not None else origin_cache(folder)
            target = cache / f"access-{hashlib.sha256(str(access).encode()).hexdigest()[:16]}.json"
            follower = AccessFollower(open_origin(folder), key, target)
    except OriginRefused as problem:
        raise StartRefused(one_line(problem)) from None
    if replica is None and not Path(libraries).exists():
        raise StartRefused(f"{libraries} does not exist; pass --libraries PATH (a folder of library files) "
                           "or the URL of a published set")
    if replica is None and (Path(libraries) / MANIFEST_KEY).is_file() and (Path(libraries) / OBJECTS).is_dir():
        raise StartRefused(f"{libraries} holds a published set, not library files: serve it with "
                           f"--libraries {Path(libraries).resolve().as_uri()}")
    if follower is not None:
        access_file = follower.target
    elif access is not None:
        access_file = Path(access)
        if not access_file.exists():
            raise StartRefused(f"access file {access_file} does not exist; "
                               f"create it with: polymath-host access init --access {access_file}")
    else:
        # The default file is watched even while absent: `access init` after `serve` switches access on.
        access_file = replica.access_file if replica is not None else DEFAULT_ACCESS_FILE
    return Sources(settings, replica, access_file, follower)


def pinned_keys(given: str | None) -> tuple[PublicKey, ...]:
    """The keys `--origin-key` pins (given once or more: joined with commas); StartRefused for one that is not a key."""
    keys: list[PublicKey] = []
    for value in (given or "").split(","):
        if not value.strip():
            continue
        try:
            key = load_pinned_key(value.strip())
        except KeyProblem as problem:
            raise StartRefused(str(problem)) from None
        if all(key.text != known.text for known in keys):
            keys.append(key)
    return tuple(keys)


def origin_cache(url: str) -> Path:
    """Each origin's own folder in the user's cache, so two replicas of different sets never mix."""
    return default_cache_dir() / "origins" / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
