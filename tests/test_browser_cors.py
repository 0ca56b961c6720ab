"""The REAL @polymath-ai/client 2.0.3 in a real browser, on a page served from another origin.

tests/browser_client/ pins the package (the same locked versions as tests/js_client) plus esbuild
and the `buffer` polyfill. At test time esbuild bundles the package's PolymathEndpoint for the
browser (polymath-client.mjs says why not its Node entry), and a small static server on another
port serves cross-origin.html, whose script asks a real host process and writes what it got into
the DOM. The right answer is the brute-force ranking of the fixture library.

The host allows any origin by default (`--cors-origin`, host/web/middleware/cors.py); preflights
are answered by the real host (Playwright would answer them itself for a routed request, so
nothing here is routed). A host that allows only other origins is refused by the browser.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from browser_support import Tab, serve_static
from components import unavailable
from conftest import PROJECT, RunningHost, start_host, stop_host

HARNESS = PROJECT / "tests" / "browser_client"
SAMPLE_LIBRARY = "polymath-v1-sample-library.json"  # 14 public bits, 1536-d (the client insists on 1536)
COUNT = 5


# ---- the app on another origin --------------------------------------------------------------


@pytest.fixture(scope="session")
def client_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with cross-origin.html, its script and the esbuild bundle of the real client."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm (Node >= 18) are needed to bundle the real @polymath-ai/client")
    assert node is not None and npm is not None
    if not (HARNESS / "node_modules" / "esbuild").is_dir():
        installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HARNESS, capture_output=True,
                                   text=True, timeout=600)
        if installed.returncode != 0:
            unavailable(f"npm ci failed in {HARNESS}:\n{installed.stdout}\n{installed.stderr}")
    site = tmp_path_factory.mktemp("other-origin")
    bundled = subprocess.run([node, str(HARNESS / "bundle.mjs"), str(site / "polymath-client.js")],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert bundled.returncode == 0, f"esbuild failed:\n{bundled.stdout}\n{bundled.stderr}"
    for name in ("cross-origin.html", "cross-origin.js"):
        shutil.copy(HARNESS / name, site / name)
    return site


@dataclass(frozen=True)
class Library:
    ids: list[str]
    vectors: np.ndarray  # float32, one row per bit, in file order

    def ranking(self, query: np.ndarray) -> list[str]:
        scores = self.vectors.astype(np.float64) @ query.astype(np.float64)
        return [self.ids[row] for row in np.argsort(-scores, kind="stable")]


@pytest.fixture(scope="module")
def library(fixtures_dir: Path) -> Library:
    bits = json.loads((fixtures_dir / SAMPLE_LIBRARY).read_text())["bits"]
    ids = [hashlib.sha256(f"{bit['info']['url'].strip()}\n{bit['text'].strip()}".encode()).hexdigest()
           for bit in bits]
    vectors = np.stack([np.frombuffer(base64.b64decode(bit["embedding"]), dtype="<f4") for bit in bits])
    return Library(ids, vectors)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Iterator[RunningHost]:
    libraries = tmp_path_factory.mktemp("cors") / "libraries"
    libraries.mkdir()
    shutil.copy(fixtures_dir / SAMPLE_LIBRARY, libraries / SAMPLE_LIBRARY)
    running = start_host(libraries)
    yield running
    stop_host(running)


@dataclass(frozen=True)
class Outcome:
    state: str  # "answered" or "failed"
    error: str
    bits: list[dict[str, Any]]


@pytest.fixture
def other_origin(client_bundle: Path, host: RunningHost, library: Library, tmp_path: Path) -> Iterator[str]:
    """The app's origin, serving the page with a CSP an app would have: its own scripts, fetches to the host."""
    site = tmp_path / "site"
    shutil.copytree(client_bundle, site)
    (site / "query.json").write_text(json.dumps(library.vectors[4].tolist()))
    policy = f"default-src 'self'; img-src 'self' data:; connect-src 'self' {host.url}"
    with serve_static(site, {"Content-Security-Policy": policy}) as origin:
        yield origin


def ask_from_other_origin(tab: Tab, origin: str, host: RunningHost, mode: str) -> Outcome:
    assert origin != host.url
    tab.page.goto(f"{origin}/cross-origin.html?host={host.url}/&mode={mode}&count={COUNT}")
    tab.page.locator("#state", has_text="ed").wait_for()  # "answered" or "failed"
    bits = [{"id": item.get_attribute("data-id"), "similarity": float(item.get_attribute("data-similarity") or "nan")}
            for item in tab.page.locator("#bits li").all()]
    return Outcome(tab.page.locator("#state").inner_text(), tab.page.locator("#error").inner_text(), bits)


def assert_brute_force_answer(outcome: Outcome, library: Library, tab: Tab, mode: str) -> None:
    problems = [str(problem) for problem in tab.take_problems()]
    assert outcome.state == "answered", f"{outcome.error}\nbrowser problems: {problems}"
    # Discovery starts with a POST to /libraries, whose 405 Chromium logs as an error: that one is expected.
    expected = [p for p in problems if mode == "discover" and "status of 405" in p and p.endswith("/libraries)")]
    assert problems == expected and len(expected) == (mode == "discover"), problems
    assert [bit["id"] for bit in outcome.bits] == library.ranking(library.vectors[4])[:COUNT]
    assert outcome.bits[0]["similarity"] == pytest.approx(1.0, abs=1e-5)


# ---- the tests --------------------------------------------------------------------------------


def test_the_real_js_client_asks_the_host_from_a_page_on_another_origin(
        tab: Tab, other_origin: str, host: RunningHost, library: Library) -> None:
    outcome = ask_from_other_origin(tab, other_origin, host, "client")

    tab.screenshot()
    assert_brute_force_answer(outcome, library, tab, "client")


def test_a_preflighted_json_query_with_a_bearer_token_works_from_another_origin(
        tab: Tab, other_origin: str, host: RunningHost, library: Library) -> None:
    # Access-Control-Allow-Headers must name Authorization: its "*" does not cover it.
    outcome = ask_from_other_origin(tab, other_origin, host, "preflight")

    assert_brute_force_answer(outcome, library, tab, "preflight")


def test_the_real_js_client_finds_the_endpoint_through_the_link_header_from_another_origin(
        tab: Tab, other_origin: str, host: RunningHost, library: Library) -> None:
    # POST /libraries is a 405 that must still carry CORS headers; then GET /libraries must expose
    # its Link header (Access-Control-Expose-Headers: Link) for the client's discovery to read it.
    outcome = ask_from_other_origin(tab, other_origin, host, "discover")

    assert_brute_force_answer(outcome, library, tab, "discover")


@pytest.fixture(scope="module")
def picky_host(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Iterator[RunningHost]:
    """The same library, on a host that allows pages of one other origin only."""
    libraries = tmp_path_factory.mktemp("picky") / "libraries"
    libraries.mkdir()
    shutil.copy(fixtures_dir / SAMPLE_LIBRARY, libraries / SAMPLE_LIBRARY)
    running = start_host(libraries, "--cors-origin", "https://only-this.example")
    yield running
    stop_host(running)


@pytest.mark.parametrize("mode", ["client", "preflight"])
def test_a_host_that_allows_other_origins_only_is_refused_by_the_browser(
        tab: Tab, client_bundle: Path, picky_host: RunningHost, library: Library, tmp_path: Path, mode: str) -> None:
    site = tmp_path / "site"
    shutil.copytree(client_bundle, site)
    (site / "query.json").write_text(json.dumps(library.vectors[4].tolist()))
    policy = f"default-src 'self'; img-src 'self' data:; connect-src 'self' {picky_host.url}"
    with serve_static(site, {"Content-Security-Policy": policy}) as origin:
        outcome = ask_from_other_origin(tab, origin, picky_host, mode)

    problems = tab.take_problems()
    assert outcome.state == "failed" and outcome.error == "TypeError: Failed to fetch"
    assert any("blocked by CORS policy" in problem.text for problem in problems), problems
