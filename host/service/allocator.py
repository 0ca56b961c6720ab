"""glibc's allocator, told to keep a worker's memory near what it uses (Linux; elsewhere nothing).

Answers are rendered in the threads of a pool (Starlette's, up to 40), and glibc gives threads that
meet a busy arena arenas of their own, up to eight per core. Each keeps the pages of what was freed
in it: 16 clients asking for distinct ~1-3 MB answers at once left a worker 107-116 MB above where
it started, of which the answer cache held at most 32 MiB (scripts in the hardening notes). With two
arenas the same run left 28-31 MB. Rendering holds the GIL, so threads rarely allocate at the same
moment, and two arenas cost nothing we could measure.

Loading the local embedder also leaves ~42 MB freed but kept (reading and building its graph);
`release_free_memory` hands that back once it has loaded.

`MALLOC_ARENA_MAX` in the environment, glibc's own setting, wins over ours.

Python's cyclic garbage collector is paused while a library compiles (`garbage_collector_paused`):
reading a million bits makes millions of short-lived containers, none of them in a cycle, and the
collector's passes over them took 1.4 s of a 1M-bit compile.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

log = logging.getLogger("polymath_host")
ARENAS = 2
M_ARENA_MAX = -8  # mallopt's parameter number (glibc malloc.h)


@cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    # musl and macOS have no mallopt/malloc_trim: there is nothing to tell them.
    return libc if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` malloc arenas in this process from now on (call it before threads start);
    whether glibc took it. Leaves an operator's MALLOC_ARENA_MAX alone."""
    libc = _glibc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def release_free_memory() -> None:
    """Give the pages of freed memory back to the system (glibc's malloc_trim)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


_pauses = 0  # blocks in `garbage_collector_paused`, in any thread
_resume = False  # whether the collector was on when the first of them began
_pauses_lock = threading.Lock()


@contextmanager
def garbage_collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs; back as it was once the last block
    (of any thread) ends. Cycles made meanwhile are collected then."""
    global _pauses, _resume
    with _pauses_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
