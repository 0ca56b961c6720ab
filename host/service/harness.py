"""A real `polymath-host serve` in a child process: the harness of the tests, the benchmark and the soak.

`start_host(libraries, *arguments)` spawns `python -m host serve --libraries ... --port <free>`
with this interpreter, its output going to a log file, and returns once the server answers
`GET /healthz` (or another path) with 200. `RunningHost.stop()` sends SIGTERM (the graceful stop
a deployment uses) and, if the server has not exited in time, SIGKILLs its whole process group.
Anything that goes wrong while waiting (the server exits, or never answers) raises `HostFailed`
with the exit code and the end of the server's log.

Invariants:
- The child runs the same `host` package as this process (its folder goes first on PYTHONPATH),
  so a test, benchmark or soak always measures the code it was started from.
- The server binds 127.0.0.1 unless `--host` is among the arguments; each server has its own
  process group, so that a kill reaches its workers too. So a Ctrl-C at a terminal reaches the
  process that started the server, not the server: stop it in a `with` block or a `finally`.
- The log file is opened once, by the child: this process holds no descriptor to it.

Only the standard library is used: the harness needs neither the web stack nor an HTTP client.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Self

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds this `host` package
LOCALHOST = "127.0.0.1"
LOG_TAIL_CHARACTERS = 20_000  # how much of the log an error quotes


class HostFailed(RuntimeError):
    """The server exited, or did not answer in time; the message holds the end of its log."""


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port nothing listens on at this moment (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def host_command(*arguments: str) -> list[str]:
    """The command line of `polymath-host ARGUMENTS...` run by this interpreter."""
    return [sys.executable, "-m", "host", *arguments]


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child that must import this very `host` package."""
    path = os.pathsep.join(part for part in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if part)
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def http_status(port: int, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None, timeout: float = 1.0) -> tuple[int, bytes]:
    """One request to 127.0.0.1:port over a fresh connection: the status and the body."""
    connection = http.client.HTTPConnection(LOCALHOST, port, timeout=timeout)
    try:
        connection.request(method, path, body, dict(headers or {}))
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@dataclass
class RunningHost:
    """A `serve` child process on 127.0.0.1:`port`, its log in `log_path`."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    spawned_at: float = field(default_factory=time.perf_counter)  # time.perf_counter() at the spawn

    def log(self) -> str:
        """Everything the server (and its workers) wrote so far, stdout and stderr together."""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, characters: int = LOG_TAIL_CHARACTERS) -> str:
        text = self.log()
        return text if len(text) <= characters else f"[... {len(text) - characters} characters before]\n{text[-characters:]}"

    def raise_if_exited(self) -> None:
        """HostFailed if the server process is no longer running."""
        if self.process.poll() is not None:
            raise HostFailed(f"the host exited with {self.process.returncode} (log {self.log_path}):\n{self.log_tail()}")

    def wait_until(self, answered: Callable[[], bool], *, timeout: float, interval: float = 0.05,
                   what: str = "answer") -> float:
        """Poll `answered()` until it is true: the seconds since the spawn.

        `answered` may raise OSError (nothing listens yet, or a connection was cut): that is
        polled again. If the server exits, or `timeout` seconds after the spawn pass, the server
        is stopped and HostFailed raised with its log.
        """
        deadline = self.spawned_at + timeout
        while time.perf_counter() < deadline:
            try:
                self.raise_if_exited()
            except HostFailed:
                self.kill()  # workers that outlived their parent
                raise
            with contextlib.suppress(OSError):
                if answered():
                    return time.perf_counter() - self.spawned_at
            time.sleep(interval)
        self.kill()
        raise HostFailed(f"the host did not {what} within {timeout} s (log {self.log_path}):\n{self.log_tail()}")

    def wait_until_ready(self, path: str = "/healthz", *, timeout: float = 30, interval: float = 0.05) -> float:
        """Wait for `GET path` to answer 200 (see `wait_until`): the seconds since the spawn."""
        return self.wait_until(lambda: http_status(self.port, "GET", path)[0] == 200, timeout=timeout, interval=interval,
                               what=f"answer GET {path} with 200")

    def pids(self) -> list[int]:
        """The server process and all its descendants (workers, resource tracker), from /proc."""
        children: dict[int, list[int]] = {}
        with contextlib.suppress(OSError):
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    with contextlib.suppress(OSError, IndexError, ValueError):
                        parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                        children.setdefault(parent, []).append(int(entry.name))
        tree, pending = [], [self.process.pid]
        while pending:
            pid = pending.pop()
            tree.append(pid)
            pending.extend(children.get(pid, []))
        return tree

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM, then wait up to `timeout` s: the exit code, or None if it had to be killed.

        Killing takes the whole process group (the workers too). Stopping a stopped host only
        returns its exit code.
        """
        if self.process.poll() is not None:
            return self.process.returncode
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL the server's whole process group (it has its own) and reap the server."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=15)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, problem: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def spawn_host(libraries: Path | str, *arguments: str, cwd: Path | None = None, workers: int | None = 1,
               env: Mapping[str, str] | None = None, log_path: Path | None = None, port: int | None = None,
               own_session: bool = False, open_files: tuple[int, int] | None = None) -> RunningHost:
    """Spawn `serve --libraries LIBRARIES --port PORT ARGUMENTS...` and return at once (not yet answering).

    - `cwd`: the server's working folder (default: the folder holding `libraries`); it is where
      a relative `--libraries` or `--access` is found, and where an `access.SECRET.json` is
      picked up when no `--access` is given.
    - `workers`: adds `--workers N` (default 1: one process, whatever the cores, so that a test suite
      or a benchmark does not multiply its servers' processes; None: serve's own default, one worker
      per core), unless `--workers` is among the arguments; `env`: variables added to this
      process's environment;
    - `log_path`: where stdout and stderr go (default `<cwd>/host-<port>.log`);
    - `port`: default a free one;
    - `own_session`: start the server in a session of its own (it always has a process group of
      its own). On Linux with autogroup scheduling (the default) a session is also a CPU-share
      group: the server then gets a group's share of the CPUs, apart from whoever loads it.
      That changes throughput: the soak's wrk got half the requests/s through a server in its
      own session on a shared 2-core machine. The benchmark keeps its servers in their own
      session, as it always has (its figures compare across runs); the tests and the soak do not.
    - `open_files`: the server's open-file limits (soft, hard), to see what `serve` does under low ones.
    """
    port = port or free_port()
    if cwd is None:
        libraries = Path(libraries).resolve()
    folder = cwd if cwd is not None else Path(libraries).parent
    log_path = log_path or folder / f"host-{port}.log"
    command = host_command("serve", "--libraries", str(libraries), "--port", str(port), *arguments)
    if "--host" not in arguments:
        command += ["--host", LOCALHOST]
    if workers is not None and "--workers" not in arguments:
        command += ["--workers", str(workers)]
    with log_path.open("wb") as log_file:  # the child writes through its own copy of the descriptor
        spawned_at = time.perf_counter()
        process = subprocess.Popen(command, cwd=folder, stdout=log_file, stderr=subprocess.STDOUT,
                                   env=child_environment(env), start_new_session=own_session,
                                   process_group=None if own_session else 0,
                                   preexec_fn=None if open_files is None else partial(limit_open_files, open_files))
    return RunningHost(f"http://{LOCALHOST}:{port}", port, process, log_path, spawned_at)


def limit_open_files(limits: tuple[int, int]) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def start_host(libraries: Path | str, *arguments: str, cwd: Path | None = None, workers: int | None = 1,
               env: Mapping[str, str] | None = None, log_path: Path | None = None, own_session: bool = False,
               ready_path: str = "/healthz", timeout: float = 30, open_files: tuple[int, int] | None = None) -> RunningHost:
    """Spawn a server (see `spawn_host`) and return once `GET ready_path` answers 200.

    Raises HostFailed, with the log, if it exits or does not answer within `timeout` seconds.
    """
    host = spawn_host(libraries, *arguments, cwd=cwd, workers=workers, env=env, log_path=log_path, own_session=own_session,
                      open_files=open_files)
    host.wait_until_ready(ready_path, timeout=timeout)
    return host
