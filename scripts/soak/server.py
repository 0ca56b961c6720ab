"""The soak's server: `serve --workers N`, its CLI, processes, metrics and log."""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path

import httpx
import psutil

from host.harness import HostFailed, RunningHost, child_environment, host_command, start_host


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`polymath-host ARGS...` in the work folder (this very `host` package)."""
    return subprocess.run(host_command(*args), cwd=cwd, capture_output=True, text=True, env=child_environment(),
                          timeout=60)


def start_server(workdir: Path, workers: int) -> RunningHost:
    """`serve --workers N` on the work folder, once every worker has loaded the libraries.

    No embedder: no library here has its model, and its background load would count as memory.
    """
    try:
        server = start_host("libraries", "--access", "access.SECRET.json", "--embedder", "none", "--watch-interval", "0.2",
                            cwd=workdir, workers=workers, log_path=workdir / "server.log", ready_path="/readyz",
                            timeout=60)
        # /readyz answers as soon as one worker is up. A worker still starting when the publisher
        # first breaks a file would load its catalog without that library (it has no previous
        # version to keep), and answers would rightly fail the check: wait for every worker.
        server.wait_until(lambda: server.log().count("Application startup complete.") >= workers, timeout=60,
                          interval=0.1, what=f"start its {workers} workers")
        return server
    except HostFailed as failure:
        raise SystemExit(str(failure)) from None


def server_processes(server: RunningHost) -> list[psutil.Process]:
    """The server and its workers, as psutil sees them now."""
    processes = []
    for pid in server.pids():
        with contextlib.suppress(psutil.Error):
            processes.append(psutil.Process(pid))
    return processes


def metric_values(url: str, name: str, reads: int = 8) -> list[float]:
    """The metric from several fresh connections (each worker keeps its own)."""
    values = set()
    for _ in range(reads):
        text = httpx.get(f"{url}/metrics").text
        match = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
        if match:
            values.add(float(match[1]))
    return sorted(values)


def service_lines(log: str, pattern: str) -> int:
    """How many lines of the log match `pattern` (a regular expression)."""
    return len(re.findall(pattern, log, re.MULTILINE))
