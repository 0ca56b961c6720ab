"""What `publish --prune` may delete at an origin: objects no recent set names, past a grace period.

An object is deleted only when all of these hold:

- none of the last `keep_sets` published manifests names it (nor `manifest.json`, whatever it is);
- no manifest that was still the one in force within the grace period names it: a replica that
  read that manifest just before it was replaced may still be downloading its objects;
- it was itself written before the grace period: a publish running now uploads its objects before
  its manifest, and they must not go before the manifest that names them arrives.

Objects named by no manifest kept in the history (the history starts with the first publish of
this version) were last named by a manifest replaced no later than the oldest one the history
holds, so they go only once that one is older than the grace period too. History manifests and
signatures follow their sets. Keys outside `objects/`, `manifests/` and `signatures/` (and
`manifest.json`) are never touched.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from host.origin.base import Listed, ObjectMissing, Origin, OriginError
from host.origin.history import MANIFESTS, HistoryEntry, parse_history_key
from host.origin.manifest import MANIFEST_KEY, MANIFEST_LIMIT, OBJECTS, Manifest, ManifestError, parse_manifest
from host.origin.signatures import SIGNATURES, manifest_digest, signature_key

PREFIXES = (f"{OBJECTS}/", f"{MANIFESTS}/", f"{SIGNATURES}/")


class PruneRefused(Exception):
    """Pruning cannot go ahead safely (a kept manifest that cannot be read); nothing was deleted."""


@dataclass(frozen=True)
class PrunePlan:
    doomed: list[Listed] = field(default_factory=list)  # what goes, history manifests last
    kept: list[Listed] = field(default_factory=list)  # what was looked at and stays

    @property
    def doomed_bytes(self) -> int:
        return sum(item.size for item in self.doomed)

    @property
    def kept_bytes(self) -> int:
        return sum(item.size for item in self.kept)


def plan_prune(origin: Origin, *, keep_sets: int, grace: float, now: float | None = None,
               pending: Manifest | None = None) -> PrunePlan:
    """What pruning `origin` would delete now. `pending`: a manifest about to be published (a dry run),
    counted as the newest set."""
    if keep_sets < 1:
        raise ValueError("keep_sets must be at least 1: the set in force is never pruned")
    now = time.time() if now is None else now
    cutoff = now - grace
    listing = [item for prefix in PREFIXES for item in origin.list_objects(prefix)]
    history = sorted((entry for entry in map(parse_history_key, (item.key for item in listing)) if entry is not None),
                     key=lambda entry: entry.published)
    # Every known set in publishing order, the pending one last; each stops being in force when the next is published.
    times = [entry.published.timestamp() for entry in history] + ([now] if pending is not None else [])
    count = len(times)
    kept_sets = {index for index in range(count) if index >= count - keep_sets or times[index + 1] > cutoff}
    named: set[str] = set()
    for index in sorted(kept_sets):
        if index < len(history):
            named |= _named_by(_read(origin, history[index].key), history[index])
        elif pending is not None:
            named |= {blob.key for blob in pending.blobs()}
    current = _current(origin)
    if current is not None:
        named |= {blob.key for blob in _parsed(current, f"{origin.url}/{MANIFEST_KEY}").blobs()}
        named.add(signature_key(current))
    oldest = times[0] if times else _modified(origin, now)
    doomed, kept, dropped_history = [], [], []
    for item in listing:
        entry = parse_history_key(item.key)
        if item.key in named or (item.key.startswith(f"{MANIFESTS}/") and entry is None):
            kept.append(item)
        elif entry is not None:
            dropped_history.append(item)  # kept_sets holds every set replaced within the grace period
        elif item.modified < cutoff and oldest < cutoff:
            doomed.append(item)
        else:
            kept.append(item)
    return PrunePlan(doomed + dropped_history, kept)


def prune(origin: Origin, plan: PrunePlan) -> None:
    """Delete what `plan` dooms: objects and signatures first, the history manifests naming them last."""
    origin.delete([item.key for item in plan.doomed])


def _named_by(body: bytes, entry: HistoryEntry) -> set[str]:
    manifest = _parsed(body, entry.key)
    return {blob.key for blob in manifest.blobs()} | {entry.key, signature_key(body)}


def _parsed(body: bytes, where: str) -> Manifest:
    try:
        return parse_manifest(body, where)
    except ManifestError as problem:
        raise PruneRefused(f"{problem}; nothing was pruned") from None


def _read(origin: Origin, key: str) -> bytes:
    try:
        fetched = origin.fetch(key, limit=MANIFEST_LIMIT)
    except OriginError as problem:
        raise PruneRefused(f"{problem}; nothing was pruned") from None
    assert fetched is not None  # no ETag was sent
    if manifest_digest(fetched.body) not in key:
        raise PruneRefused(f"{origin.url}/{key}: its bytes are not the manifest its name says; nothing was pruned")
    return fetched.body


def _current(origin: Origin) -> bytes | None:
    try:
        fetched = origin.fetch(MANIFEST_KEY, limit=MANIFEST_LIMIT)
    except ObjectMissing:
        return None
    assert fetched is not None
    return fetched.body


def _modified(origin: Origin, default: float) -> float:
    """When `manifest.json` was last written (an origin published before the history began), else `default`."""
    found: Iterable[Listed] = (item for item in origin.list_objects(MANIFEST_KEY) if item.key == MANIFEST_KEY)
    return next((item.modified for item in found), default)

