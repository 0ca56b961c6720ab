"""The soak's server: `serve --workers N` with tight limits, its CLI, processes, metrics and log.

The limits are tight so that every abuse class trips one, yet far from what the well-behaved
load needs: its answers are ~4 KB and its connections are busy, never idle for 2 s.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from host.service.harness import HostFailed, RunningHost, child_environment, host_command, start_host


@dataclass(frozen=True)
class Limits:
    """What the soak's `serve` is told; the abusers read what they must trip from here."""

    max_answer_bytes: int = 7_000_000  # ballast answers of 2,500 bits (~6.5 MB) pass, of 2,900 (~7.5 MB) do not
    answer_cache_bytes: int = 16 << 20  # half for answers, half for library files, per worker
    header_timeout: float = 2.0
    write_timeout: float = 3.0  # unlike header_timeout, so the timings too tell the two timers apart
    body_read_timeout: float = 2.0
    max_connections: int = 128  # per worker; the abusers hold at most ~50 sockets during the load
    watch_interval: float = 0.2

    def flags(self) -> list[str]:
        return ["--max-answer-bytes", str(self.max_answer_bytes), "--answer-cache-bytes", str(self.answer_cache_bytes),
                "--header-timeout", str(self.header_timeout), "--write-timeout", str(self.write_timeout),
                "--body-read-timeout", str(self.body_read_timeout), "--max-connections", str(self.max_connections),
                "--watch-interval", str(self.watch_interval)]


LIMITS = Limits()


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`polymath-host ARGS...` in the work folder (this very `host` package)."""
    return subprocess.run(host_command(*args), cwd=cwd, capture_output=True, text=True, env=child_environment(),
                          timeout=60)


def start_server(workdir: Path, workers: int) -> RunningHost:
    """`serve --workers N` on the work folder, once every worker has loaded the libraries.

    No embedder: no library here has its model, and its background load would count as memory.
    The debug log level adds one line per connection the server drops, with its reason (DropReasons).
    """
    try:
        server = start_host("libraries", "--access", "access.SECRET.json", "--embedder", "none", "--log-level", "debug",
                            *LIMITS.flags(),
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


class LogFollower:
    """The server log's lines as they come: each call returns the complete lines written since the last.

    The log holds one JSON access line per request (megabytes a minute under load): it is read
    from where the last call stopped, never again from the start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def new_lines(self) -> list[str]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        return [line.decode(errors="replace") for line in complete]


class DropReasons:
    """Why the server dropped each connection, by client port, from its debug lines; shared by the abusers."""

    LINE = re.compile(r"dropping a connection from \('127\.0\.0\.1', (\d+)\): (.+)$")

    def __init__(self, path: Path) -> None:
        self.follower = LogFollower(path)
        self.reasons: dict[int, str] = {}
        self.lock = threading.Lock()

    def reason(self, port: int, wait: float = 2.0) -> str | None:
        """The reason the server gave for dropping the connection from `port` (taken once), or None."""
        deadline = time.monotonic() + wait
        while True:
            with self.lock:
                for line in self.follower.new_lines():
                    if match := self.LINE.search(line):
                        self.reasons[int(match[1])] = match[2]
                if port in self.reasons:
                    return self.reasons.pop(port)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def service_lines(log: str, pattern: str) -> int:
    """How many lines of the log match `pattern` (a regular expression)."""
    return len(re.findall(pattern, log, re.MULTILINE))


def reload_seconds(log: str) -> list[float]:
    """How long each reload took, by the server's own lines ("libraries reloaded: ..., 0.31 s")."""
    return [float(seconds) for seconds in re.findall(r"libraries reloaded: .*, ([0-9.]+) s$", log, re.MULTILINE)]
