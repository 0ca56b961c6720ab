"""Populating a compiled segment's memory maps at load, while they fit in a share of the memory.

A freshly opened map has no page mapped in this process: the first query to touch a page of
vectors or records takes a page fault (a minor one when the file is in the page cache, a disk read
when not), so the first thousands of queries of a new server or a new segment each pay for tens to
hundreds of faults. Populating the map (`madvise(MADV_POPULATE_READ)`, Linux 5.14+; `MADV_WILLNEED`
read-ahead elsewhere) reads the file into the page cache once and maps every page up front.

Only the maps a query reads are populated: the vectors, the 8-bit codes a clustered segment's
queries scan where they scan them (host/store/codes.py; for a model whose vectors are over the
budget, in place of the vectors), the records, and the sign codes of a segment without clusters (a
clustered one never reads them). What is scanned is mapped in 2 MB pages
where the system's transparent huge pages allow it (`madvise` mode, the usual default, or
`always`): a query's clusters then cost a TLB miss per 2 MB, not per 4 KB (`populate`). The pages
belong to the page cache, shared by every worker and every process mapping the file; what a worker
adds is its page tables (8 bytes a 4 KB page, much less in 2 MB pages). They can still be evicted under memory pressure like any
file page, so populating never makes a host run out of memory, but a store larger than the memory
would only evict its own pages: `Residency` populates segments while their total stays within a
budget (by default half of the physical memory) and leaves larger ones to fault in as they are read.

The madvise call is made through ctypes, which releases the GIL: populating a segment that a reload
brings in (on the watcher's thread) does not stop the server answering meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from host.store.compiled import Segment
from host.store.kernels import BUILT as COMPILED_LOOPS

MADV_POPULATE_READ = 22  # linux/mman.h (5.14+); Python's mmap module does not name it
PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
_READING_AGAIN_HELPS = [True]  # until a file read again stays in small pages (this process)
MOSTLY_HUGE = 0.9  # a map with less of it in 2 MB pages is read again (a cluster scan on one 60% so: no faster)
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.madvise.restype = ctypes.c_int


def physical_memory() -> int:
    """Bytes of RAM this process may use: the machine's, or its container's limit if lower
    (cgroup v2 `memory.max`; the page cache counts against it). 0 if unknown."""
    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        machine = 0
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return machine
    return min(machine or int(limit), int(limit)) if limit.isdigit() else machine


def default_populate_bytes() -> int:
    """Half of the physical memory: the most a host populates by default."""
    return physical_memory() // 2


def mapped_arrays(segment: Segment, *, codes: bool = False) -> list[np.ndarray]:
    """The memory-mapped arrays a query of this segment reads, what it scans first: its floats, or
    a clustered segment's 8-bit codes where they are scanned (`scanned_array`). With `codes` (a
    model too large for its floats to be kept in memory, host/search/query.py's SearchPolicy) its
    floats are left out: they are then read only to re-score and to answer."""
    scanned = scanned_array(segment, codes=codes)
    arrays = [scanned] if codes or scanned is segment.embeddings else [scanned, segment.embeddings]
    arrays.append(segment.records)
    if segment.cluster_offsets is None:
        arrays.append(segment.sign_codes)
    return [array for array in arrays if array.nbytes and _is_mapped(array)]


def scanned_array(segment: Segment, *, codes: bool = False) -> np.ndarray:
    """What a query of `segment` scans: its 8-bit codes where it has them and they are scanned (the
    compiled code scan is built, or with `codes`), else its floats."""
    return segment.codes if (codes or COMPILED_LOOPS) and segment.codes is not None else segment.embeddings


def mapped_bytes(segment: Segment, *, codes: bool = False) -> int:
    return sum(array.nbytes for array in mapped_arrays(segment, codes=codes))


def codes_scanned(segments: Iterable[Segment], budget: int) -> set[int]:
    """The ids of the segments whose model is scanned through its codes: its floats (every segment
    of the model together) take more than `budget` bytes, as SearchPolicy decides with --populate-bytes."""
    floats: dict[str, int] = {}
    for segment in segments:
        floats[segment.embedding_model] = floats.get(segment.embedding_model, 0) + segment.embeddings.nbytes
    return {id(segment) for segment in segments if floats[segment.embedding_model] > budget}


def _is_mapped(array: np.ndarray) -> bool:
    return _base(array, mmap.mmap) is not None


def _base(array: np.ndarray, kind: type) -> object | None:
    base = array.base
    while base is not None and not isinstance(base, kind):
        base = getattr(base, "base", None)
    return base


def _mapped_file(array: np.ndarray) -> str | None:
    memmap = _base(array, np.memmap)
    return getattr(memmap, "filename", None)


def huge_pages_possible() -> bool:
    """Whether transparent huge pages may back a mapping that asks for them (not `never`)."""
    try:
        return "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False


def populate(array: np.ndarray, *, huge: bool = False) -> bool:
    """Read `array`'s pages into memory and map them all in this process (where the kernel has no
    MADV_POPULATE_READ: start reading them ahead); whether they are all mapped.

    With `huge`, in 2 MB pages where the system allows: a query reads a few clusters of rows at
    random places, and with 4 KB pages every 4 KB of them costs a TLB miss (a cluster scan at 100k
    bits took 0.41 ms in 2 MB pages against 0.52 ms in 4 KB ones in one run on a busy machine, less
    of a difference in others: docs/performance.md)."""
    start, length = _span(array)
    if huge:
        _madvise(start, length, mmap.MADV_HUGEPAGE)
    if _madvise(start, length, MADV_POPULATE_READ) != 0:
        _madvise(start, length, mmap.MADV_WILLNEED)
        return False
    return True


def read_again_in_huge_pages(arrays: Sequence[np.ndarray]) -> None:
    """Of `arrays` (populated, asked for in 2 MB pages), read again those mapped mostly in small ones.

    The page cache holds a file in large pages when it read the file (Linux 6.x on ext4, XFS), not
    when the file was written (a segment just compiled): a map mostly in small pages is let go of
    and read again, once; the next processes to map it (the other workers) find it in 2 MB pages.
    Where reading again did not help (a file system without large pages), it is not tried again.
    /proc/self/smaps is read once for them all: each read walks every mapping of the process."""
    candidates = [(array, path) for array in arrays
                  if _span(array)[1] >= HUGE_PAGE and (path := _mapped_file(array)) is not None]
    if not candidates or not _READING_AGAIN_HELPS[0]:
        return
    shares = huge_page_shares([_span(array)[0] for array, _ in candidates])
    small = [(array, path) for (array, path), share in zip(candidates, shares, strict=True) if share < MOSTLY_HUGE]
    for array, path in small:
        start, length = _span(array)
        _madvise(start, length, mmap.MADV_DONTNEED)  # this process's small pages go: the cache may drop them
        with contextlib.suppress(OSError):
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)
        _madvise(start, length, MADV_POPULATE_READ)
    if small:
        _READING_AGAIN_HELPS[0] = min(huge_page_shares([_span(array)[0] for array, _ in small])) >= MOSTLY_HUGE


def _span(array: np.ndarray) -> tuple[int, int]:
    """The page-aligned start and the length of the memory `array` views."""
    address = array.__array_interface__["data"][0]
    start = address - address % PAGE
    return start, address + array.nbytes - start


def _madvise(start: int, length: int, advice: int) -> int:
    result: int = _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), advice)
    return result


def huge_page_shares(addresses: Sequence[int]) -> list[float]:
    """For each address, the share of the resident pages of this process's mapping there mapped as
    2 MB pages (0 where nothing is resident or nothing is mapped)."""
    shares = dict.fromkeys(addresses, 0.0)
    inside: list[int] = []  # the addresses in the mapping being read
    rss = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/smaps").read_text().splitlines():
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and not fields[0].endswith(":"):
                low, _, high = fields[0].partition("-")
                inside = [address for address in addresses if int(low, 16) <= address < int(high, 16)]
                rss = 0
            elif inside and fields[0] == "Rss:":
                rss = int(fields[1])
            elif inside and fields[0] == "FilePmdMapped:" and rss:
                for address in inside:
                    shares[address] = int(fields[1]) / rss
    return [shares[address] for address in addresses]


@dataclass
class Populated:
    """What one `Residency.admit` did: segments and bytes populated, those left to fault in, seconds."""

    segments: int = 0
    bytes: int = 0
    left: int = 0
    left_bytes: int = 0
    seconds: float = 0.0

    def describe(self, budget: int) -> str:
        said = f"populated the memory maps of {self.segments} {_segments(self.segments)} " \
               f"({self.bytes / 2**20:,.1f} MiB) in {self.seconds:.2f} s"
        if self.left:
            said += (f"; {self.left} {_segments(self.left)} ({self.left_bytes / 2**20:,.1f} MiB) read as queries "
                     f"touch them: over --populate-bytes ({budget:,} bytes)")
        return said


def _segments(count: int) -> str:
    return "segment" if count == 1 else "segments"


class Residency:
    """Which segments of a serving process have their maps populated, within `budget` bytes in all."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._populated: dict[int, tuple[Segment, int]] = {}  # id -> (segment, bytes): those served
        self._lock = threading.Lock()

    def admit(self, segments: Iterable[Segment]) -> Populated:
        """Populate the maps of `segments` (the generation about to be served) not populated yet,
        while the total populated stays within the budget. Segments no longer served stop counting."""
        started = time.perf_counter()
        done = Populated()
        huge = huge_pages_possible()
        with self._lock:
            current = {id(segment): segment for segment in segments}
            through_codes = codes_scanned(current.values(), self.budget)
            self._populated = {key: held for key, held in self._populated.items() if key in current}
            total = sum(size for _, size in self._populated.values())
            scanned_in_huge_pages: list[np.ndarray] = []
            for key, segment in current.items():
                if key in self._populated:
                    continue
                size = mapped_bytes(segment, codes=key in through_codes)
                if total + size > self.budget:
                    done.left += 1
                    done.left_bytes += size
                    continue
                scanned = scanned_array(segment, codes=key in through_codes)
                for array in mapped_arrays(segment, codes=key in through_codes):
                    if populate(array, huge=huge and array is scanned) and huge and array is scanned:
                        scanned_in_huge_pages.append(array)  # what its queries scan, in 2 MB pages
                self._populated[key] = (segment, size)
                total += size
                done.segments += 1
                done.bytes += size
            read_again_in_huge_pages(scanned_in_huge_pages)
        done.seconds = time.perf_counter() - started
        return done

    def is_populated(self, segment: Segment) -> bool:
        return id(segment) in self._populated
