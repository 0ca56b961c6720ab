"""What every request reads: the current catalog generation, the access rules, the caches."""

from __future__ import annotations

import logging
import threading
from typing import Any

from cachetools import LRUCache
from starlette.requests import Request

from access import AccessControl
from host.catalog.generations import Catalog
from host.embedders.service import Embedders
from host.search.query import SearchPolicy
from host.service.settings import Settings
from host.service.sources import Sources
from host.store.residency import Residency
from host.web.access_rules import AccessRules
from host.web.metrics import Metrics
from host.web.page.kept import Kept
from host.web.page.maps import ProjectionCache
from host.web.page.sign_in import SignIn

log = logging.getLogger("polymath_host")
ETAGS_KEPT = 4096
LISTINGS_KEPT = 64
LARGEST_SHARE = 8  # one entry may take at most this fraction of a cache: it never empties it alone
# What an entry costs beyond its body and its key's bytes and text: the tuples, the objects' headers
# and the LRU's bookkeeping (measured with tracemalloc: ~760 bytes for an answer's entry).
ENTRY_OVERHEAD = 1024


class HostState:
    def __init__(self, settings: Settings, catalog: Catalog, access: AccessControl, embedders: Embedders) -> None:
        self.settings = settings
        self.residency = Residency(settings.populate_bytes)
        self._populate(catalog)
        self.catalog = catalog
        self.access = AccessRules(access)  # and each publisher folder's access file (host/web/access_rules.py)
        self.access.follow(catalog.root, catalog.scopes)
        self.embedders = embedders
        self.search = SearchPolicy(settings.search, settings.approximate_from, settings.oversample, settings.probes,
                                   codes_from=settings.populate_bytes)
        self.metrics = Metrics()
        # Rendered query answers and library files share the memory the settings allow, half each.
        self.answers = ByteBoundedCache(settings.answer_cache_bytes // 2)
        self.published = ByteBoundedCache(settings.answer_cache_bytes // 2)
        self.etags: LRUCache[tuple[Any, ...], str] = LRUCache(maxsize=ETAGS_KEPT)
        self.projections = ProjectionCache()  # libraries' maps (the page)
        # What the page lists (host/web/page/data.py `_listing`), by generation, grant and publisher.
        self.listings: Kept[Any] = Kept(LISTINGS_KEPT)
        self.sign_in: SignIn | None = None  # the page's sign-in at an identity provider (serve --sign-in)
        self.public_generation = 0
        self.origins: Sources | None = None  # where the libraries come from: a replica's sync shows in /readyz, /metrics
        self._public_fingerprint: tuple[tuple[str, str], ...] | None = None
        self._describe(catalog)

    def install(self, catalog: Catalog) -> None:
        """Swap in a new generation: requests already running keep the one they read."""
        self._populate(catalog)  # before the swap: the first queries of a new library find its pages mapped
        self.access.follow(catalog.root, catalog.scopes)  # before the swap too: its scoped tags are granted at once
        self.catalog = catalog
        self._describe(catalog)

    def _populate(self, catalog: Catalog) -> None:
        catalog.models  # noqa: B018 (built here, before the generation serves: never on a request's path)
        populated = self.residency.admit(catalog.segments)
        if populated.segments or (populated.left and self.residency.budget):
            log.info("%s", populated.describe(self.residency.budget))

    def _describe(self, catalog: Catalog) -> None:
        # /metrics and /readyz are as public as every other path: they tell only what anyone may
        # see. The public generation moves when the public view changes, never for a private change.
        fingerprint = catalog.public_fingerprint()
        if fingerprint != self._public_fingerprint:
            self._public_fingerprint = fingerprint
            self.public_generation += 1
        self.metrics.gauge("polymath_public_libraries_loaded", len(fingerprint))
        self.metrics.gauge("polymath_public_bits_loaded", sum(library.public_bit_count for library in catalog.libraries))
        self.metrics.gauge("polymath_public_generation", self.public_generation)
        self.metrics.gauge("polymath_library_problems", catalog.public_problems)


def host_state(request: Request) -> HostState:
    state: HostState = request.app.state.host
    return state


class ByteBoundedCache:
    """An LRU of rendered bodies, bounded by what its entries cost in bytes (`entry_bytes`: a body,
    its key's bytes and text, and ENTRY_OVERHEAD), shared by the threads that compute them
    (cachetools is not thread-safe). A body over 1/LARGEST_SHARE of it is not kept.

    Counting only the bodies once let a stream of distinct small answers (a 384-dimension query's
    key holds 1.5 KB of vector beside a ~300-byte answer) hold seven times the limit."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: LRUCache[tuple[Any, ...], tuple[bytes, int]] = LRUCache(
            maxsize=max(1, max_bytes), getsizeof=lambda entry: entry[1])
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> bytes | None:
        with self._lock:
            entry = self._entries.get(key)
        return entry[0] if entry is not None else None

    def keeps(self, size: int) -> bool:
        return size <= self.max_bytes // LARGEST_SHARE

    def put(self, key: tuple[Any, ...], body: bytes) -> None:
        cost = entry_bytes(key, body)
        if self.keeps(cost):
            with self._lock:
                self._entries[key] = (body, cost)

    @property
    def held_bytes(self) -> int:
        """What the entries kept now cost, as counted against `max_bytes`."""
        with self._lock:
            return int(self._entries.currsize)


def entry_bytes(key: tuple[Any, ...], body: bytes) -> int:
    """What keeping `body` under `key` costs: the body, the key's bytes and text, and ENTRY_OVERHEAD."""
    return len(body) + sum(len(part) for part in key if isinstance(part, bytes | str)) + ENTRY_OVERHEAD
