"""Shared fixtures: real library folders on disk, the app in-process, and a real uvicorn server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from librarian import FIXTURES

PROJECT = Path(__file__).resolve().parents[1]

pytest_plugins = ["browser_support"]  # the browser, tab and open_tab fixtures: real headless Chromium


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The real Polymath libraries beside the project; tests using them skip when absent."""
    if not FIXTURES.is_dir():
        pytest.skip("../shared/fixtures is not present")
    return FIXTURES


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RunningHost:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()


def start_host(libraries: Path, *extra: str, cwd: Path | None = None, timeout: float = 30) -> RunningHost:
    """`python -m host serve` as a real process on a free port, once /readyz answers."""
    port = free_port()
    log_path = (cwd or libraries.parent) / f"host-{port}.log"
    with log_path.open("w") as log_file:  # the child writes through its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "host", "serve", "--libraries", str(libraries), "--port", str(port), *extra],
            cwd=cwd or libraries.parent,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(PROJECT)},
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"host exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return RunningHost(url, process, log_path)
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"host did not start within {timeout} s:\n{log_path.read_text()}")


def stop_host(host: RunningHost) -> int:
    host.process.terminate()
    try:
        return host.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        host.process.kill()
        return host.process.wait()


@pytest.fixture
def run_host() -> Iterator:
    """Start real hosts for a test: `host = run_host(libraries_dir, "--access", path)`."""
    started: list[RunningHost] = []

    def run(libraries: Path, *extra: str, **options) -> RunningHost:
        host = start_host(libraries, *extra, **options)
        started.append(host)
        return host

    yield run
    for host in started:
        stop_host(host)
