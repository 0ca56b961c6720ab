"""Working buffers for the ranking hot path, reused from query to query.

A fresh multi-megabyte numpy array per query costs page faults (glibc hands large blocks back to
the kernel on free, so each query touched new pages: 5.8-7.1 ms of a ~13 ms approximate query in
a fresh process at 100k bits). Instead each query in flight borrows one set of named buffers
(`with SCRATCH.lent(): ...`), grown on demand and given back afterwards. The sets are lent, not
tied to threads: the server's pool has dozens of threads, but only as many sets exist as
queries ever ran at once, and at most `KEEP_SETS` wait unused.

A buffer is scratch: valid until the query that borrowed it asks for the same name again or
gives the set back. Nothing that outlives a query (a Selection, a cached answer) may hold a view
of one. Outside `lent()`, `take` returns a new array.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

KEEP_BYTES = 32 << 20  # a larger buffer is made for the call and not kept
KEEP_SETS = 4  # unused sets kept for the next queries; more are dropped when given back


class Scratch:
    """Named buffers, used by one query at a time."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def take(self, name: str, size: int, dtype: type[np.generic] | np.dtype) -> np.ndarray:
        """A 1-D buffer of `size` elements (uninitialised)."""
        kind = np.dtype(dtype)
        buffer = self.buffers.get(name)
        if buffer is None or buffer.dtype != kind or len(buffer) < size:
            if size * kind.itemsize > KEEP_BYTES:
                return np.empty(size, dtype=kind)
            buffer = np.empty(size, dtype=kind)
            self.buffers[name] = buffer
        return buffer[:size]


class ScratchPool:
    """Sets of buffers lent to the queries in flight, one set each."""

    def __init__(self, keep: int = KEEP_SETS) -> None:
        self.keep = keep
        self._free: list[Scratch] = []
        self._lock = threading.Lock()
        self._current = threading.local()

    @contextmanager
    def lent(self) -> Iterator[Scratch]:
        """A set for this thread's query until the block ends (the same set if one is lent already)."""
        current: Scratch | None = getattr(self._current, "scratch", None)
        if current is not None:
            yield current
            return
        with self._lock:
            scratch = self._free.pop() if self._free else Scratch()
        self._current.scratch = scratch
        try:
            yield scratch
        finally:
            self._current.scratch = None
            with self._lock:
                if len(self._free) < self.keep:
                    self._free.append(scratch)

    def take(self, name: str, size: int, dtype: type[np.generic] | np.dtype) -> np.ndarray:
        """A buffer of the set lent to this thread's query, or a new array outside `lent()`."""
        current: Scratch | None = getattr(self._current, "scratch", None)
        if current is None:
            return np.empty(size, dtype=dtype)
        return current.take(name, size, dtype)


SCRATCH = ScratchPool()
