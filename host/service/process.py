"""Setting up a serving process: logs, BLAS threads, and the listening socket of worker processes.

`serve` calls these in its own process; with `--workers N` every worker calls them again, since a
worker is a fresh process that inherits only the environment.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path

LOG_LEVEL_VARIABLE = "POLYMATH_HOST_LOG_LEVEL"  # how `serve --workers N` hands the log level to workers
ACCESS_LOG = "polymath_host.access_log"


def configure_logging(level: str) -> None:
    """Service logs as text on stderr; the access log as bare JSON lines on stdout, for log shippers."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    access_log = logging.getLogger(ACCESS_LOG)
    if access_log.handlers:
        return
    access_lines = logging.StreamHandler(sys.stdout)
    access_lines.setFormatter(logging.Formatter("%(message)s"))
    access_log.addHandler(access_lines)
    access_log.propagate = False


def limit_blas_threads(threads: int) -> None:
    """Applies to this process from now on, numpy already loaded or not; 0 leaves BLAS its own choice."""
    if threads > 0:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")


def configure_scans(threads: int, max_batch: int) -> None:
    """This process's batcher of exact passes (host/search/batching.py): threads per pass, queries per pass."""
    from host.search.batching import BATCHER

    BATCHER.configure(threads=threads, max_batch=max_batch)


def cores() -> int:
    """The CPUs this process may run on (its affinity, as a container's cpuset limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def own_memory() -> int:
    """Bytes of memory this process alone holds: its anonymous pages (heap, arrays read into memory,
    models) and page tables. File pages (the libraries' memory maps, the code) are the page cache's,
    shared with every process that maps them, and are not counted."""
    fields = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            name, _, value = line.partition(":")
            fields[name] = value
        return sum(int(fields[name].split()[0]) * 1024 for name in ("RssAnon", "VmPTE") if name in fields)
    except (OSError, ValueError):
        return 0


def bind_workers_over_tcp() -> None:
    """Make uvicorn bind the workers' shared socket as TCP.

    uvicorn binds it with proto 0, so asyncio never sets TCP_NODELAY on the workers' connections
    and every keep-alive answer waits ~40 ms for a delayed ACK (uvicorn issue #3149). The bound
    socket is rebuilt as TCP; the workers inherit it.
    """
    import uvicorn

    bind_socket = uvicorn.Config.bind_socket

    def bind_tcp_socket(config: uvicorn.Config) -> socket.socket:
        bound = bind_socket(config)
        if bound.family not in (socket.AF_INET, socket.AF_INET6):
            return bound
        return socket.socket(bound.family, bound.type, socket.IPPROTO_TCP, fileno=bound.detach())

    uvicorn.Config.bind_socket = bind_tcp_socket  # type: ignore[method-assign,assignment]
