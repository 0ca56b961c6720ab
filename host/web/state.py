"""What every request reads: the current catalog generation, the access rules, the caches."""

from __future__ import annotations

import threading
from typing import Any

from cachetools import LRUCache

from access import ANONYMOUS, AccessControl, Grant, TokenRejected
from host.catalog import Catalog
from host.web.errors import HTTPError
from host.web.metrics import Metrics
from host.settings import Settings

PUBLISHED_LIBRARIES_KEPT = 64


class HostState:
    def __init__(self, settings: Settings, catalog: Catalog, access: AccessControl) -> None:
        self.settings = settings
        self.catalog = catalog
        self.access = access
        self.metrics = Metrics()
        self.answers = _LockedCache(settings.query_cache_entries)  # rendered query results
        self.published = _LockedCache(PUBLISHED_LIBRARIES_KEPT)  # rendered library files and ETags
        self._describe(catalog)

    def install(self, catalog: Catalog) -> None:
        """Swap in a new generation: requests already running keep the one they read."""
        self.catalog = catalog
        self.metrics.count("polymath_reloads_total")
        self._describe(catalog)

    def tick(self) -> None:
        """Housekeeping between requests: follow the access file even when no token arrives."""
        self.access.reload_if_changed()

    def grant_for(self, token: str | None) -> Grant:
        """What a token may see; a token that fails verification is a 401 saying why."""
        if not token:
            return ANONYMOUS
        try:
            return self.access.authorize(token)
        except TokenRejected as rejected:
            raise HTTPError(
                401,
                f"the access token was refused: {rejected.reason}",
                {"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{rejected.reason}"'},
            ) from None

    def subject_of(self, token: str) -> str | None:
        """Who a valid token belongs to; None for an unknown, refused or anonymous one."""
        try:
            return self.access.authorize(token).subject
        except TokenRejected:
            return None

    def _describe(self, catalog: Catalog) -> None:
        # /metrics is as public as every other path: it counts only what anyone may see.
        self.metrics.gauge("polymath_public_libraries_loaded", len(catalog.public_libraries()))
        self.metrics.gauge("polymath_public_bits_loaded",
                           sum(library.visible_bit_count(frozenset()) for library in catalog.libraries))
        self.metrics.gauge("polymath_catalog_generation", catalog.generation)
        self.metrics.gauge("polymath_library_problems", len(catalog.problems))


class _LockedCache:
    """A bounded LRU shared by the threads that compute answers (cachetools is not thread-safe)."""

    def __init__(self, entries: int) -> None:
        self.enabled = entries > 0
        self._entries: LRUCache[tuple[Any, ...], Any] = LRUCache(maxsize=max(1, entries))
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Any:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        if self.enabled:
            with self._lock:
                self._entries[key] = value
