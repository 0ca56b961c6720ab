"""Shared fixtures: real library folders on disk, the app in-process, and a real uvicorn server (host.service.harness)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from librarian import FIXTURES

from host.service import harness
from host.service.harness import RunningHost

PROJECT = Path(__file__).resolve().parents[1]

pytest_plugins = ["browser_support"]  # the browser, tab and open_tab fixtures: real headless Chromium


# Files whose tests take longest in all (half a minute to a minute: schemathesis, end-to-end
# replicas, hostile clients), longest first. The two xdist workers take whole files in collection
# order (`--no-loadscope-reorder`: xdist would put the files of most tests first, and these, of few
# long tests, last and alone while the other worker idles), so they start first, beside the short ones.
LONG_FILES = ("test_schemathesis.py", "test_hostile.py", "test_replicas_s3_e2e.py", "test_embedders_local.py",
              "test_replicas_trust_e2e.py", "test_replicas_web_e2e.py", "test_browser_page.py", "test_hot_reload.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The real Polymath libraries beside the project; tests using them skip when absent."""
    if not FIXTURES.is_dir():
        pytest.skip("../shared/fixtures is not present")
    return FIXTURES


def start_host(libraries: Path | str, *arguments: str, embedder: bool = False, **options: Any) -> RunningHost:
    """`serve` on a free port, once /healthz answers (host/service/harness.py has the options).

    Without the local embedder unless `embedder` (or an --embedder option) asks for it: loading its
    model costs every server a second of CPU, and most tests send vectors.
    """
    if not embedder and not any(argument.startswith("--embedder") for argument in arguments):
        arguments = (*arguments, "--embedder", "none")
    return harness.start_host(libraries, *arguments, **options)


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
