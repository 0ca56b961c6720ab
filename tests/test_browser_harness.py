"""The browser harness itself, then the host's current `GET /` page in a real headless Chromium.

The first tests prove the harness sees what it must (a test of problems that could never fail
would be worth nothing); the page tests are the start of issue 11's browser tests.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browser_support import PHONE, STRICT_CSP, OpenTab, Tab, serve_static
from conftest import RunningHost, start_host, stop_host

if TYPE_CHECKING:
    from playwright.sync_api import Route

SAMPLE_LIBRARY = "polymath-v1-sample-library.json"  # 14 public bits, openai.com:text-embedding-ada-002


# ---- the harness ------------------------------------------------------------------------------


def write_page(folder: Path) -> None:
    """A page that breaks a strict CSP twice (inline style, inline script) and throws from its own script."""
    (folder / "index.html").write_text(
        '<!doctype html><html><head><meta charset="utf-8"><title>broken</title>'
        "<style>body { color: red }</style><script>document.title = 'inline ran'</script></head>"
        '<body><p>broken on purpose</p><script src="/throws.js"></script></body></html>'
    )
    (folder / "throws.js").write_text('document.body.dataset.loaded = "yes";\nthrow new Error("thrown on purpose");\n')


def test_the_harness_records_csp_violations_and_script_errors(tab: Tab, tmp_path: Path) -> None:
    write_page(tmp_path)
    with serve_static(tmp_path, {"Content-Security-Policy": STRICT_CSP}) as origin:
        tab.page.goto(f"{origin}/index.html")
        tab.page.locator("body[data-loaded=yes]").wait_for(state="attached")  # no eval: the CSP forbids it

    problems = tab.take_problems()

    events = [problem.text for problem in problems if problem.text.startswith("securitypolicyviolation")]
    assert any('"directive": "style-src-elem"' in text and '"blocked": "inline"' in text for text in events), problems
    assert any('"directive": "script-src-elem"' in text and '"blocked": "inline"' in text for text in events), problems
    assert any(p.kind == "csp" and "inline style" in p.text and not p.text.startswith("securitypolicyviolation")
               for p in problems), problems
    assert any(p.kind == "pageerror" and "thrown on purpose" in p.text for p in problems), problems
    assert tab.page.title() == "broken"  # the inline script was really blocked


def test_without_javascript_the_harness_still_sees_a_refused_inline_style(open_tab: OpenTab, tmp_path: Path) -> None:
    tab = open_tab(java_script_enabled=False)
    write_page(tmp_path)
    with serve_static(tmp_path, {"Content-Security-Policy": STRICT_CSP}) as origin:
        tab.page.goto(f"{origin}/index.html")

    problems = tab.take_problems()

    assert [p.kind for p in problems if "inline style" in p.text] == ["csp"], problems  # the console line only


def test_a_page_without_problems_passes_and_leaves_a_screenshot(tab: Tab, tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text('<!doctype html><html><head><meta charset="utf-8"><title>calm</title>'
                                         '<link rel="stylesheet" href="/calm.css"></head>'
                                         "<body><p>calm</p></body></html>")
    (tmp_path / "calm.css").write_text("body { font-family: sans-serif; margin: 3rem; }\n")
    with serve_static(tmp_path, {"Content-Security-Policy": STRICT_CSP}) as origin:
        tab.page.goto(f"{origin}/index.html")
        path = tab.screenshot()

    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and path.stat().st_size > 1000
    assert tab.problems == []


# ---- the host's page under the harness (the page's own tests: tests/test_browser_page.py) -----------------


@pytest.fixture(scope="module")
def sample_host(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Iterator[RunningHost]:
    libraries = tmp_path_factory.mktemp("page") / "libraries"
    libraries.mkdir()
    shutil.copy(fixtures_dir / SAMPLE_LIBRARY, libraries / SAMPLE_LIBRARY)
    host = start_host(libraries)
    yield host
    stop_host(host)


def test_the_home_page_fits_a_phone_screen(open_tab: OpenTab, sample_host: RunningHost) -> None:
    tab = open_tab(viewport=PHONE, is_mobile=True, has_touch=True)
    tab.page.goto(f"{sample_host.url}/")

    scroll_width = tab.page.evaluate("document.documentElement.scrollWidth")
    tab.screenshot("phone")
    assert scroll_width <= PHONE["width"]


def test_the_home_page_breaks_no_rule_of_the_strict_csp_the_harness_knows(tab: Tab, sample_host: RunningHost) -> None:
    """The host sends its own policy; the harness's STRICT_CSP, routed in, must hold as well."""
    def with_strict_csp(route: Route) -> None:
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-security-policy": STRICT_CSP})

    tab.page.route(f"{sample_host.url}/**", with_strict_csp)
    tab.page.goto(f"{sample_host.url}/")
    tab.page.locator("section.results-sample details.bit-text summary").first.click()

    assert tab.take_problems() == []
