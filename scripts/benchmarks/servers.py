"""A real `python -m host serve` for the server steps, and POST / against it."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

import numpy as np

from host.harness import child_environment

from .config import COUNT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def query_body(query: np.ndarray, **extra: Any) -> bytes:
    encoded = base64.b64encode(np.asarray(query, dtype="<f4").tobytes()).decode()
    return json.dumps({"query_embedding": encoded, "count": COUNT, "count_type": "token", **extra}).encode()


def post(port: int, body: bytes, accept: str = "application/json", timeout: float = 120) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/", body, {"Content-Type": "application/json", "Accept": accept})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class Server:
    """`python -m host serve` in its own process group, on 127.0.0.1 only."""

    def __init__(self, workdir: Path, libraries: Path, *, workers: int = 1, search: str | None = None,
                 environment: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.started = time.perf_counter()
        command = [sys.executable, "-m", "host", "serve", "--libraries", str(libraries), "--host", "127.0.0.1",
                   "--port", str(self.port), "--workers", str(workers), "--log-level", "warning"]
        if search:
            command += ["--search", search]
        self.log_path = workdir / f"server-{self.port}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        # cwd=workdir: no access.SECRET.json from the project folder is picked up.
        self.process = subprocess.Popen(command, cwd=workdir, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=child_environment(environment), start_new_session=True)

    def first_answer(self, body: bytes, timeout: float) -> float:
        """Seconds from the spawn to the first 200 answer to POST /."""
        deadline = self.started + timeout
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                status, answer = post(self.port, body, timeout=max(1.0, deadline - time.perf_counter()))
            except (ConnectionError, OSError):
                time.sleep(0.02)
                continue
            if status != 200:
                raise RuntimeError(f"server answered {status}: {answer[:300]!r}")
            return time.perf_counter() - self.started
        raise RuntimeError(f"no answer within {timeout} s; log: {self.log_path}")

    def loaded_line(self) -> str:
        return next((line for line in self.log_path.read_text().splitlines() if line.startswith("loaded ")), "")

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
        self.log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *problem: object) -> None:
        self.stop()
