"""What every request reads: the current catalog generation, the access rules, the caches."""

from __future__ import annotations

import threading
from typing import Any

from cachetools import LRUCache
from starlette.requests import Request

from access import AccessControl
from host.catalog import Catalog
from host.query import SearchPolicy
from host.settings import Settings
from host.web.metrics import Metrics

PUBLISHED_LIBRARIES_KEPT = 64


class HostState:
    def __init__(self, settings: Settings, catalog: Catalog, access: AccessControl) -> None:
        self.settings = settings
        self.catalog = catalog
        self.access = access
        self.search = SearchPolicy(settings.search, settings.approximate_from, settings.oversample)
        self.metrics = Metrics()
        self.answers = LockedCache(settings.query_cache_entries)  # rendered query results
        self.published = LockedCache(PUBLISHED_LIBRARIES_KEPT)  # rendered library files and ETags
        self._describe(catalog)

    def install(self, catalog: Catalog) -> None:
        """Swap in a new generation: requests already running keep the one they read."""
        self.catalog = catalog
        self.metrics.count("polymath_reloads_total")
        self._describe(catalog)

    def _describe(self, catalog: Catalog) -> None:
        # /metrics is as public as every other path: it counts only what anyone may see.
        self.metrics.gauge("polymath_public_libraries_loaded", len(catalog.public_libraries()))
        self.metrics.gauge("polymath_public_bits_loaded",
                           sum(library.visible_bit_count(frozenset()) for library in catalog.libraries))
        self.metrics.gauge("polymath_catalog_generation", catalog.generation)
        self.metrics.gauge("polymath_library_problems", len(catalog.problems))


def host_state(request: Request) -> HostState:
    state: HostState = request.app.state.host
    return state


class LockedCache:
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
