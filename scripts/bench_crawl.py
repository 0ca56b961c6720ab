"""How fast `polymath-host import https://site/` crawls (issue 32's goal: a 2,000-page local site at
>= 50 pages/s before embedding), and the model's time beside it.

    .venv/bin/python scripts/bench_crawl.py                 # --pages 2000 --runs 3 --concurrency 4, then one import
    .venv/bin/python scripts/bench_crawl.py --sitemap       # the pages listed by a sitemap index instead of linked

The site is written to a temporary folder and served by `python -m http.server` on 127.0.0.1, a
process of its own, as the tests serve theirs: a home page, 20 section pages and their posts, ~6 KB
of HTML each, every post linking home, to its section, to the posts before and after it and to five
others (or, with --sitemap, a sitemap index of two sitemaps). Each crawl-only run is the crawler
alone (`website.crawler.crawl`: robots.txt, the start page, every page fetched, its links followed,
its charset checked) with no pause between requests (`--crawl-delay 0`: the polite default of
0.25 s would cap any site at 4 pages/s), into an in-memory store, and is reported in pages/s.
Then one whole import with the local model (`--no-embed` leaves it out) reports its crawl's time
and the model's embedding time separately. Runs only while the 1-minute load is under 2.0
(`--any-load` to run anyway); the load is printed with each figure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from host.importer.website.crawler import CrawlReport, CrawlSettings, crawl  # noqa: E402
from host.importer.website.page_store import PageStore  # noqa: E402
from host.service.harness import free_port  # noqa: E402

SECTIONS = 20
GOAL_PAGES_PER_SECOND = 50.0
WORDS = ["tide", "harbour", "lantern", "gale", "keeper", "pier", "gull", "fog", "barometer", "kettle", "ledger", "lamp",
         "rope", "anchor", "current", "swell", "beacon", "shoal", "skerry", "squall", "dusk", "dawn", "ferry", "net"]


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def paragraph(chance: random.Random, words: int = 90) -> str:
    return " ".join(chance.choice(WORDS) for _ in range(words)).capitalize() + "."


def html(title: str, body: str) -> str:
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{title} | Harbour</title>'
            '<meta name="description" content="A keeper\'s log."><link rel="stylesheet" href="/style.css"></head>'
            '<body><header><nav><a href="/">Home</a> <a href="/about.html">About</a></nav></header>'
            f"<main><article><h1>{title}</h1>{body}</article></main><footer>The Harbour Log</footer></body></html>")


def write_site(folder: Path, pages: int, origin: str, sitemap: bool) -> list[str]:
    """A site of `pages` HTML pages (the home page and the about page among them); their paths."""
    chance = random.Random(32)
    posts = pages - 2 - SECTIONS
    paths = ["/", "/about.html"] + [f"/s{section:02d}/" for section in range(SECTIONS)]
    post_paths = [f"/s{number % SECTIONS:02d}/post-{number:04d}.html" for number in range(posts)]
    for section in range(SECTIONS):
        (folder / f"s{section:02d}").mkdir(parents=True, exist_ok=True)
    (folder / "index.html").write_text(html("Harbour", "".join(
        f'<p><a href="/s{section:02d}/">Section {section}</a></p>' for section in range(SECTIONS))))
    (folder / "about.html").write_text(html("About", f"<p>{paragraph(chance)}</p>"))
    for section in range(SECTIONS):
        links = "".join(f'<li><a href="{path.rsplit("/", 1)[1]}">{path}</a></li>'
                        for path in post_paths if path.startswith(f"/s{section:02d}/"))
        (folder / f"s{section:02d}" / "index.html").write_text(html(f"Section {section}", f"<ul>{links}</ul>"))
    for number, path in enumerate(post_paths):
        related = "".join(f'<a href="{chance.choice(post_paths)}">related</a> ' for _ in range(5))
        around = "".join(f'<a href="{post_paths[other]}">{label}</a> '
                         for other, label in ((number - 1, "previous"), (number + 1, "next")) if 0 <= other < posts)
        body = "".join(f"<h2 id=\"part-{part}\">Part {part}</h2><p>{paragraph(chance)}</p><p>{paragraph(chance)}</p>"
                       for part in range(4))
        (folder / path.lstrip("/")).write_text(html(f"Post {number}", f"{body}<p>{around}{related}"
                                                    f'<a href="/s{number % SECTIONS:02d}/">section</a></p>'))
    robots = "User-agent: *\nDisallow: /drafts/\n"
    if sitemap:
        everything = paths + post_paths
        halves = [everything[: len(everything) // 2], everything[len(everything) // 2:]]
        for number, half in enumerate(halves):
            entries = "".join(f"<url><loc>{origin}{path}</loc></url>" for path in half)
            (folder / f"sitemap-{number}.xml").write_text(
                f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>')
        entries = "".join(f"<sitemap><loc>{origin}/sitemap-{number}.xml</loc></sitemap>" for number in range(2))
        (folder / "sitemap.xml").write_text(
            f'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}'
            "</sitemapindex>")
        robots += f"Sitemap: {origin}/sitemap.xml\n"
    (folder / "robots.txt").write_text(robots)
    return paths + post_paths


@contextlib.contextmanager
def served(folder: Path, port: int) -> Iterator[None]:
    """`python -m http.server` on 127.0.0.1:port, serving `folder`, its log discarded."""
    process = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                "--directory", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.02)
        yield
    finally:
        process.terminate()
        process.wait(10)


def crawl_only(url: str, settings: CrawlSettings) -> CrawlReport:
    report = CrawlReport(url)
    store = PageStore(None, url)
    try:
        for _page in crawl(url, store, settings, report):
            pass
    finally:
        store.close()
    return report


def whole_import(url: str, settings: CrawlSettings, workdir: Path) -> None:
    from host.importer import ImportOptions, import_library
    from host.importer.cli import default_concurrency, open_embedder

    embedder = open_embedder(None, None, None)
    out = workdir / "libraries" / "site.json"
    options = ImportOptions(cache=workdir / "cache.sqlite", crawl=settings, concurrency=default_concurrency(embedder))
    load = os.getloadavg()[0]
    report = import_library([url], out, embedder, options, say=lambda line: None)
    crawl_report = report.crawls[0]
    # The crawl ends before anything is read; reading and chunking then run beside the model (a second
    # process), held back by it, so the model's time is the rest of the import.
    say(f"whole import (load {load:.2f} before, {os.getloadavg()[0]:.2f} after): {report.bits} bits from "
        f"{crawl_report.pages} pages in {report.seconds:.1f} s: the crawl {crawl_report.seconds:.1f} s "
        f"({crawl_report.pages / crawl_report.seconds:.0f} pages/s), then the model embedding {report.embedded_texts} "
        f"chunks in {report.embed_seconds:.1f} s ({report.embedded_texts / report.embed_seconds:.0f} chunks/s), "
        "the pages read and chunked meanwhile")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3, help="crawl-only runs (the median is the figure)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests at once (--crawl-concurrency)")
    parser.add_argument("--sitemap", action="store_true", help="a sitemap index lists the pages (else links)")
    parser.add_argument("--no-embed", action="store_true", help="leave out the whole import with the local model")
    parser.add_argument("--any-load", action="store_true", help="run even when the 1-minute load is 2.0 or more")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    if load >= 2.0 and not args.any_load:
        say(f"the 1-minute load is {load:.2f}: figures would measure the other work; wait until it is under 2.0")
        return 2
    settings = CrawlSettings(concurrency=args.concurrency, delay=0.0)
    with tempfile.TemporaryDirectory(prefix="bench-crawl-") as temporary:
        workdir = Path(temporary)
        port = free_port()
        origin = f"http://127.0.0.1:{port}"
        paths = write_site(workdir / "site", args.pages, origin, args.sitemap)
        say(f"a site of {len(paths)} pages ({'a sitemap index' if args.sitemap else 'linked'}), "
            f"{sum(path.stat().st_size for path in (workdir / 'site').rglob('*.html')) / len(paths) / 1024:.1f} KB "
            f"of HTML a page, served by python -m http.server; crawled {args.concurrency} requests at once, no delay")
        rates = []
        with served(workdir / "site", port):
            for run in range(args.runs):
                load = os.getloadavg()[0]
                report = crawl_only(origin + "/", settings)
                assert report.pages == len(paths) and not report.failed, report.lines()
                rates.append(report.pages / report.seconds)
                say(f"crawl {run + 1}: {report.pages} pages, {report.requests} requests in {report.seconds:.2f} s: "
                    f"{rates[-1]:.0f} pages/s (load {load:.2f} before)")
            median = statistics.median(rates)
            verdict = "meets" if median >= GOAL_PAGES_PER_SECOND else "misses"
            say(f"crawl alone: median {median:.0f} pages/s over {args.runs} runs ({verdict} the goal of "
                f"{GOAL_PAGES_PER_SECOND:.0f} pages/s)")
            if not args.no_embed:
                whole_import(origin + "/", settings, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
