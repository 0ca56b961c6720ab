"""Real-browser tests: Debian's headless Chromium driven by Playwright for Python, and what a page did wrong.

tests/conftest.py loads it as a plugin (`pytest_plugins = ["browser_support"]`); it gives:

- `browser`: one headless Chromium per test module (see the fixture for why not per session):
  `/usr/bin/chromium` (or `$POLYMATH_CHROMIUM`) launched through Playwright's `executable_path`,
  so Playwright never downloads a browser. Missing Chromium or Playwright skips the test on a
  laptop and fails it when `CI` is set.
- `tab`: a fresh browser context and page. Every console error, uncaught page error and Content
  Security Policy violation (the `securitypolicyviolation` event, and Chromium's console lines
  about the policy, "Refused to ..." or "... violates the following Content Security Policy
  directive ...", which come even when JavaScript is off) is recorded in `tab.problems`; at
  teardown a test that passed must have left none. A test that expects a problem takes it with
  `tab.take_problems()` and asserts on it.
- `open_tab(...)`: more tabs with other context options (`java_script_enabled=False`, a phone's
  `viewport=PHONE`, ...), checked the same way.
- `tab.screenshot(label)`: a full-page PNG at `test-artifacts/screenshots/<test>[-label].png`
  (or under `$POLYMATH_TEST_ARTIFACTS`), its path printed and kept in the test's user properties.
- `serve_static(folder, headers)`: a small static HTTP server on another port, to be a second
  origin in cross-origin tests.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest
from components import unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page

PROJECT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("POLYMATH_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("POLYMATH_TEST_ARTIFACTS", PROJECT / "test-artifacts"))

# Playwright already passes --headless, --no-sandbox (it is root in a container here), a fresh
# --user-data-dir and most of these; they are named so the launch does not depend on its defaults.
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# What the page must live with (issue 11); tests add it to responses that do not carry it yet.
STRICT_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
              "form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'")
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
TIMEOUT_MS = 10_000  # a page of this host answers in milliseconds: wait seconds, not Playwright's 30 s

CSP_CONSOLE = re.compile(r"^Refused to |Content Security Policy")

# Runs in every document before the page's own scripts (Playwright injects it: no CSP applies).
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.__polymathCspViolation(JSON.stringify({
    directive: event.effectiveDirective, blocked: event.blockedURI, disposition: event.disposition,
    source: event.sourceFile, line: event.lineNumber, sample: event.sample,
  }));
}, true);
"""


# ---- what went wrong on a page --------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    kind: Literal["console", "pageerror", "csp"]
    text: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"


@dataclass
class Tab:
    """One page in its own browser context, with what went wrong on it."""

    page: Page
    context: BrowserContext
    test_name: str
    problems: list[Problem] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)

    def take_problems(self) -> list[Problem]:
        """The problems so far, which the test now owns (teardown no longer sees them)."""
        taken, self.problems = self.problems, []
        return taken

    def csp_violations(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.kind == "csp"]

    def screenshot(self, label: str = "", *, full_page: bool = True) -> Path:
        name = self.test_name + (f"-{_file_safe(label)}" if label else "")
        path = ARTIFACTS / "screenshots" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=full_page)
        self.screenshots.append(path)
        print(f"screenshot: {path}")
        return path

    def _on_console(self, message: ConsoleMessage) -> None:
        where = message.location.get("url", "")
        if message.type != "error" or where.endswith("/favicon.ico"):
            return  # Chromium asks for /favicon.ico by itself when a page names no icon: not the page's doing
        text = message.text
        # Chromium up to about 120 said "Refused to apply inline style ..."; 156 says "Applying inline
        # style violates the following Content Security Policy directive ...".
        kind: Literal["console", "csp"] = "csp" if CSP_CONSOLE.search(text) else "console"
        self.problems.append(Problem(kind, f"{text} ({where})" if where else text))

    def _on_page_error(self, error: Exception) -> None:
        self.problems.append(Problem("pageerror", str(error)))

    def _on_csp_violation(self, _source: Any, report: str) -> None:
        facts = json.loads(report)
        self.problems.append(Problem("csp", "securitypolicyviolation " + json.dumps(facts, sort_keys=True)))


def _file_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:150]


def _test_name(item: pytest.Item) -> str:
    """`tests/test_page.py::test_search[phone]` -> `test_page--test_search-phone`."""
    module = Path(item.nodeid.split("::")[0]).stem
    return _file_safe(f"{module}--{item.name}")


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Module, not session: while Playwright's sync API is open, its event loop counts as running in
    # this thread, and every asyncio test after it would fail ("Cannot run the event loop while
    # another loop is running"). A launch costs about a second.
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed: pip install playwright (never `playwright install`)")
    if shutil.which(CHROMIUM) is None:
        unavailable(f"no Chromium at {CHROMIUM}: apt-get install -y chromium chromium-driver")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_FLAGS),
                                                  timeout=60_000)
        except PlaywrightError as error:
            pytest.fail(f"Chromium at {CHROMIUM} did not start: {error}")
        yield launched
        launched.close()


OpenTab = Callable[..., Tab]


@pytest.fixture
def open_tab(browser: Browser, request: pytest.FixtureRequest) -> Iterator[OpenTab]:
    """`open_tab(**context_options)`: a new tab; every one is checked for problems at teardown."""
    tabs: list[Tab] = []

    def open_one(**options: Any) -> Tab:
        options.setdefault("viewport", DESKTOP)
        context = browser.new_context(**options)
        context.set_default_timeout(TIMEOUT_MS)
        name = _test_name(request.node) + (f"-tab{len(tabs) + 1}" if tabs else "")
        tab = Tab(context.new_page(), context, name)
        context.expose_binding("__polymathCspViolation", tab._on_csp_violation)
        context.add_init_script(REPORT_CSP_VIOLATIONS)
        tab.page.on("console", tab._on_console)
        tab.page.on("pageerror", tab._on_page_error)
        tabs.append(tab)
        return tab

    yield open_one

    body_failed = request.node.stash.get(BODY_FAILED, False)
    left: list[str] = []
    for tab in tabs:
        if tab.problems and not body_failed:
            left += [str(problem) for problem in tab.problems]
            tab.screenshot("problems")
        tab.context.close()
    for tab in tabs:
        request.node.user_properties += [("screenshot", str(path)) for path in tab.screenshots]
    if left:
        pytest.fail("the page had problems nobody expected:\n  " + "\n  ".join(left))


@pytest.fixture
def tab(open_tab: OpenTab) -> Tab:
    return open_tab()


# The teardown check is for tests that passed: a failed (or xfailed) body has already said what broke.
BODY_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if call.when == "call":
        item.stash[BODY_FAILED] = call.excinfo is not None
    return report


# ---- a second origin -------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extra_headers: Mapping[str, str] = {}

    def end_headers(self) -> None:
        for name, value in self.extra_headers.items():
            self.send_header(name, value)
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test says what it fetched; a line per request is noise


@contextlib.contextmanager
def serve_static(folder: Path, headers: Mapping[str, str] | None = None) -> Iterator[str]:
    """Serve `folder` at http://127.0.0.1:<free port> (yielded) until the block ends."""
    handler = type("Handler", (_QuietHandler,), {"extra_headers": dict(headers or {})})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, name=f"static {folder.name}", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
