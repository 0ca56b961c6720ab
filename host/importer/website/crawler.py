"""The crawl of one website: which pages, in what order, asked for how, and what was skipped and why.

`crawl(start, store, settings, report)` yields the site's HTML pages in a stable order:
1. `<origin>/robots.txt` is read first (`robots`); its Crawl-delay slows the crawl further.
2. The start URL is asked for. A sitemap (or sitemap index) there is the list of pages, for its
   whole origin. An HTML page there starts a crawl of its folder (`https://site/blog/` keeps to
   `/blog/`): of the pages the site's sitemaps list (robots.txt's Sitemap lines, else
   `/sitemap.xml`) when they list any in that folder, else of the pages reached by following links
   from the start page, breadth first.
3. Pages are asked for `settings.concurrency` at once, a few more ahead, but consumed in order, so
   the same site always gives the same pages in the same order (sitemap order, or the order links
   are met), however the answers race. At most `settings.max_pages` pages are imported.

Every URL is canonical (`addresses`) and asked for once. Skipped without a request, and counted:
links to other origins ("off-site"), outside the start's folder, forbidden by robots.txt, or to
files that are plainly not pages (`.png`, `.pdf`...). Skipped after one: redirects leaving the
site, 404 and 410 ("not found"), 401 and 403 ("refused"), answers that are not HTML, pages whose
robots meta tag or X-Robots-Tag says noindex (their links are still followed unless nofollow).
Redirects are followed within the site, ten hops at most. A page that cannot be had (a 5xx after
retries, no answer, a page too large) is one line in `report.failed`; the crawl goes on.

Each answer is kept in the `PageStore` as it comes, so a re-run's requests are conditional and
an interrupted crawl resumes where it stopped (see `page_store`). A start URL that cannot be
crawled at all (robots.txt unreadable or forbidding it, no answer, a redirect to another site)
is an ImporterError, before anything is imported.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from host.importer.errors import ImporterError
from host.importer.website.addresses import NotAWebAddress, Scope, canonical, looks_like_not_html, origin_of
from host.importer.website.fetching import DEFAULT_TIMEOUT, Answer, Fetcher, FetchFailed, anything
from host.importer.website.links import page_links, robots_directives
from host.importer.website.page_store import PageStore
from host.importer.website.robots import Robots, robots_from
from host.importer.website.sitemaps import NotASitemap, looks_like_a_sitemap, read_sitemap

DEFAULT_CONCURRENCY = 4
DEFAULT_DELAY = 0.25  # seconds between two requests' starts: at most 4 a second
DEFAULT_MAX_PAGES = 10_000
MAX_REDIRECTS = 10
MAX_SITEMAP_DEPTH = 3  # an index of indexes of sitemaps, at most (the protocol allows one level)
READ_AHEAD = 4  # pages asked for ahead of the one consumed, per request at once
HTML_TYPES = ("text/html", "application/xhtml+xml")
_SITEMAP_TYPES = ("xml", "gzip", "octet-stream")
_CHARSET = re.compile(r"""charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)

# The reasons a URL is skipped, as the report names them.
ROBOTS, OFF_SITE, OUTSIDE, NOT_FOUND, REFUSED, NOT_HTML, NOINDEX = (
    "forbidden by robots.txt", "off-site", "outside the start's folder", "not found (404/410)",
    "refused (401/403)", "not HTML", "noindex")
REASONS = (ROBOTS, NOINDEX, OFF_SITE, OUTSIDE, NOT_FOUND, REFUSED, NOT_HTML)


@dataclass(frozen=True)
class CrawlSettings:
    concurrency: int = DEFAULT_CONCURRENCY
    delay: float = DEFAULT_DELAY
    max_pages: int = DEFAULT_MAX_PAGES
    timeout: float = DEFAULT_TIMEOUT
    retries: int = 2
    backoff: float = 1.0


@dataclass(frozen=True)
class Page:
    """An HTML page of the site: where it was found (after redirects) and what it was."""

    url: str
    content_type: str
    body: bytes


@dataclass
class CrawlReport:
    start: str
    sitemap: str | None = None  # the sitemap the pages came from, if any
    pages: int = 0
    unchanged: int = 0  # answered 304 Not Modified: the kept page reused
    resumed: int = 0  # taken from the interrupted run this one continues, without a request
    requests: int = 0
    redirects: int = 0
    delay: float = DEFAULT_DELAY
    skipped: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)  # "URL: what went wrong", one per page
    warnings: list[str] = field(default_factory=list)  # what is wrong with the site but costs no page
    not_fetched: int = 0  # pages found but left at --max-pages
    max_pages: int = DEFAULT_MAX_PAGES
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """The crawl in two lines: what was read, and what was skipped and why."""
        source = f" (sitemap {self.sitemap})" if self.sitemap else ""
        reused = [f"{self.unchanged} unchanged: 304 Not Modified"] if self.unchanged else []
        reused += [f"{self.resumed} from the interrupted run"] if self.resumed else []
        pages = f"{self.pages} page{'s' * (self.pages != 1)}" + (f" ({', '.join(reused)})" if reused else "")
        redirects = f", {self.redirects} redirect{'s' * (self.redirects != 1)} followed" if self.redirects else ""
        rate = f", {self.pages / self.seconds:.1f} pages/s" if self.seconds and self.pages else ""
        lines = [f"crawled {self.start}{source}: {pages}{redirects}; {self.requests} requests in "
                 f"{self.seconds:.1f} s{rate}, {self.delay:g} s apart"]
        parts = [f"{self.skipped[reason]} {reason}" for reason in REASONS if self.skipped[reason]]
        total = self.skipped.total()
        lines.append(f"skipped {total} URL{'s' * (total != 1)}: {', '.join(parts)}" if parts else "skipped no URL")
        if self.failed:
            lines[-1] += f"; {len(self.failed)} failed (see above)"
        if self.not_fetched:
            lines.append(f"stopped at --max-pages {self.max_pages}: {self.not_fetched} more URLs found were not fetched")
        return lines


@dataclass(frozen=True)
class _Visit:
    """What asking for one URL came to, following its redirects (in a worker thread)."""

    url: str
    answer: Answer | None = None  # the last answer, at `answer.url`
    how: str = "fetched"  # "fetched", "unchanged" (304) or "resumed"
    redirects: int = 0
    skipped: str | None = None
    moved_to: str | None = None  # where a skipped redirect led
    problem: str | None = None


def is_html(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in HTML_TYPES or not media  # no Content-Type: read it, and let the page show what it is


def as_utf8(body: bytes, content_type: str) -> bytes:
    """A page's bytes in UTF-8 when its Content-Type names a charset they decode in (UnicodeDecodeError
    when they do not: the page is undecodable); as they are when it names none, or one Python does not
    know (the HTML reader then goes by the page's own meta charset)."""
    match = _CHARSET.search(content_type)
    if match is None:
        return body
    charset = match.group(1).lower()
    try:
        text = body.decode(charset)
    except LookupError:
        return body
    return body if charset.replace("-", "").replace("_", "") == "utf8" else text.encode("utf-8")


def _could_be_a_sitemap(content_type: str) -> bool:
    return is_html(content_type) or any(kind in content_type.lower() for kind in _SITEMAP_TYPES)


class _Crawl:
    def __init__(self, start: str, store: PageStore, settings: CrawlSettings, report: CrawlReport,
                 fetcher: Fetcher) -> None:
        self.start = start
        self.store = store
        self.settings = settings
        self.report = report
        self.fetcher = fetcher
        self.robots = Robots()
        self.scope = Scope(origin_of(start))
        self.seen: set[str] = set()  # every URL met, to be visited or skipped
        self.taken: set[str] = set()  # every URL whose answer was counted
        self.early: dict[str, _Visit] = {}  # visits made before the crawl proper (the start page)

    # ---- asking for one URL (worker threads) -------------------------------------------------

    def answer(self, url: str, want: Callable[[str], bool] = is_html) -> tuple[Answer, str]:
        """The answer for `url`: this run's if it has one, else asked for, conditionally on the last one kept."""
        kept = self.store.last(url)
        if kept is not None and kept[1]:
            return kept[0], "resumed" if self.store.resumed else "fetched"
        last = kept[0] if kept is not None and kept[0].status == 200 and kept[0].body else None
        answer = self.fetcher.get(url, etag=last.etag if last else None,
                                  last_modified=last.last_modified if last else None, want=want)
        how = "fetched"
        if answer.status == 304:
            if last is None:
                raise FetchFailed("answered 304 Not Modified to a request that was not conditional")
            answer = dataclasses.replace(last, etag=answer.etag or last.etag,
                                         last_modified=answer.last_modified or last.last_modified)
            how = "unchanged"
        if answer.status < 500 and answer.status != 429:
            self.store.keep(answer)
        return answer, how

    def visit(self, url: str, want: Callable[[str], bool] = is_html) -> _Visit:
        """`url` asked for, its redirects followed while they stay in scope."""
        current, hops = url, 0
        try:
            while True:
                answer, how = self.answer(current, want)
                if not (300 <= answer.status < 400 and answer.location):
                    return _Visit(url, answer, how, hops)
                try:
                    target = canonical(answer.location, current)
                except NotAWebAddress:
                    return _Visit(url, problem=f"redirects to {answer.location!r}, not a web page")
                skipped = self.outside(target)
                if skipped:
                    return _Visit(url, skipped=skipped, moved_to=target, redirects=hops + 1)
                hops += 1
                if hops > MAX_REDIRECTS:
                    return _Visit(url, problem=f"more than {MAX_REDIRECTS} redirects")
                current = target
        except FetchFailed as problem:
            return _Visit(url, problem=str(problem), redirects=hops)

    def outside(self, url: str) -> str | None:
        """Why `url` is not to be asked for, or None."""
        if not self.scope.same_origin(url):
            return OFF_SITE
        if not self.scope.holds(url):
            return OUTSIDE
        if not self.robots.allows(url):
            return ROBOTS
        return None

    # ---- the crawl (this thread) -------------------------------------------------------------

    def begin(self) -> tuple[list[str], bool]:
        """robots.txt read and the start asked for: the pages to visit first, and whether to follow links."""
        self.robots = self.read_robots(self.scope.origin)
        delay = self.robots.delay()
        if delay is not None and delay > self.fetcher.delay:
            self.fetcher.delay = delay
        self.report.delay = self.fetcher.delay
        if not self.robots.allows(self.start):
            raise ImporterError(f"{self.start}: the site's robots.txt forbids it, so it is not crawled")
        visit = self.visit(self.start, _could_be_a_sitemap)
        if visit.problem:
            raise ImporterError(f"{self.start}: {visit.problem}")
        if visit.skipped or visit.answer is None:
            raise ImporterError(f"{self.start}: redirects to {visit.moved_to} ({visit.skipped}): import that URL "
                                "instead")
        answer = visit.answer
        if answer.status != 200:
            raise ImporterError(f"{self.start}: the server answered {answer.status}")
        if looks_like_a_sitemap(answer.body):
            self.report.sitemap = answer.url
            return self.pages_of_sitemaps([answer.url], given=answer, failures=self.report.failed), False
        if not is_html(answer.content_type):
            raise ImporterError(f"{self.start}: neither an HTML page nor a sitemap (Content-Type {answer.content_type})")
        self.scope = Scope.of_start(answer.url)
        self.seen.add(answer.url)
        self.early[answer.url] = dataclasses.replace(visit, url=answer.url)
        listed_in_robots = [url for url in self.robots.sitemaps if self._same_origin(url)]
        candidates = listed_in_robots or [f"{self.scope.origin}/sitemap.xml"]
        listed = self.pages_of_sitemaps(candidates, failures=self.report.warnings if listed_in_robots else None)
        if listed:
            self.report.sitemap = ", ".join(candidates)
            return [answer.url, *listed], False
        return [answer.url], True

    def _same_origin(self, url: str) -> bool:
        try:
            return self.scope.same_origin(canonical(url))
        except NotAWebAddress:
            return False

    def read_robots(self, origin: str) -> Robots:
        url = f"{origin}/robots.txt"
        try:
            for _ in range(5):  # RFC 9309: follow at least five redirects
                answer, _how = self.answer(url, anything)
                if not (300 <= answer.status < 400 and answer.location):
                    return robots_from(url, answer.status, answer.body)
                url = canonical(answer.location, url)
        except FetchFailed as problem:
            raise ImporterError(f"{url}: {problem}, so which pages the site allows is unknown and none is "
                                "fetched; try again later") from None
        except NotAWebAddress:
            return Robots()
        return Robots()  # a redirect loop: no rules (RFC 9309 treats it as unavailable)

    def pages_of_sitemaps(self, sitemaps: list[str], *, given: Answer | None = None,
                          failures: list[str] | None) -> list[str]:
        """The pages in scope that `sitemaps` (and the sitemaps they index) list, in order, each once.
        What is wrong with a sitemap goes to `failures` (None: the sitemap was a guess, say nothing)."""
        pages: list[str] = []
        queue = deque((url, 0) for url in sitemaps)
        visited: set[str] = set()
        while queue:
            url, depth = queue.popleft()
            try:
                url = canonical(url)
            except NotAWebAddress:
                continue
            if url in visited:
                continue
            visited.add(url)
            if not self.scope.same_origin(url):
                self.report.skipped[OFF_SITE] += 1  # a sitemap elsewhere is not asked for
                continue
            if given is not None and url == given.url:
                answer: Answer | None = given
            else:
                visit = self.visit(url, anything)
                answer = visit.answer
                if visit.problem or visit.skipped:
                    if failures is not None:
                        failures.append(f"{url} (a sitemap): {visit.problem or visit.skipped}")
                    continue
            assert answer is not None
            if answer.status != 200 or not looks_like_a_sitemap(answer.body):
                if failures is not None:
                    what = f"the server answered {answer.status}" if answer.status != 200 else "not a sitemap"
                    failures.append(f"{url} (a sitemap): {what}")
                continue
            try:
                sitemap = read_sitemap(answer.body)
            except NotASitemap as problem:
                if failures is not None:
                    failures.append(f"{url} (a sitemap): {problem}")
                continue
            if sitemap.is_index:
                if depth < MAX_SITEMAP_DEPTH:
                    queue.extend((location, depth + 1) for location in sitemap.locations)
                continue
            for location in sitemap.locations:
                page = self.consider(location)
                if page is not None:
                    pages.append(page)
        return pages

    def consider(self, link: str, base: str | None = None) -> str | None:
        """A link met for the first time, if it is to be visited (else counted, once, as skipped)."""
        try:
            url = canonical(link, base)
        except NotAWebAddress:
            return None  # mailto:, javascript:, tel:... are not pages, nor skipped pages
        if url in self.seen:
            return None
        self.seen.add(url)
        skipped = self.outside(url) or (NOT_HTML if looks_like_not_html(url) else None)
        if skipped:
            self.report.skipped[skipped] += 1
            return None
        return url

    def run(self) -> Iterator[Page]:
        first, follow = self.begin()
        frontier = deque(first)
        window: deque[tuple[str, Future[_Visit]]] = deque()
        ahead = self.settings.concurrency * READ_AHEAD
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="import-crawl") as pool:
            try:
                while frontier or window:
                    while frontier and len(window) < ahead and self.report.pages + len(window) < self.settings.max_pages:
                        url = frontier.popleft()
                        early = self.early.pop(url, None)
                        window.append((url, _done(early) if early else pool.submit(self.visit, url)))
                    if not window:
                        break  # --max-pages reached
                    url, pending = window.popleft()
                    page = self.take(pending.result(), frontier if follow else None)
                    if page is not None:
                        yield page
            finally:
                self.fetcher.stop()
                for _, pending in window:
                    pending.cancel()
        self.report.not_fetched = len(frontier)

    def take(self, visit: _Visit, frontier: deque[str] | None) -> Page | None:
        """A visit's outcome counted; its page if it is one to import; its links put on `frontier`."""
        self.report.redirects += visit.redirects
        if visit.problem:
            self.report.failed.append(f"{visit.url}: {visit.problem}")
            return None
        if visit.skipped:
            self.report.skipped[visit.skipped] += 1
            return None
        answer = visit.answer
        assert answer is not None
        if answer.url in self.taken:
            return None  # a redirect to a page already counted, or a page listed twice
        self.taken.add(answer.url)
        self.seen.add(answer.url)
        if answer.status in (404, 410):
            self.report.skipped[NOT_FOUND] += 1
            return None
        if answer.status in (401, 403):
            self.report.skipped[REFUSED] += 1
            return None
        if answer.status != 200:
            self.report.failed.append(f"{visit.url}: the server answered {answer.status}")
            return None
        if not is_html(answer.content_type):
            self.report.skipped[NOT_HTML] += 1
            return None
        try:
            body = as_utf8(answer.body, answer.content_type)
        except UnicodeDecodeError as problem:
            self.report.failed.append(f"{answer.url}: not {problem.encoding} text as its Content-Type says (byte "
                                      f"{problem.start:,} is {answer.body[problem.start]:#04x})")
            return None
        links = page_links(body, answer.url)
        index, follow = robots_directives(answer.robots_tag)
        if frontier is not None and follow and links.follow:
            for link in links.links:
                found = self.consider(link)
                if found is not None:
                    frontier.append(found)
        if not (index and links.index):
            self.report.skipped[NOINDEX] += 1
            return None
        self.report.pages += 1
        self.report.unchanged += visit.how == "unchanged"
        self.report.resumed += visit.how == "resumed"
        return Page(answer.url, answer.content_type, body)


def _done(visit: _Visit) -> Future[_Visit]:
    done: Future[_Visit] = Future()
    done.set_result(visit)
    return done


def crawl(start: str, store: PageStore, settings: CrawlSettings, report: CrawlReport,
          fetcher: Fetcher | None = None) -> Iterator[Page]:
    """The site's pages from `start`, in order (see the module's docstring). Answers go to `store` as
    they come; the store's run is marked finished only when the crawl has gone through."""
    for option, value in (("--crawl-concurrency", settings.concurrency), ("--max-pages", settings.max_pages)):
        if value < 1:
            raise ImporterError(f"{option}: must be at least 1, got {value}")
    if settings.delay < 0:
        raise ImporterError(f"--crawl-delay: must be 0 or more seconds, got {settings.delay:g}")
    try:
        start = canonical(start)
    except NotAWebAddress:
        raise ImporterError(f"{start}: not an http(s) URL") from None
    own = fetcher is None
    fetcher = fetcher or Fetcher(concurrency=settings.concurrency, delay=settings.delay, timeout=settings.timeout,
                                 retries=settings.retries, backoff=settings.backoff)
    report.start, report.max_pages, report.delay = start, settings.max_pages, settings.delay
    started = time.perf_counter()
    try:
        yield from _Crawl(start, store, settings, report, fetcher).run()
        store.finish()
    finally:
        report.requests += fetcher.requests
        report.seconds = time.perf_counter() - started
        store.commit()
        if own:
            fetcher.close()
