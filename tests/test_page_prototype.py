"""host/web/templates and host/web/static in a real browser, under a strict CSP, with the real host behind.

The page is rendered by tests/page_prototype.py (a stand-in for the page module) from real
libraries: the 14-bit Polymath sample in public, the 2-bit library under access/unpublished/, and
a small library of another model whose one bit links `javascript:` and has markup in its title.
POST / and the rest are the real host app. When the page module lands, point `page_url` at it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import PHONE, STRICT_CSP, OpenTab, Tab
from conftest import PROJECT
from librarian import make_bit, make_library, unit_vectors, write_library

jinja2 = pytest.importorskip("jinja2", reason="the page's templates need Jinja2 (a dependency once issue 11 lands)")

from page_prototype import preview_app, serve  # noqa: E402 (needs Jinja2)

PUBLIC_FILE = "polymath-v1-sample-library.json"  # 14 bits
PRIVATE_FILE = "polymath-v1-knowledge-string.json"  # 2 bits, under access/unpublished/
HOSTILE_TITLE = '<img src=x onerror="alert(1)"> Hostile title'


def admin(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "host", *argv], capture_output=True, text=True, timeout=60,
                          cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Iterator[tuple[str, str]]:
    """(page URL, a token granting `unpublished`)."""
    from host.settings import Settings
    from host.web.app import create_app

    root = tmp_path_factory.mktemp("page-prototype")
    libraries = root / "libraries"
    (libraries / "access" / "unpublished").mkdir(parents=True)
    shutil.copy(fixtures_dir / PUBLIC_FILE, libraries / PUBLIC_FILE)
    shutil.copy(fixtures_dir / PRIVATE_FILE, libraries / "access" / "unpublished" / PRIVATE_FILE)
    hostile = make_library(unit_vectors(1), details={"message": "One bit whose link must not be followed."})
    hostile["bits"] = [make_bit(0, unit_vectors(1)[0], info={"url": "javascript:alert(1)", "title": HOSTILE_TITLE})]
    write_library(libraries / "hostile.json", hostile)
    access_file = root / "access.SECRET.json"
    admin("access", "init", "--access", str(access_file))
    token = admin("token", "issue", "alice", "--tag", "unpublished", "--access", str(access_file))
    host_app = create_app(Settings(libraries=libraries, access=access_file, cache_dir=root / "compiled",
                                   watch_interval=0))
    with serve(preview_app(host_app)) as url:
        yield url, token


@pytest.fixture
def page_url(site: tuple[str, str]) -> str:
    return site[0]


@pytest.fixture
def token(site: tuple[str, str]) -> str:
    return site[1]


def test_the_first_visit_shows_libraries_and_a_true_random_sample(tab: Tab, page_url: str) -> None:
    response = tab.page.goto(f"{page_url}/")

    assert response is not None and response.headers["content-security-policy"] == STRICT_CSP
    libraries = tab.page.locator(".libraries li")
    assert libraries.count() == 2  # the private library is not named to a visitor without a token
    sample_library = libraries.filter(has_text="polymath-v1-sample-library")
    assert "14 bits · openai.com:text-embedding-ada-002" in sample_library.inner_text()
    sample = tab.page.locator("section.results-sample").first
    assert sample.locator(".bit").count() == 10
    assert sample.locator(".similarity").count() == 0  # nothing was asked: no similarity to show
    tab.screenshot("desktop")


def test_a_link_that_is_not_http_is_not_a_link_and_markup_is_text(tab: Tab, page_url: str) -> None:
    tab.page.goto(f"{page_url}/")

    hostile = tab.page.locator("section.results[data-model='test:unit-8'] .bit")
    assert hostile.locator(".bit-title").inner_text() == HOSTILE_TITLE
    assert hostile.locator(".bit-title a").count() == 0
    assert tab.page.locator("a[href^='javascript:']").count() == 0
    assert "One bit whose link must not be followed." in tab.page.locator(".libraries").inner_text()


def test_without_javascript_more_like_this_ranks_and_a_text_expands(open_tab: OpenTab, page_url: str) -> None:
    tab = open_tab(java_script_enabled=False)
    tab.page.goto(f"{page_url}/")
    assert tab.page.locator("#token").is_hidden()  # no token field without JavaScript: it would go in the URL
    card = tab.page.locator("section.results-sample[data-model='openai.com:text-embedding-ada-002'] .bit").first
    title = card.locator(".bit-title").inner_text()

    card.get_by_role("link", name="More like this").click()

    tab.page.wait_for_url("**/?like=*")
    first = tab.page.locator("section.results-ranked .bit").first
    assert first.locator(".bit-title").inner_text() == title
    assert first.locator(".similarity").inner_text() == "1.000"
    similarities = [float(text) for text in tab.page.locator("section.results-ranked .similarity").all_inner_texts()]
    assert similarities == sorted(similarities, reverse=True) and len(similarities) == 10
    long_text = tab.page.locator("section.results-ranked details.bit-text").first
    full = long_text.locator(".full")
    assert not full.is_visible()
    long_text.locator("summary").click()
    assert full.is_visible() and len(full.inner_text()) > 320
    tab.screenshot("more-like-this")


def test_an_unknown_like_id_says_so_instead_of_falling_back_silently(tab: Tab, page_url: str) -> None:
    tab.page.goto(f"{page_url}/?like={'ab' * 32}")

    assert "No public bit has the id abab" in tab.page.locator(".notice-warning").inner_text()


def test_a_token_shows_the_private_bits_it_grants_and_is_sent_only_as_a_bearer_header(
        tab: Tab, page_url: str, token: str) -> None:
    tab.page.goto(f"{page_url}/?count=16&count_type=bit")
    tab.page.locator("section.results-sample .bit").first.get_by_role("link", name="More like this").click()
    tab.page.wait_for_url("**/?like=*")
    assert tab.page.locator("section.results-ranked .bit").count() == 14
    assert tab.page.locator(".bit-private").count() == 0
    posts = []
    tab.page.on("request", lambda request: posts.append(request) if request.method == "POST" else None)

    tab.page.get_by_text("Have an access token?").click()
    tab.page.locator("#token-input").fill(token)
    tab.page.get_by_role("button", name="Use").click()

    tab.page.locator(".notice-info", has_text="Your token adds 2 private bits").wait_for()
    cards = tab.page.locator("section.results-ranked .bit")
    assert cards.count() == 16
    assert tab.page.locator("section.results-ranked .bit-private .tag").all_inner_texts() == ["private", "private"]
    assert tab.page.evaluate("sessionStorage.getItem('polymath-host.token')") == token
    [post] = posts
    assert post.headers["authorization"] == f"Bearer {token}" and token not in post.url
    assert token not in tab.page.url
    similarities = [float(text) for text in cards.locator(".similarity").all_inner_texts()]
    assert similarities == sorted(similarities, reverse=True)
    tab.screenshot("with-token")

    tab.page.reload()  # the token stays for the tab: the private bits come back by themselves
    tab.page.locator(".notice-info", has_text="Your token adds 2 private bits").wait_for()
    tab.page.get_by_role("button", name="Forget it").click()
    tab.page.wait_for_load_state()
    assert tab.page.evaluate("sessionStorage.getItem('polymath-host.token')") is None
    assert tab.page.locator(".bit-private").count() == 0


def test_a_refused_token_is_forgotten_and_said_so(tab: Tab, page_url: str, token: str) -> None:
    tab.page.goto(f"{page_url}/")
    tab.page.locator("section.results-sample .bit").first.get_by_role("link", name="More like this").click()
    tab.page.wait_for_url("**/?like=*")

    tab.page.get_by_text("Have an access token?").click()
    tab.page.locator("#token-input").fill(token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"))
    tab.page.get_by_role("button", name="Use").click()

    tab.page.locator(".notice-error", has_text="The host refused the token").wait_for()
    assert tab.page.evaluate("sessionStorage.getItem('polymath-host.token')") is None
    problems = tab.take_problems()  # Chromium logs the 401 itself
    assert [p.kind for p in problems] == ["console"] and "401" in problems[0].text, problems


def test_the_page_fits_a_phone_and_keeps_to_its_strict_csp(open_tab: OpenTab, page_url: str) -> None:
    tab = open_tab(viewport=PHONE, is_mobile=True, has_touch=True)
    tab.page.goto(f"{page_url}/")
    tab.screenshot("phone", full_page=False)  # what a person sees first
    tab.page.locator("section.results-sample details.bit-text summary").first.click()

    assert tab.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert tab.page.locator("#token").is_visible()
    font_size = tab.page.locator(".bit .full").first.evaluate("node => parseFloat(getComputedStyle(node).fontSize)")
    assert font_size >= 16  # readable without zooming
