"""AccessControl: turns a presented token into a Grant, following the file as it changes.

The current settings, their trusted issuers (each with where its keys come from) and the cache of
verified tokens live together in one immutable ``_State``; a reload builds a new one and swaps the
reference. A request that started under the old state finishes under it, and can at worst fill the
old (discarded) cache, so a revocation takes effect for every request that starts after the reload.

A JWT whose (unverified) `iss` is one of the file's trusted issuers is verified as that provider's
token (access/provider_tokens.py) with the keys the process holds for it (access/issuer_keys.py,
shared by every access file trusting the issuer); any other JWT as the host's own, exactly as
before. `authorize` never waits on the network: a token naming a key id its issuer's keys lack gets
its refetch from `keys_pending`, which the web layer awaits first without blocking its event loop.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import AccessSettings, load_settings, public_only_settings, token_digest
from .errors import AccessConfigError, TokenRejected
from .grant import ANONYMOUS, Grant
from .issuer_keys import REGISTRY, IssuerKeyRegistry, IssuerKeys
from .issuers import TrustedIssuer
from .jwks import KeySet
from .provider_tokens import unverified_header, unverified_issuer, verify_provider_token
from .tokens import looks_like_jwt, verify_token

log = logging.getLogger("polymath_host.access")

CACHE_SIZE = 100_000
CACHE_SECONDS = 60.0  # the host's own tokens; a provider's are kept until they expire, while its keys hold
CHECK_INTERVAL_SECONDS = 1.0
TAG_SETS_KEPT = 4096

# (st_mtime_ns, st_size, st_ino), or None when the file does not exist.
_Signature = tuple[int, int, int] | None


class _Provider:
    """A trusted issuer of the settings in force, and the keys its tokens are verified with."""

    def __init__(self, trusted: TrustedIssuer, fetched: IssuerKeys | None) -> None:
        self.trusted = trusted
        self.fetched = fetched  # None when the file gives the keys
        self._too_old_said = False

    def keys(self) -> KeySet | None:
        """The keys in force: the file's, or the last good ones fetched while not older than the file allows."""
        if self.fetched is None:
            return self.trusted.jwks
        snapshot = self.fetched.snapshot()
        if snapshot is None:
            return None
        if time.time() - snapshot.fetched_at > self.trusted.last_good_keys_seconds:
            if not self._too_old_said:
                self._too_old_said = True
                log.error("issuer %s: its last good keys are older than %d s (last_good_keys_seconds): its tokens are "
                          "refused until its keys can be fetched again", self.trusted.issuer,
                          self.trusted.last_good_keys_seconds)
            return None
        self._too_old_said = False
        return snapshot.keys


class _VerifiedCache:
    """Successful JWT verifications by SHA-256 of the token, bounded in number (the oldest go first).

    An entry is never served past the token's own ``exp`` (then the token goes through full
    verification again, which applies the leeway and says "expired"), a host token's not past
    CACHE_SECONDS, and a provider token's only while its issuer's keys in force still hold the key
    that verified it (a key the provider withdrew takes its tokens with it).
    """

    def __init__(self, size: int = CACHE_SIZE) -> None:
        # A plain dict and a queue of its keys, the oldest evicted first: less memory per entry than an
        # LRU's linked list, and a token pushed out is only verified again. (Popping a dict's first key
        # instead would scan the holes earlier deletions leave: 0.5 ms an insert once full.)
        self._entries: dict[bytes, tuple[Grant, float, _Provider | None, str | None]] = {}
        self._order: deque[bytes] = deque()
        self._size = size
        self._lock = threading.Lock()
        # One frozenset per distinct grant of tags (a few: rules decide them), not one per token: 200 bytes each.
        self._tag_sets: dict[frozenset[str], frozenset[str]] = {}

    def shared(self, tags: frozenset[str]) -> frozenset[str]:
        if len(self._tag_sets) >= TAG_SETS_KEPT:
            return tags
        return self._tag_sets.setdefault(tags, tags)

    def get(self, digest: bytes) -> Grant | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        grant, valid_until, provider, thumbprint = entry
        if time.time() >= valid_until:
            return None
        if provider is not None and thumbprint is not None:
            keys = provider.keys()
            if keys is None or not keys.holds(thumbprint):
                return None
        return grant

    def put(self, digest: bytes, grant: Grant, valid_until: float, provider: _Provider | None = None,
            thumbprint: str | None = None) -> None:
        with self._lock:
            if digest not in self._entries:
                while len(self._entries) >= self._size:
                    del self._entries[self._order.popleft()]
                self._order.append(digest)
            self._entries[digest] = (grant, valid_until, provider, thumbprint)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True)
class _State:
    settings: AccessSettings
    cache: _VerifiedCache
    signature: _Signature
    providers: dict[str, _Provider]


def _providers(settings: AccessSettings, registry: IssuerKeyRegistry) -> dict[str, _Provider]:
    providers = {}
    for trusted in settings.trusted_issuers:
        fetched = registry.keys_for(trusted.issuer, trusted.jwks_uri) if trusted.fetches_keys else None
        providers[trusted.issuer] = _Provider(trusted, fetched)
        if fetched is not None:
            fetched.snapshot()  # the first fetch starts now, in the background
    return providers


class AccessControl:
    """The host's access rules: authorize tokens, expose the `restricted` signals."""

    def __init__(
        self,
        settings: AccessSettings,
        path: Path | None = None,
        *,
        check_interval: float = CHECK_INTERVAL_SECONDS,
        registry: IssuerKeyRegistry = REGISTRY,
        _signature: _Signature = None,
    ) -> None:
        self._path = path
        self._check_interval = check_interval
        self._registry = registry
        # from_file passes the stat taken *before* reading, so an edit made during the
        # read is noticed by the next check rather than lost.
        self._state = self._new_state(settings, _signature)
        self._last_check = time.monotonic()
        self._reload_lock = threading.Lock()

    def _new_state(self, settings: AccessSettings, signature: _Signature) -> _State:
        return _State(settings, _VerifiedCache(), signature, _providers(settings, self._registry))

    @classmethod
    def from_file(cls, path: Path | None, *, check_interval: float = CHECK_INTERVAL_SECONDS,
                  registry: IssuerKeyRegistry = REGISTRY) -> AccessControl:
        """Load the file, or run public-only when ``path`` is None or the file is missing.

        A missing file is still watched: creating it later switches access on.
        Raises AccessConfigError if the file exists but is malformed.
        """
        if path is None:
            return cls(public_only_settings(), None, check_interval=check_interval, registry=registry)
        path = Path(path)
        signature = _stat(path)
        try:
            settings = load_settings(path)
        except FileNotFoundError:
            signature, settings = None, public_only_settings(str(path))
        else:
            _warn_if_readable_by_others(path)
        return cls(settings, path, check_interval=check_interval, registry=registry, _signature=signature)

    @property
    def settings(self) -> AccessSettings:
        return self._state.settings

    @property
    def restricted_count(self) -> bool:
        return self._state.settings.restricted_count

    @property
    def restricted_message(self) -> str:
        return self._state.settings.restricted_message

    @property
    def cached_verifications(self) -> int:
        """How many verified tokens the cache holds now (at most CACHE_SIZE)."""
        return len(self._state.cache)

    @property
    def default_private_access_tag(self) -> str:
        return self._state.settings.default_private_access_tag

    def authorize(self, token: str | None) -> Grant:
        """The Grant for a presented token (None or '' is anonymous).

        Raises TokenRejected for a JWT that fails verification, and for a legacy token
        whose name is listed in `revoked`. An unknown opaque token is anonymous, as with the
        original host.
        """
        self.reload_if_changed()
        if not token:
            return ANONYMOUS
        state = self._state
        digest = token_digest(token)
        # Legacy tokens first, so that an opaque token that happens to contain two dots
        # still works as configured.
        legacy = _match_legacy(state.settings, digest)
        if legacy is not None:
            if legacy.subject in state.settings.revoked:
                raise TokenRejected("revoked")
            return legacy
        if not looks_like_jwt(token):
            return ANONYMOUS
        cached = state.cache.get(digest)
        if cached is not None:
            return cached
        provider = None
        if state.providers:
            issuer = unverified_issuer(token)
            provider = state.providers.get(issuer or "")
            if provider is None and issuer is not None and issuer != state.settings.issuer:
                raise TokenRejected("wrong issuer")  # neither this file's own nor one it trusts
        if provider is not None:
            try:
                checked = verify_provider_token(provider.trusted, provider.keys(), token, state.settings.revoked)
            except TokenRejected as rejected:
                if (rejected.reason in ("unknown key id", "issuer keys unavailable") and provider.fetched is not None
                        and provider.fetched.pending() is None):
                    # Never waited for here; a caller that did not ask keys_pending first still gets the
                    # rotated keys for its next request (the refetch is bounded as always).
                    provider.fetched.refetch()
                raise
            grant = Grant(subject=checked.subject, access_tags=state.cache.shared(checked.access_tags))
            state.cache.put(digest, grant, checked.expires_at, provider, checked.key.thumbprint)
            return grant
        verified = verify_token(state.settings, token)
        grant = Grant(subject=verified.subject, access_tags=state.cache.shared(verified.access_tags))
        valid_until = time.time() + CACHE_SECONDS
        state.cache.put(digest, grant, valid_until if verified.expires_at is None else min(valid_until,
                                                                                           verified.expires_at))
        return grant

    def keys_pending(self, token: str | None) -> Future[Any] | None:
        """The fetch of a trusted issuer's keys that `token` should wait for before `authorize`, if any.

        Only for a provider's token not verified already: its issuer's first fetch while it runs, or,
        when the token's key id is not among the keys held, a refetch (at most one per issuer per 30 s:
        access/issuer_keys.py). Never blocks; the caller decides how long to wait on the future.
        """
        state = self._state
        if not token or not state.providers or state.cache.get(token_digest(token)) is not None:
            return None
        provider = state.providers.get(unverified_issuer(token) or "")
        if provider is None or provider.fetched is None:
            return None
        try:
            kid = unverified_header(token).get("kid")
        except TokenRejected:
            return None
        snapshot = provider.fetched.snapshot()
        if snapshot is not None and (not isinstance(kid, str) or snapshot.keys.knows(kid)):
            return None
        return provider.fetched.refetch()

    def reload_if_changed(self, force: bool = False) -> bool:
        """Re-read the file if its stat changed (checked at most once per interval, unless `force`).

        Returns True if new settings were installed. A malformed file is logged once and
        the previous settings stay; a deleted file means public-only (the admin removed
        access, so fail closed).
        """
        if self._path is None:
            return False
        now = time.monotonic()
        if not force and now - self._last_check < self._check_interval:
            return False
        if not self._reload_lock.acquire(blocking=False):
            return False  # another thread is checking right now
        try:
            self._last_check = now
            for provider in self._state.providers.values():
                provider.keys()  # keys due for refreshing are fetched in the background, requests or not
            signature = _stat(self._path)
            if signature == self._state.signature:
                return False
            try:
                settings = load_settings(self._path) if signature else public_only_settings(str(self._path))
            except FileNotFoundError:
                signature, settings = None, public_only_settings(str(self._path))
            except AccessConfigError as error:
                log.error("access settings not reloaded, keeping the previous ones: %s", error)
                # Remember this version so the same broken file is reported once, not every second.
                self._state = _State(self._state.settings, self._state.cache, signature, self._state.providers)
                return False
            if signature is None:
                log.warning("%s is gone: serving public bits only until it returns", self._path)
            else:
                log.info("access settings reloaded from %s", self._path)
                _warn_if_readable_by_others(self._path)
            self._state = self._new_state(settings, signature)
            return True
        finally:
            self._reload_lock.release()


def _match_legacy(settings: AccessSettings, digest: bytes) -> Grant | None:
    """Compare against every legacy token in constant time, without stopping at a match.

    Comparing fixed-length SHA-256 digests means neither the length of a configured token
    nor which entry matched shows in the timing.
    """
    found: Grant | None = None
    for legacy in settings.legacy_tokens:
        if hmac.compare_digest(digest, legacy.digest):
            found = Grant(subject=legacy.name, access_tags=legacy.access_tags)
    return found


def _stat(path: Path) -> _Signature:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        # Unreadable metadata: report a value that differs from any real stat, so the next
        # load attempt produces a proper error message.
        return (-1, -1, -1)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _warn_if_readable_by_others(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return
    if os.name == "posix" and mode & 0o077:
        log.warning("%s holds secrets but has mode %o; run: chmod 600 %s", path, mode, path)
