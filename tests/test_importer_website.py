"""`polymath-host import https://site/`: a real site on 127.0.0.1, crawled, imported, served and asked.

The site is served by a real server process: `python -m http.server` for the Harbour Log (a
sitemap index, a robots.txt forbidding /private/, http.server's own 301 from /posts to /posts/, a
404, a picture and links off the site), and `tests/site_server.py` (http.server's handler in a
child process, with redirects, ETags, a declared charset and a gate) where http.server lacks what
a test needs. What the crawler asked for is read back from the server's own request log.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from embedding_service import running_service
from importer_support import HashingEmbedder
from website_support import (
    FACTS,
    NEW_FACT,
    PRIVATE_FACT,
    Site,
    page,
    serving,
    sitemap_index,
    touch_later,
    urlset,
    write_site,
)

from host.importer import ImportOptions, ImportReport, import_library
from host.importer.cli import main
from host.importer.embedding import Embedder
from host.importer.errors import ImporterError
from host.importer.website.addresses import NotAWebAddress, Scope, canonical
from host.importer.website.crawler import CrawlSettings
from host.service.harness import free_port

pytest_plugins = ["embedder_fixtures"]
PROJECT = Path(__file__).resolve().parents[1]
QUICK = CrawlSettings(delay=0.0, backoff=0.01)  # the tests' sites are on this machine: no pause between requests


@pytest.fixture
def harbour(tmp_path: Path) -> Iterator[Site]:
    port = free_port()
    with serving(write_site(tmp_path / "site", f"http://127.0.0.1:{port}"), port=port) as site:
        yield site


def run(url: str, out: Path, embedder: Embedder | None = None, crawl: CrawlSettings = QUICK,
        lines: list[str] | None = None) -> ImportReport:
    options = ImportOptions(cache=out.with_name(out.name + ".cache.sqlite"), crawl=crawl)
    said = lines if lines is not None else []
    return import_library([url], out, embedder or HashingEmbedder(), options, say=said.append)


def bits_of(out: Path) -> list[dict[str, Any]]:
    return list(json.loads(out.read_text())["bits"])


def pages_of(out: Path) -> list[str]:
    """The pages the library's bits link to, in the library's order, each once."""
    return list(dict.fromkeys(bit["info"]["url"].split("#")[0] for bit in bits_of(out)))


def test_a_site_with_a_sitemap_index_imports_its_allowed_pages_in_order_and_says_what_it_skipped(harbour, tmp_path):
    out = tmp_path / "libraries" / "harbour.json"
    lines: list[str] = []
    report = run(harbour.url + "/", out, lines=lines)

    assert pages_of(out) == [harbour.url + path for path in FACTS]  # sitemap order; /posts as it redirects
    texts = " ".join(bit["text"] for bit in bits_of(out))
    assert all(fact in texts for fact in FACTS.values()) and PRIVATE_FACT not in texts
    crawl = report.crawls[0]
    assert crawl.sitemap == harbour.url + "/sitemap_index.xml"
    assert (crawl.pages, crawl.redirects, report.failed) == (6, 1, [])
    assert ("skipped 5 URLs: 1 forbidden by robots.txt, 2 off-site, 1 not found (404/410), 1 not HTML"
            in lines)
    assert harbour.requested("/sitemaps/other.xml") == []  # listed by the index, but on another origin
    assert harbour.requested("/posts") == [301] and harbour.requested("/posts/lost.html") == [404]
    assert harbour.requested("/private/keys.html") == [] and harbour.requested("/images/lamp.png") == []
    assert all(harbour.requested(path) == [200] for path in FACTS)  # each page asked for once


def test_without_a_sitemap_links_are_followed_within_the_site_without_fragments(tmp_path):
    port = free_port()
    folder = write_site(tmp_path / "site", f"http://127.0.0.1:{port}", sitemap=False)
    with serving(folder, port=port) as site:
        lines: list[str] = []
        out = tmp_path / "site.json"
        report = run(site.url + "/", out, lines=lines)
        assert site.requested("/sitemap.xml") == [404]  # looked for, not there: links it is
        assert site.requested("/elsewhere.html") == []  # linked from another origin (localhost) only
        assert all(site.requested(path) == [200] for path in FACTS)  # #census and #ingrid are no other pages

    assert set(pages_of(out)) == {site.url + path for path in FACTS}
    assert pages_of(out)[:3] == [site.url + "/", site.url + "/about.html", site.url + "/posts/"]  # as linked
    assert report.crawls[0].sitemap is None
    assert ("skipped 5 URLs: 1 forbidden by robots.txt, 2 off-site, 1 not found (404/410), 1 not HTML" in lines)


def test_a_start_below_the_root_keeps_to_its_folder(harbour, tmp_path):
    out = tmp_path / "posts.json"
    report = run(harbour.url + "/posts/", out)
    assert pages_of(out) == [harbour.url + path for path in FACTS if path.startswith("/posts/")]
    # /, /about.html, /private/keys.html, /images/lamp.png, and /posts itself (its folder is /)
    assert report.crawls[0].skipped["outside the start's folder"] == 5


def test_max_pages_stops_the_crawl_and_says_how_many_more_it_found(harbour, tmp_path):
    lines: list[str] = []
    out = tmp_path / "two.json"
    run(harbour.url + "/sitemap_index.xml", out, crawl=CrawlSettings(delay=0.0, max_pages=2), lines=lines)
    assert pages_of(out) == [harbour.url + "/", harbour.url + "/about.html"]
    assert "stopped at --max-pages 2: 5 more URLs found were not fetched" in lines
    assert harbour.requested("/posts/moonfish.html") == []


def test_imported_with_minilm_a_sentence_finds_its_page_and_a_re_run_asks_only_if_modified(
        harbour, tmp_path, minilm_embedder, run_host):
    out = tmp_path / "libraries" / "harbour.json"
    first = run(harbour.url + "/", out, minilm_embedder)
    assert first.embedded == first.bits > 0

    host = run_host(out.parent, embedder=True, timeout=120)
    answer = httpx.post(f"{host.url}/", json={"query": FACTS["/posts/moonfish.html"], "count": 3,
                                              "count_type": "bit"}, timeout=60)
    assert answer.status_code == 200, answer.text
    top = answer.json()["bits"]
    assert any(FACTS["/posts/moonfish.html"] in bit["text"] for bit in top)
    assert harbour.url + "/posts/moonfish.html" in [bit["info"]["url"].split("#")[0] for bit in top]

    before = len(harbour.requests())
    again = run(harbour.url + "/", out, minilm_embedder)
    statuses = [status for path, status in harbour.requests()[before:] if path in FACTS]
    assert statuses == [304] * len(FACTS)  # If-Modified-Since, from each page's Last-Modified
    assert (again.crawls[0].unchanged, again.embedded, again.reused) == (len(FACTS), 0, first.bits)

    (harbour.folder / "posts" / "puffins.html").write_text(page("Puffins", NEW_FACT))
    sitemap = harbour.folder / "sitemaps" / "posts.xml"
    sitemap.write_text(urlset(harbour.url, [*(path for path in FACTS if path.startswith("/posts/")),
                                            "/posts/puffins.html"]))
    touch_later(sitemap)
    third = run(harbour.url + "/", out, minilm_embedder)
    new_bits = [bit for bit in bits_of(out) if bit["info"]["url"].startswith(harbour.url + "/posts/puffins.html")]
    assert len(new_bits) >= 1 and NEW_FACT in new_bits[0]["text"]
    assert third.embedded == len(new_bits) and third.reused == first.bits  # only the new page embedded
    assert third.crawls[0].unchanged == len(FACTS)


def test_redirects_are_followed_only_within_the_site_and_etags_make_re_runs_conditional(tmp_path):
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    folder = tmp_path / "site"
    (folder / "posts").mkdir(parents=True)
    (folder / "index.html").write_text(page("Home", FACTS["/"], '<a href="/old-barnacles.html">Barnacles</a> '
                                            '<a href="/gone-away.html">Foghorn</a>'))
    (folder / "posts" / "barnacles.html").write_text(page("Barnacles", FACTS["/posts/barnacles.html"]))
    (folder / "posts" / "foghorn.html").write_text(page("Foghorn", FACTS["/posts/foghorn.html"]))
    (folder / "robots.txt").write_text("User-agent: *\nAllow: /\n")
    redirects = {"/old-barnacles.html": "/posts/barnacles.html",
                 "/gone-away.html": f"http://localhost:{port}/posts/foghorn.html"}  # the same server, another origin
    with serving(folder, port=port, config={"redirects": redirects, "etags": True}) as site:
        lines: list[str] = []
        out = tmp_path / "site.json"
        first = run(origin + "/", out, lines=lines)
        assert site.requested("/posts/foghorn.html") == []
        assert pages_of(out) == [origin + "/", origin + "/posts/barnacles.html"]
        assert (first.crawls[0].redirects, first.crawls[0].skipped["off-site"]) == (2, 1)

        before = len(site.requests())
        again = run(origin + "/", out)
        asked = ("/", "/old-barnacles.html", "/gone-away.html", "/posts/barnacles.html")
        statuses = sorted(status for path, status in site.requests()[before:] if path in asked)
        assert statuses == [301, 301, 304, 304]  # If-None-Match, from each page's ETag
        assert (again.crawls[0].unchanged, again.embedded) == (2, 0)


def test_a_page_that_is_not_in_the_charset_it_declares_is_named_and_the_rest_imported(tmp_path):
    port = free_port()
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "index.html").write_text(page("Home", FACTS["/"], '<a href="bad.html">Bad</a> <a href="good.html">G</a>'))
    bad = page("Bad", "Caf\u00e9 au lait").encode("latin-1")  # served as utf-8, which it is not
    (folder / "bad.html").write_bytes(bad)
    (folder / "good.html").write_text(page("Good", FACTS["/about.html"]))
    with serving(folder, port=port, config={"charset": "utf-8"}) as site:
        lines: list[str] = []
        out = tmp_path / "site.json"
        report = run(site.url + "/", out, lines=lines)
    problem = f"{site.url}/bad.html: not utf-8 text as its Content-Type says (byte {bad.index(0xE9)} is 0xe9)"
    assert report.failed == [problem] and f"error: {problem}" in lines
    assert pages_of(out) == [site.url + "/", site.url + "/good.html"]


def test_a_gzipped_sitemap_given_as_the_source_lists_the_pages(tmp_path):
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "a.html").write_text(page("A", FACTS["/"]))
    (folder / "b.html").write_text(page("B", FACTS["/about.html"]))
    (folder / "sitemap.xml.gz").write_bytes(gzip.compress(urlset(origin, ["/b.html", "/a.html"]).encode()))
    with serving(folder, port=port) as site:
        report = run(site.url + "/sitemap.xml.gz", tmp_path / "site.json")
        assert site.requested("/robots.txt") == [404]  # no robots.txt: everything allowed
    assert pages_of(tmp_path / "site.json") == [origin + "/b.html", origin + "/a.html"]
    assert report.crawls[0].sitemap == origin + "/sitemap.xml.gz"


def test_a_page_answered_503_is_asked_again_and_one_that_keeps_failing_is_named_the_rest_imported(tmp_path):
    port = free_port()
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "index.html").write_text(page("Home", FACTS["/"], '<a href="busy.html">B</a> <a href="down.html">D</a>'))
    (folder / "busy.html").write_text(page("Busy", FACTS["/about.html"]))
    (folder / "down.html").write_text(page("Down", PRIVATE_FACT))
    with serving(folder, port=port, config={"failing": {"/busy.html": 2, "/down.html": -1}}) as site:
        lines: list[str] = []
        out = tmp_path / "site.json"
        report = run(site.url + "/", out, lines=lines)
        assert site.requested("/busy.html") == [503, 503, 200] and site.requested("/down.html") == [503] * 3
        assert report.failed == [f"{site.url}/down.html: the server answered 503"]
        assert f"error: {site.url}/down.html: the server answered 503" in lines
        assert pages_of(out) == [site.url + "/", site.url + "/busy.html"]

        again = run(site.url + "/", out)  # a failure is not kept as an answer: the next run asks again
        assert again.failed == report.failed and site.requested("/down.html") == [503] * 6


def test_the_command_imports_a_site_and_says_what_it_skipped(harbour, tmp_path, capsys):
    out = tmp_path / "harbour.json"
    code = main([harbour.url + "/", "--out", str(out), "--crawl-delay", "0", "--crawl-concurrency", "2",
                 "--quiet"], open_embedder=lambda *arguments, **options: HashingEmbedder())
    said = capsys.readouterr().err
    assert code == 0, said
    assert f"crawled {harbour.url}/ (sitemap {harbour.url}/sitemap_index.xml): 6 pages, 1 redirect followed" in said
    assert "skipped 5 URLs: 1 forbidden by robots.txt" in said
    assert len(pages_of(out)) == 6


def test_a_crawl_delay_spaces_the_requests(harbour, tmp_path):
    """At least `delay` between the starts of two requests: the whole crawl takes (requests - 1) x delay."""
    report = run(harbour.url + "/", tmp_path / "slow.json", crawl=CrawlSettings(delay=0.1, concurrency=4))
    crawl = report.crawls[0]
    assert crawl.requests == len(harbour.requests()) >= 10
    assert crawl.seconds >= (crawl.requests - 1) * 0.1


def test_robots_txt_crawl_delay_slows_the_crawl_and_its_own_group_wins(tmp_path):
    port = free_port()
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "index.html").write_text(page("Home", FACTS["/"], '<a href="a.html">A</a> <a href="b.html">B</a>'))
    (folder / "a.html").write_text(page("A", FACTS["/about.html"]))
    (folder / "b.html").write_text(page("B", PRIVATE_FACT))
    (folder / "robots.txt").write_text("User-agent: *\nDisallow: /\n\n"
                                       "User-agent: polymath-host\nAllow: /\nDisallow: /b.html\nCrawl-delay: 0.2\n")
    with serving(folder, port=port) as site:
        lines: list[str] = []
        report = run(site.url + "/", tmp_path / "site.json", lines=lines)
    crawl = report.crawls[0]
    assert (crawl.pages, crawl.skipped["forbidden by robots.txt"], crawl.delay) == (2, 1, 0.2)
    assert crawl.seconds >= (crawl.requests - 2) * 0.2  # from the request after robots.txt's
    assert any(line.endswith("0.2 s apart") for line in lines)


def test_a_start_that_redirects_to_another_site_or_is_forbidden_changes_nothing(tmp_path):
    port = free_port()
    folder = tmp_path / "site"
    (folder / "private").mkdir(parents=True)
    (folder / "private" / "index.html").write_text(page("Private", PRIVATE_FACT))
    (folder / "robots.txt").write_text("User-agent: *\nDisallow: /private/\n")
    config = {"redirects": {"/": f"http://localhost:{port}/"}}
    out = tmp_path / "site.json"
    with serving(folder, port=port, config=config) as site:
        for start, problem in [(site.url + "/", f"redirects to http://localhost:{port}/ (off-site): import that URL"),
                               (site.url + "/private/", "the site's robots.txt forbids it")]:
            with pytest.raises(ImporterError, match=re.escape(problem)):
                run(start, out)
    assert not out.exists()


def test_an_interrupted_crawl_resumes_where_it_stopped(tmp_path):
    """Ctrl-C on a real `import` while a page is held by the server; the same command again asks for
    none of the pages the server had already answered, and imports every page."""
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    folder = tmp_path / "site"
    (folder / "posts").mkdir(parents=True)
    posts = [f"/posts/day-{number:02d}.html" for number in range(1, 41)]
    for number, path in enumerate(posts, start=1):
        (folder / path.lstrip("/")).write_text(page(f"Day {number}", f"On day {number} the keeper saw {number} gulls."))
    (folder / "index.html").write_text(page("The keeper's log", FACTS["/"]))
    pages = ["/", *posts]
    (folder / "sitemap.xml").write_text(sitemap_index(origin, ["/posts.xml"]))
    (folder / "posts.xml").write_text(urlset(origin, posts))
    (folder / "robots.txt").write_text(f"User-agent: *\nAllow: /\nSitemap: {origin}/sitemap.xml\n")
    gate = tmp_path / "gate-open"
    out = tmp_path / "libraries" / "log.json"
    with running_service(dimension=16) as embeddings, \
            serving(folder, port=port, config={"gate": {"path": posts[19], "file": str(gate)}}) as site:
        command = [sys.executable, "-m", "host", "import", origin + "/", "--out", str(out), "--quiet",
                   "--crawl-delay", "0", "--crawl-concurrency", "2", "--embedder-url", embeddings.url,
                   "--embedder-model", "text-embedding-test"]
        environment = {**os.environ, "PYTHONPATH": str(PROJECT), "POLYMATH_EMBEDDER_KEY": "sk-test"}
        first = subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True)
        try:
            site.wait_for_request(posts[20], first)  # the page after the held one: the crawl is under way
            first.send_signal(signal.SIGINT)
        finally:
            gate.touch()
            said = first.communicate(timeout=60)[1]
        assert first.returncode == 130, said
        assert "interrupted" in said and not out.exists()
        answered = {path for path, status in site.requests() if status == 200 and path in pages}
        assert answered and len(answered) < len(pages)

        before = len(site.requests())
        second = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        asked_again = [path for path, _ in site.requests()[before:]]

    assert set(asked_again) & answered == set()  # nothing the first run was given is asked for again
    assert set(asked_again) == set(pages) - answered  # robots.txt and the sitemaps too were kept
    assert f"{len(answered)} from the interrupted run" in second.stderr
    assert pages_of(out) == [origin + path for path in pages]


def test_two_spellings_of_one_page_are_one_address():
    same = ["HTTP://Example.COM:80/a/./b/../c.html#part", "http://example.com/a/c.html",
            "http://example.com/a/%63.html", "/a/c.html"]
    assert {canonical(spelling, "http://example.com/x/") for spelling in same} == {"http://example.com/a/c.html"}
    assert canonical("https://example.com") == "https://example.com/"
    assert canonical("https://example.com:8443/a b?q=1&r=%2f") == "https://example.com:8443/a%20b?q=1&r=%2F"
    assert canonical("../up/", "https://example.com/blog/post/") == "https://example.com/blog/up/"
    for not_a_page in ["mailto:ingrid@example.com", "javascript:void(0)", "ftp://example.com/"]:
        with pytest.raises(NotAWebAddress):
            canonical(not_a_page)
    blog = Scope.of_start("https://example.com/blog/post.html")
    assert blog.prefix == "/blog/" and blog.holds("https://example.com/blog/2024/x.html")
    assert not blog.holds("https://example.com/about.html") and not blog.holds("http://example.com/blog/")
