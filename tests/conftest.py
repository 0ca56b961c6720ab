"""Shared fixtures: real library folders on disk, the app in-process, and a real uvicorn server (host.harness)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from librarian import FIXTURES

# Tests import these from here: `start_host(libraries, *arguments)` runs `serve` on a free port
# and returns once /healthz answers; see host/harness.py for its options.
from host.harness import RunningHost, start_host

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The real Polymath libraries beside the project; tests using them skip when absent."""
    if not FIXTURES.is_dir():
        pytest.skip("../shared/fixtures is not present")
    return FIXTURES


def stop_host(host: RunningHost) -> int | None:
    """SIGTERM, and the exit code (None if it had to be killed after 15 s)."""
    return host.stop()


@pytest.fixture
def run_host() -> Iterator[Callable[..., RunningHost]]:
    """Start real hosts for a test: `host = run_host(libraries_dir, "--access", path)`."""
    started: list[RunningHost] = []

    def run(libraries: Path, *extra: str, **options: Any) -> RunningHost:
        host = start_host(libraries, *extra, **options)
        started.append(host)
        return host

    yield run
    for host in started:
        stop_host(host)
