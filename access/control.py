"""AccessControl: turns a presented token into a Grant, following the file as it changes.

The current settings and the cache of verified tokens live together in one immutable
``_State``; a reload builds a new one and swaps the reference. A request that started under
the old state finishes under it, and can at worst fill the old (discarded) cache, so a
revocation takes effect for every request that starts after the reload.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cachetools import TTLCache

from .config import AccessSettings, load_settings, public_only_settings, token_digest
from .errors import AccessConfigError, TokenRejected
from .grant import ANONYMOUS, Grant
from .tokens import looks_like_jwt, verify_token

log = logging.getLogger("polymath_host.access")

CACHE_SIZE = 10_000
CACHE_SECONDS = 60.0
CHECK_INTERVAL_SECONDS = 1.0

# (st_mtime_ns, st_size, st_ino), or None when the file does not exist.
_Signature = tuple[int, int, int] | None


class _VerifiedCache:
    """Successful JWT verifications by SHA-256 of the token, bounded in size and age.

    An entry is never served past the token's own ``exp``: after that the token goes through
    full verification again (which applies the leeway and says "expired").
    """

    def __init__(self) -> None:
        self._entries: TTLCache[bytes, tuple[Grant, int | None]] = TTLCache(CACHE_SIZE, CACHE_SECONDS)
        self._lock = threading.Lock()  # TTLCache is not thread-safe

    def get(self, digest: bytes) -> Grant | None:
        with self._lock:
            entry = self._entries.get(digest)
        if entry is None:
            return None
        grant, expires_at = entry
        if expires_at is not None and time.time() >= expires_at:
            return None
        return grant

    def put(self, digest: bytes, grant: Grant, expires_at: int | None) -> None:
        with self._lock:
            self._entries[digest] = (grant, expires_at)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


@dataclass(frozen=True)
class _State:
    settings: AccessSettings
    cache: _VerifiedCache
    signature: _Signature


class AccessControl:
    """The host's access rules: authorize tokens, expose the `restricted` signals."""

    def __init__(
        self,
        settings: AccessSettings,
        path: Path | None = None,
        *,
        check_interval: float = CHECK_INTERVAL_SECONDS,
        _signature: _Signature = None,
    ) -> None:
        self._path = path
        self._check_interval = check_interval
        # from_file passes the stat taken *before* reading, so an edit made during the
        # read is noticed by the next check rather than lost.
        self._state = _State(settings, _VerifiedCache(), _signature)
        self._last_check = time.monotonic()
        self._reload_lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path | None, *, check_interval: float = CHECK_INTERVAL_SECONDS) -> AccessControl:
        """Load the file, or run public-only when ``path`` is None or the file is missing.

        A missing file is still watched: creating it later switches access on.
        Raises AccessConfigError if the file exists but is malformed.
        """
        if path is None:
            return cls(public_only_settings(), None, check_interval=check_interval)
        path = Path(path)
        signature = _stat(path)
        try:
            settings = load_settings(path)
        except FileNotFoundError:
            signature, settings = None, public_only_settings(str(path))
        else:
            _warn_if_readable_by_others(path)
        return cls(settings, path, check_interval=check_interval, _signature=signature)

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
        verified = verify_token(state.settings, token)
        grant = Grant(subject=verified.subject, access_tags=verified.access_tags)
        state.cache.put(digest, grant, verified.expires_at)
        return grant

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
                self._state = _State(self._state.settings, self._state.cache, signature)
                return False
            if signature is None:
                log.warning("%s is gone: serving public bits only until it returns", self._path)
            else:
                log.info("access settings reloaded from %s", self._path)
                _warn_if_readable_by_others(self._path)
            self._state = _State(settings, _VerifiedCache(), signature)
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
