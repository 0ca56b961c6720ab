"""What the page computes once for many requests, kept by key: an LRU shared by the threads that
build pages (cachetools alone is not thread-safe). A key holds everything the value depends on,
the catalog's generation and the caller's tags among them, so callers never share what differs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

Value = TypeVar("Value")


class Kept(Generic[Value]):
    """Values by key, at most `size` of them, the least recently used going first."""

    def __init__(self, size: int) -> None:
        self._entries: LRUCache[Hashable, Value] = LRUCache(maxsize=size)
        self._lock = threading.Lock()

    def get_or_make(self, key: Hashable, make: Callable[[], Value]) -> Value:
        with self._lock:
            found = self._entries.get(key)
        if found is None:
            found = make()  # outside the lock: two threads may both compute it, which is only work
            with self._lock:
                self._entries[key] = found
        return found
