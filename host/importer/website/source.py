"""A website as SOURCE of an import: its crawl (`crawler`) turned into one `SourceFile` per page.

Each page is read by the HTML reader like an `.html` file, its `url` the page's own (after
redirects; its canonical link wins, as for any HTML page), so `--base-url` plays no part. The
page's bytes travel in the `SourceFile` (as an export's posts do) and its cache key is made from
its URL and bytes: a page answered 304 on a re-run is the same bytes, so its chunks and vectors
come from the cache, and only new or changed pages are read and embedded.

The crawl's answers are kept in the import cache's file (`page_store`), or in memory without one
(`--no-cache`: then nothing is conditional and nothing resumes). Its report goes to `say` as soon
as the crawl ends, before anything is embedded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from host.importer.errors import ImporterError
from host.importer.sources import SourceFile
from host.importer.website.addresses import NotAWebAddress, canonical
from host.importer.website.crawler import CrawlReport, CrawlSettings, crawl
from host.importer.website.page_store import PageStore


class CrawlProgress(Protocol):
    def crawling(self, site: str) -> None: ...

    def page_crawled(self) -> None: ...

    def close(self) -> None: ...


def read_site(url: str, *, cache: Path | None, settings: CrawlSettings, progress: CrawlProgress,
              say: Callable[[str], None], reports: list[CrawlReport]) -> tuple[list[SourceFile], list[str]]:
    """The pages of the site at `url` as sources, and the lines of the pages that failed; its
    report appended to `reports` and said."""
    try:
        start = canonical(url)
    except NotAWebAddress:
        raise ImporterError(f"{url}: not an http(s) URL with a host") from None
    report = CrawlReport(start)
    reports.append(report)
    store = PageStore(cache, start, say)
    files: list[SourceFile] = []
    progress.crawling(start)
    try:
        for page in crawl(start, store, settings, report):
            files.append(SourceFile(Path(), page.url, "html", data=page.body, url=page.url))
            progress.page_crawled()
    finally:
        store.close()
        progress.close()
    for line in report.warnings:
        say(f"warning: {line}")
    for line in report.lines():
        say(line)
    return files, list(report.failed)
