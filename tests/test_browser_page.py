"""The page people use, in a real headless Chromium (SPEC §9, issue 11).

A real `polymath-host serve` process serves a copy of the project's `libraries/` (the 386-bit King
James sample, searchable in words by the local MiniLM embedder, and 11 drafts under
`access/unpublished/`), with an access file and tokens made by the admin CLI. Every test fails on
any console error, page error or Content-Security-Policy violation (tests/browser_support.py) and
leaves screenshots in test-artifacts/screenshots/.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from browser_support import PHONE, OpenTab, Tab
from components import admin, unavailable
from conftest import PROJECT, RunningHost, start_host, stop_host

from access import AccessControl
from access.tokens import issue_token
from host.embedders import minilm
from host.web.middleware.security_headers import CONTENT_SECURITY_POLICY

JONAH = "a great fish swallowed the prophet"
LIONS = "Daniel in the den of lions"  # Daniel 6 is only in the private drafts
TOKEN_KEY = "polymath-host.token"


@dataclass(frozen=True)
class Site:
    host: RunningHost
    access: Path
    token: str  # grants `unpublished`

    @property
    def url(self) -> str:
        return self.host.url


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    problem = minilm.missing_requirement()  # text search needs the `embed` extra
    if problem is not None:
        unavailable(problem)
    root = tmp_path_factory.mktemp("page")
    libraries = root / "libraries"
    shutil.copytree(PROJECT / "libraries", libraries, ignore=shutil.ignore_patterns(".compiled"))
    access = root / "access.SECRET.json"
    admin("access", "init", "--access", str(access))
    token = admin("token", "issue", "alice@example.com", "--tag", "unpublished", "--access", str(access))
    host = start_host(libraries, "--access", str(access), embedder=True)
    yield Site(host, access, token)
    stop_host(host)


def search(tab: Tab, words: str) -> None:
    tab.page.get_by_label("Search the libraries").fill(words)
    tab.page.get_by_role("button", name="Search").click()
    tab.page.wait_for_url("**/?q=*")


def titles(tab: Tab, scope: str = "section.results") -> list[str]:
    return tab.page.locator(f"{scope} .bit .bit-title").all_inner_texts()


def similarities(tab: Tab) -> list[float]:
    return [float(text) for text in tab.page.locator("section.results-ranked .similarity").all_inner_texts()]


def scores(tab: Tab) -> list[float]:
    """The rank scores of a search ranked by keywords or by both (a search by meaning shows none)."""
    return [float(text) for text in tab.page.locator("section.results-ranked .score").all_inner_texts()]


def use_token(tab: Tab, token: str) -> None:
    tab.page.get_by_text("Have an access token?").click()
    tab.page.get_by_role("textbox", name="Access token").fill(token)
    tab.page.get_by_role("button", name="Use").click()


# ---- a first visit -----------------------------------------------------------------------------------------


def test_a_first_visit_shows_the_library_its_description_and_a_random_sample(tab: Tab, site: Site) -> None:
    response = tab.page.goto(f"{site.url}/")

    assert response is not None and response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    library = tab.page.locator(".libraries li")
    assert library.count() == 1  # the drafts are not named to a visitor without a token
    assert "386 bits · sentence-transformers:all-MiniLM-L6-v2" in library.inner_text()
    assert "King James Version of the Bible" in library.locator(".library-description").inner_text()
    sample = tab.page.locator("section.results-sample")
    assert sample.locator(".bit").count() == 10 and sample.locator(".similarity").count() == 0
    assert tab.page.locator("#token").is_visible()
    tab.screenshot("desktop")
    before = titles(tab)

    tab.page.get_by_role("link", name="Another sample").click()

    tab.page.locator("section.results-sample .bit").first.wait_for()
    assert titles(tab) != before  # ten of 386 in order: the same twice would be a broken sampler


# ---- the Done-when test: search in words, then more like this ------------------------------------------------


def test_a_visitor_searches_the_sample_in_words_and_follows_more_like_this(tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/")

    search(tab, JONAH)

    found = titles(tab)
    assert found[0].startswith("Jonah "), found
    assert tab.page.locator("section.results-ranked h2").inner_text().startswith("Search results")
    assert scores(tab) == sorted(scores(tab), reverse=True) and len(scores(tab)) == len(found) == 10
    assert len(similarities(tab)) == 10  # beside each score: ranked by meaning and keywords (the default)
    assert tab.page.get_by_label("Search the libraries").input_value() == JONAH
    tab.screenshot("search")
    second = tab.page.locator("section.results-ranked .bit").nth(1)
    title = second.locator(".bit-title").inner_text()

    second.get_by_role("link", name="More like this").click()

    tab.page.wait_for_url("**/?like=*")
    assert tab.page.locator("section.results-ranked h2").inner_text().startswith(f"More like “{title}”")
    assert titles(tab)[0] == title
    assert tab.page.locator("section.results-ranked .similarity").first.inner_text() == "1.000"
    assert similarities(tab) == sorted(similarities(tab), reverse=True)
    tab.screenshot("more-like-this")


def test_more_results_keeps_what_was_shown_and_jumps_to_the_first_new_bit(tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/?count=5")
    search(tab, JONAH)
    first_five = titles(tab)
    assert len(first_five) == 5

    tab.page.get_by_role("link", name="More results").click()

    tab.page.wait_for_url("**/?q=*#bit-1-6")
    assert titles(tab)[:5] == first_five and len(titles(tab)) == 10
    assert tab.page.locator("#bit-1-6").is_visible()
    assert tab.page.evaluate("window.scrollY") > 0  # the page opened at the first new bit
    assert tab.page.get_by_label("up to").input_value() == "10"
    tab.screenshot("more-results", full_page=False)


def test_the_mode_control_ranks_by_keywords_meaning_or_both(tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/")
    mode = tab.page.get_by_label("how a search is ranked")
    assert mode.input_value() == "hybrid"  # meaning and keywords, unless asked otherwise

    mode.select_option("keyword")
    search(tab, "Methuselah")

    assert "mode=keyword" in tab.page.url and mode.input_value() == "keyword"
    found = titles(tab)
    assert [title[:10] for title in found] == ["Genesis 5:"] * 2  # only the passages holding the name
    assert len(scores(tab)) == 2 and similarities(tab) == [] and scores(tab) == sorted(scores(tab), reverse=True)
    tab.screenshot("keyword-search")

    mode.select_option("vector")
    search(tab, "Methuselah")
    assert not any(title.startswith("Genesis 5:") for title in titles(tab)[:3])  # meaning blurs a rare name
    assert scores(tab) == [] and similarities(tab) == sorted(similarities(tab), reverse=True)

    mode.select_option("hybrid")
    search(tab, "the son of Amittai")
    assert titles(tab)[0].startswith("Jonah 1:") and "mode=hybrid" in tab.page.url
    tab.page.locator("section.results-ranked .bit").first.get_by_role("link", name="More like this").click()
    tab.page.wait_for_url("**/?like=*")
    assert scores(tab) == [] and similarities(tab)[0] == 1.0  # more like this: by meaning, always

    tab.page.goto(f"{site.url}/?q=of+the&mode=keyword")
    assert "The query has no keyword (only stop words or punctuation): nothing matches it." in \
        tab.page.locator("#notices").inner_text()


def test_a_budget_in_tokens_takes_bits_while_they_fit(tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/")
    tab.page.get_by_label("up to").fill("700")
    tab.page.get_by_label("counted in").select_option("token")
    search(tab, JONAH)

    counts = [int(text.split()[0]) for text in tab.page.locator("section.results-ranked .tokens").all_inner_texts()]
    assert len(counts) >= 2 and sum(counts) <= 700
    assert "count_type=token" in tab.page.url


def test_a_long_text_expands_and_collapses(tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/?q=love+is+patient")
    text = tab.page.locator("section.results-ranked details.bit-text").first
    full = text.locator(".full")
    assert not full.is_visible() and text.locator(".snippet").inner_text().endswith("…")

    text.get_by_text("Show the whole text").click()

    assert full.is_visible() and len(full.inner_text()) > 320
    tab.screenshot("expanded", full_page=False)
    text.get_by_text("Show less").click()
    assert not full.is_visible()


def test_without_javascript_search_a_sample_and_more_like_this_work(open_tab: OpenTab, site: Site) -> None:
    tab = open_tab(java_script_enabled=False)
    tab.page.goto(f"{site.url}/")
    assert tab.page.locator("#token").is_hidden()  # no token field without JavaScript: it would go in the URL

    search(tab, JONAH)
    assert titles(tab)[0].startswith("Jonah ")
    tab.page.locator("section.results-ranked .bit").first.get_by_role("link", name="More like this").click()
    tab.page.wait_for_url("**/?like=*")
    assert tab.page.locator("section.results-ranked .similarity").first.inner_text() == "1.000"
    tab.page.locator("section.results-ranked details.bit-text summary").first.click()
    assert tab.page.locator("section.results-ranked details.bit-text .full").first.is_visible()
    tab.page.goto(f"{site.url}/")
    assert tab.page.locator("section.results-sample .bit").count() == 10
    tab.screenshot("no-javascript")


# ---- a library's page and its map ------------------------------------------------------------------------


def test_a_librarys_map_shows_every_bit_and_a_point_leads_to_the_bits_most_like_it(tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/")
    tab.page.get_by_role("link", name="Map and sample").click()
    tab.page.wait_for_url("**/?library=sample")
    assert tab.page.locator("h1").inner_text() == "sample"
    points = tab.page.locator("svg.map a")
    assert points.count() == 386
    tab.screenshot("library")
    last = points.last  # drawn last, so on top of any point it overlaps: a click lands on it
    title = last.locator("title").text_content()

    last.click()

    tab.page.wait_for_url("**/?like=*&library=sample")
    assert titles(tab)[0] == title
    assert tab.page.locator("section.results-ranked .similarity").first.inner_text() == "1.000"


# ---- the token ---------------------------------------------------------------------------------------------


def test_a_token_shows_the_private_bits_it_grants_marked_and_is_sent_only_as_a_bearer_header(
        tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/")
    search(tab, LIONS)
    assert not any(title.startswith("Daniel 6:") for title in titles(tab))
    sent = []
    tab.page.on("request", lambda request: sent.append(request) if request.url.startswith(site.url) else None)

    use_token(tab, site.token)

    tab.page.locator(".bit-private").first.wait_for()
    private = tab.page.locator("section.results-ranked .bit-private")
    assert private.count() == 6 and private.first.locator(".bit-title").inner_text().startswith("Daniel 6:")
    assert set(private.locator(".tag").all_inner_texts()) == {"unpublished"}
    assert "Your token (alice@example.com) shows private bits tagged: unpublished." in \
        tab.page.locator("#notices").inner_text()
    assert scores(tab) == sorted(scores(tab), reverse=True)
    assert tab.page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") == site.token
    asked = [request for request in sent if request.resource_type == "fetch"]
    assert asked and all(request.headers["authorization"] == f"Bearer {site.token}" for request in asked)
    assert all(site.token not in request.url for request in sent) and site.token not in tab.page.url
    tab.screenshot("with-token")

    # "More like this" on a private bit: followed with the token, as a new history entry.
    bit = private.nth(2)
    title = bit.locator(".bit-title").inner_text()
    bit.get_by_role("link", name="More like this").click()
    tab.page.wait_for_url("**/?like=*")
    tab.page.locator("section.results-ranked h2", has_text=f"More like “{title}”").wait_for()
    assert titles(tab)[0] == title and tab.page.locator(".bit-private").first.locator(".tag").inner_text() == "unpublished"
    tab.screenshot("more-like-a-private-bit")
    tab.page.go_back()
    tab.page.wait_for_url("**/?q=*")
    tab.page.locator("section.results-ranked h2", has_text="Search results").wait_for()
    tab.page.locator(".bit-private").first.wait_for()

    tab.page.reload()  # the token stays for the tab: the private bits come back by themselves
    tab.page.locator(".bit-private").first.wait_for()
    tab.page.get_by_role("button", name="Forget it").click()
    tab.page.wait_for_load_state()
    tab.page.locator("#token-entry").wait_for()
    assert tab.page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") is None
    assert tab.page.locator(".bit-private").count() == 0


def test_with_a_token_the_drafts_library_has_its_own_page_and_map(tab: Tab, site: Site) -> None:
    tab.page.goto(f"{site.url}/")
    use_token(tab, site.token)
    tab.page.locator(".libraries li.publisher", has_text="access/").get_by_role("link", name="Its libraries").click()
    tab.page.wait_for_url("**/p/access/")  # the folder's own page, fetched with the token too
    tab.page.locator(".libraries li", has_text="access/unpublished/drafts").wait_for()

    tab.page.locator(".libraries li", has_text="access/unpublished/drafts").get_by_role(
        "link", name="Map and sample").click()

    tab.page.wait_for_url("**/p/access/?library=access%2Funpublished%2Fdrafts")
    tab.page.locator("svg.map").wait_for()
    assert tab.page.locator("svg.map .map-point-private").count() == 11
    assert "11 bits (11 private, shown by your token)" in tab.page.locator(".library-page").inner_text()
    tab.screenshot("private-library")


@pytest.mark.parametrize("refusal", ["expired", "revoked"])
def test_a_refused_token_is_forgotten_and_the_page_says_why(tab: Tab, site: Site, refusal: str) -> None:
    settings = AccessControl.from_file(site.access).settings
    if refusal == "expired":
        token = issue_token(settings, "carol@example.com", ["unpublished"], expires_in=60,
                            now=int(time.time()) - 3600).token
    else:
        token = admin("token", "issue", "dave@example.com", "--tag", "unpublished", "--access", str(site.access))
        admin("token", "revoke", "dave@example.com", "--access", str(site.access))
        deadline = time.monotonic() + 10  # the host follows the access file within a second
        while httpx.get(f"{site.url}/libraries", headers={"Authorization": f"Bearer {token}"}).status_code != 401:
            assert time.monotonic() < deadline, "the host did not see the revocation"
            time.sleep(0.1)
    tab.page.goto(f"{site.url}/")
    search(tab, LIONS)

    use_token(tab, token)

    tab.page.locator("#notices .notice-error", has_text=f"The access token was refused: {refusal}.").wait_for()
    assert "this tab has forgotten it" in tab.page.locator("#token-notices").inner_text()
    assert tab.page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") is None
    assert tab.page.locator("#token-entry").is_visible() and tab.page.locator(".bit-private").count() == 0
    problems = tab.take_problems()  # Chromium logs the 401 itself
    assert [problem.kind for problem in problems] == ["console"] and "401" in problems[0].text, problems
    tab.screenshot(f"{refusal}-token")


# ---- a phone -----------------------------------------------------------------------------------------------


def test_the_page_fits_a_phone(open_tab: OpenTab, site: Site) -> None:
    tab = open_tab(viewport=PHONE, is_mobile=True, has_touch=True)
    tab.page.goto(f"{site.url}/")
    tab.screenshot("phone-home", full_page=False)  # what a person sees first

    search(tab, JONAH)
    tab.page.locator("section.results-ranked details.bit-text summary").first.click()

    assert tab.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    font_size = tab.page.locator(".bit .full").first.evaluate("node => parseFloat(getComputedStyle(node).fontSize)")
    assert font_size >= 16  # readable without zooming
    tab.screenshot("phone-search", full_page=False)
    tab.page.goto(f"{site.url}/?library=sample")
    assert tab.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    tab.screenshot("phone-library", full_page=False)
