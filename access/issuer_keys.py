"""An identity provider's keys, fetched and kept fresh for every access file of this process.

One `IssuerKeys` per (issuer, jwks_uri) in the process (`REGISTRY`), shared by every access file
that trusts the issuer, so ten publishers trusting one Auth0 tenant cost one fetch. The registry
holds them weakly: an issuer no access file trusts any more is forgotten, and nothing fetches for it.

Fetching never happens on a request's own time. A fetch runs on its own daemon thread; what a
request can do is:

- `snapshot()`: the last good keys, at once (None before the first good fetch). When they are due
  for refreshing (their `Cache-Control: max-age`, held between 1 minute and 24 hours; an hour when
  the provider says nothing), a fetch starts in the background and the request goes on with these.
- `refetch()`: for a token naming a key id the keys lack (the provider rotated its keys). It hands
  out the fetch in flight, or starts one unless such a refetch started less than REFETCH_INTERVAL
  seconds ago (then None): a flood of made-up key ids costs the provider one fetch per 30 s and the
  host nothing more. Refreshes due by age do not count, so a rotation right after one is seen at once.
  A request may wait on the future it gets (host/web/caller.py waits at most a few seconds, without
  blocking the event loop); the fetch itself is bounded (access/fetching.py).

A failing provider (down, slow, garbage, HTML, 50 MB, a key set refused whole) leaves the last good
keys in place; background retries back off from 30 s to 10 minutes. Whether keys that old may still
verify is each access file's choice (`last_good_keys_seconds`, default 24 h), checked by the caller
against `KeySnapshot.fetched_at`. Each change of state is said in one log line (first keys, new
keys, a failure with its reason, recovery), and counted for /metrics (`status()`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .discovery import ProviderMetadata, fetch_metadata
from .fetching import FetchFailed, fetch_json
from .jwks import JwksRefused, KeySet, parse_jwks

log = logging.getLogger("polymath_host.access")

REFETCH_INTERVAL = 30.0
DEFAULT_FRESH_SECONDS = 3600.0
MIN_FRESH_SECONDS, MAX_FRESH_SECONDS = 60.0, 86400.0
RETRY_SECONDS = (30.0, 60.0, 120.0, 300.0, 600.0)  # after 1, 2, 3... failures in a row


@dataclass(frozen=True)
class KeySnapshot:
    keys: KeySet
    fetched_at: float  # time.time() of the fetch
    jwks_uri: str


@dataclass(frozen=True)
class IssuerKeysStatus:
    issuer: str
    jwks_uri: str | None  # as configured; None: by discovery
    fetched_at: float | None
    fetches: int
    failures: dict[str, int]
    problem: str | None  # the reason of the current failure, None while all is well


@dataclass(frozen=True)
class FetchedKeys:
    keys: KeySet
    document: dict[str, Any]  # the key set as the provider published it
    jwks_uri: str
    max_age: float | None
    metadata: ProviderMetadata | None  # the discovery document used, if any


def fetch_key_set(issuer: str, jwks_uri: str | None, metadata: ProviderMetadata | None = None) -> FetchedKeys:
    """Fetch an issuer's keys now, by discovery when `jwks_uri` is None (reusing `metadata` if given).

    Raises FetchFailed, or JwksRefused for a key set that must not be used (or holds no usable key)."""
    if jwks_uri is None:
        metadata = metadata or fetch_metadata(issuer)
        jwks_uri = metadata.jwks_uri
    fetched = fetch_json(jwks_uri)
    keys = parse_jwks(fetched.document, jwks_uri)
    if not keys.keys:
        skipped = f" ({'; '.join(keys.skipped)[:300]})" if keys.skipped else ""
        raise JwksRefused(f"{jwks_uri}: holds no key this host can verify with{skipped}")
    return FetchedKeys(keys, fetched.document, jwks_uri, fetched.max_age, metadata)


class IssuerKeys:
    """One issuer's keys in this process: the last good ones, and the fetches that refresh them."""

    def __init__(self, issuer: str, jwks_uri: str | None, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.issuer = issuer
        self.jwks_uri = jwks_uri
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._snapshot: KeySnapshot | None = None
        self._metadata: ProviderMetadata | None = None
        self._metadata_until = -math.inf
        self._refresh_at = -math.inf  # due at once: the first fetch starts when the first access file asks
        self._last_refetch = -math.inf
        self._in_flight: Future[KeySnapshot | None] | None = None
        self._fetches = 0
        self._failures: Counter[str] = Counter()
        self._failed_in_a_row = 0
        self._problem: str | None = None

    def snapshot(self) -> KeySnapshot | None:
        """The last good keys (None before the first good fetch); starts a background refresh when due."""
        if self._clock() >= self._refresh_at:
            with self._lock:
                if self._in_flight is None and self._clock() >= self._refresh_at:
                    self._start()
        return self._snapshot

    def refetch(self) -> Future[KeySnapshot | None] | None:
        """For a token whose key id the keys lack: the fetch in flight, or a new one unless a refetch started
        less than REFETCH_INTERVAL seconds ago (then None: the token's kid stays unknown)."""
        with self._lock:
            if self._in_flight is not None:
                return self._in_flight
            if self._clock() - self._last_refetch < REFETCH_INTERVAL:
                return None
            self._last_refetch = self._clock()
            return self._start()

    def pending(self) -> Future[KeySnapshot | None] | None:
        return self._in_flight

    def status(self) -> IssuerKeysStatus:
        with self._lock:
            snapshot = self._snapshot
            return IssuerKeysStatus(self.issuer, self.jwks_uri, snapshot.fetched_at if snapshot else None,
                                    self._fetches, dict(self._failures), self._problem)

    def _start(self) -> Future[KeySnapshot | None]:
        """Start a fetch on its own thread (the lock is held)."""
        future: Future[KeySnapshot | None] = Future()
        future.set_running_or_notify_cancel()  # running: no waiter's cancellation can take it from the thread
        self._in_flight = future
        self._fetches += 1
        threading.Thread(target=self._run, args=(future,), name="issuer-keys", daemon=True).start()
        return future

    def _run(self, future: Future[KeySnapshot | None]) -> None:
        try:
            metadata = self._metadata if self._clock() < self._metadata_until else None
            fetched = fetch_key_set(self.issuer, self.jwks_uri, metadata)
        except FetchFailed as failed:
            self._failed(failed.reason, str(failed))
        except JwksRefused as refused:
            self._failed("bad_document", str(refused))
        except Exception as error:  # never let a provider's answer take the thread down unsaid
            log.exception("issuer %s: fetching its keys failed unexpectedly", self.issuer)
            self._failed("bad_document", f"{type(error).__name__}")
        else:
            self._succeeded(KeySnapshot(fetched.keys, self._wall(), fetched.jwks_uri), fetched.max_age, fetched.metadata)
        finally:
            with self._lock:
                self._in_flight = None
            future.set_result(self._snapshot)

    def _succeeded(self, snapshot: KeySnapshot, max_age: float | None, metadata: ProviderMetadata | None) -> None:
        fresh = min(MAX_FRESH_SECONDS, max(MIN_FRESH_SECONDS, DEFAULT_FRESH_SECONDS if max_age is None else max_age))
        with self._lock:
            before, problem = self._snapshot, self._problem
            self._snapshot, self._problem, self._failed_in_a_row = snapshot, None, 0
            self._refresh_at = self._clock() + fresh
            if metadata is not None and metadata is not self._metadata:
                self._metadata = metadata
                self._metadata_until = self._clock() + min(MAX_FRESH_SECONDS, max(
                    MIN_FRESH_SECONDS, DEFAULT_FRESH_SECONDS if metadata.max_age is None else metadata.max_age))
        kids = ", ".join(snapshot.keys.kids)
        if before is None:
            log.info("issuer %s: %d key(s) fetched from %s (kid %s)", self.issuer, len(snapshot.keys.keys),
                     snapshot.jwks_uri, kids)
        elif problem is not None:
            log.warning("issuer %s: its keys are fetched again from %s (kid %s); the failure was: %s", self.issuer,
                        snapshot.jwks_uri, kids, problem)
        elif before.keys.kids != snapshot.keys.kids:
            log.info("issuer %s: its keys changed (kid %s, before %s)", self.issuer, kids, ", ".join(before.keys.kids))

    def _failed(self, reason: str, message: str) -> None:
        with self._lock:
            self._failures[reason] += 1
            self._failed_in_a_row += 1
            self._refresh_at = self._clock() + RETRY_SECONDS[min(self._failed_in_a_row, len(RETRY_SECONDS)) - 1]
            said, self._problem = self._problem == reason, reason
            snapshot = self._snapshot
        if said:
            return
        kept = (f"the keys fetched {_when(snapshot.fetched_at)} stay in force" if snapshot is not None
                else "its tokens are refused until its keys can be fetched")
        log.error("issuer %s: its keys could not be fetched (%s): %s; %s", self.issuer, reason, message, kept)


class IssuerKeyRegistry:
    """The IssuerKeys of this process, one per (issuer, jwks_uri), held as long as an access file trusts it."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock, self._wall = clock, wall  # a test's registry may live in the past, or move faster
        self._lock = threading.Lock()
        self._entries: weakref.WeakValueDictionary[tuple[str, str | None], IssuerKeys] = weakref.WeakValueDictionary()

    def keys_for(self, issuer: str, jwks_uri: str | None) -> IssuerKeys:
        with self._lock:
            keys = self._entries.get((issuer, jwks_uri))
            if keys is None:
                keys = self._entries[(issuer, jwks_uri)] = IssuerKeys(issuer, jwks_uri, clock=self._clock, wall=self._wall)
            return keys

    def statuses(self) -> list[IssuerKeysStatus]:
        with self._lock:
            held = list(self._entries.values())
        return sorted((keys.status() for keys in held), key=lambda status: (status.issuer, status.jwks_uri or ""))


REGISTRY = IssuerKeyRegistry()


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
