"""Populating a compiled library's memory maps at load, while they fit in a share of the memory.

A freshly opened map has no page mapped in this process: the first query to touch a page of
vectors or records takes a page fault (a minor one when the file is in the page cache, a disk read
when not), so the first thousands of queries of a new server or a new library each pay for tens to
hundreds of faults. Populating the map (`madvise(MADV_POPULATE_READ)`, Linux 5.14+; `MADV_WILLNEED`
read-ahead elsewhere) reads the file into the page cache once and maps every page up front.

Only the maps a query reads are populated: the vectors, the records, and the sign codes of a
library without clusters (a clustered one never reads them). The pages belong to the page cache,
shared by every worker and every process mapping the file; what a worker adds is its page tables
(8 bytes a page: ~2 MB per GB mapped). They can still be evicted under memory pressure like any
file page, so populating never makes a host run out of memory, but a store larger than the memory
would only evict its own pages: `Residency` populates libraries while their total stays within a
budget (by default half of the physical memory) and leaves larger ones to fault in as they are read.

The madvise call is made through ctypes, which releases the GIL: populating a library that a reload
brings in (on the watcher's thread) does not stop the server answering meanwhile.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from host.store.compiled import CompiledLibrary

log = logging.getLogger("polymath_host.store")
MADV_POPULATE_READ = 22  # linux/mman.h (5.14+); Python's mmap module does not name it
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.madvise.restype = ctypes.c_int


def physical_memory() -> int:
    """Bytes of RAM in this machine (0 if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def default_populate_bytes() -> int:
    """Half of the physical memory: the most a host populates by default."""
    return physical_memory() // 2


def mapped_arrays(library: CompiledLibrary) -> list[np.ndarray]:
    """The memory-mapped arrays a query of this library reads."""
    arrays = [library.embeddings, library.records]
    if library.cluster_offsets is None:
        arrays.append(library.sign_codes)
    return [array for array in arrays if array.nbytes and _is_mapped(array)]


def mapped_bytes(library: CompiledLibrary) -> int:
    return sum(array.nbytes for array in mapped_arrays(library))


def _is_mapped(array: np.ndarray) -> bool:
    base = array.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return base is not None


def populate(array: np.ndarray) -> bool:
    """Read `array`'s pages into memory and map them all in this process (True), or at least start
    reading them ahead (False, where the kernel has no MADV_POPULATE_READ)."""
    address = array.__array_interface__["data"][0]
    start = address - address % PAGE
    length = address + array.nbytes - start
    if _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), MADV_POPULATE_READ) == 0:
        return True
    _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), mmap.MADV_WILLNEED)
    return False


@dataclass
class Populated:
    """What one `Residency.admit` did: libraries and bytes populated, those left to fault in, seconds."""

    libraries: int = 0
    bytes: int = 0
    left: int = 0
    left_bytes: int = 0
    seconds: float = 0.0

    def describe(self, budget: int) -> str:
        said = f"populated the memory maps of {self.libraries} {_libraries(self.libraries)} " \
               f"({self.bytes / 2**20:,.1f} MiB) in {self.seconds:.2f} s"
        if self.left:
            said += (f"; {self.left} {_libraries(self.left)} ({self.left_bytes / 2**20:,.1f} MiB) read as queries "
                     f"touch them: over --populate-bytes ({budget:,} bytes)")
        return said


def _libraries(count: int) -> str:
    return "library" if count == 1 else "libraries"


class Residency:
    """Which libraries of a serving process have their maps populated, within `budget` bytes in all."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._populated: dict[int, tuple[CompiledLibrary, int]] = {}  # id -> (library, bytes): those served
        self._lock = threading.Lock()

    def admit(self, libraries: Iterable[CompiledLibrary]) -> Populated:
        """Populate the maps of `libraries` (the generation about to be served) not populated yet,
        while the total populated stays within the budget. Libraries no longer served stop counting."""
        started = time.perf_counter()
        done = Populated()
        with self._lock:
            current = {id(library): library for library in libraries}
            self._populated = {key: held for key, held in self._populated.items() if key in current}
            total = sum(size for _, size in self._populated.values())
            for key, library in current.items():
                if key in self._populated:
                    continue
                size = mapped_bytes(library)
                if total + size > self.budget:
                    done.left += 1
                    done.left_bytes += size
                    continue
                for array in mapped_arrays(library):
                    populate(array)
                self._populated[key] = (library, size)
                total += size
                done.libraries += 1
                done.bytes += size
        done.seconds = time.perf_counter() - started
        return done

    def is_populated(self, library: CompiledLibrary) -> bool:
        return id(library) in self._populated
