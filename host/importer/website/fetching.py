"""Asking a website for one URL, politely: a few requests at once, a pause between them, retries.

The client is httpx (part of the `import` extra): one pool of kept-alive connections shared by
the crawl's threads, so an HTTPS site costs one TLS handshake per connection rather than per page
(the standard library's urllib opens a connection per request), with timeouts for connecting and
between reads, and gzip/deflate bodies decoded. Redirects are not followed here: the crawler
follows them itself, hop by hop, so that none leaves the site.

Politeness: every request, retries included, waits for its turn, so that two requests' starts are
at least `delay` seconds apart whatever `concurrency` (the pool's size) allows at once. A request
that meets a connection error, a timeout, a 429 or a 5xx is tried again `retries` times, after
`backoff`, 2 x `backoff`... seconds, or the Retry-After the server gave (up to a minute).

A body is read only for a 200 whose Content-Type the caller wants (a page's HTML, not an image's
bytes), and only up to `max_bytes`. What cannot be fetched is a `FetchFailed` with a one-line
reason; `stop()` wakes every waiting request and makes it a `FetchStopped`.
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from host.importer.errors import require

USER_AGENT = "polymath-host-import/0.1 (a publisher importing their writing; robots.txt honoured)"
ROBOTS_AGENT = "polymath-host"  # the token robots.txt groups are matched against
DEFAULT_TIMEOUT = 20.0
DEFAULT_MAX_BYTES = 10 << 20
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
LONGEST_RETRY_AFTER = 60.0


class FetchFailed(Exception):
    """This URL could not be fetched; the message is one line, without the URL."""


class FetchStopped(Exception):
    """The crawl is stopping (Ctrl-C, or an error elsewhere): this request was not sent."""


@dataclass(frozen=True)
class Answer:
    """A server's answer to one request. `body` is empty unless it was read (see `Fetcher.get`)."""

    url: str
    status: int
    content_type: str = ""
    body: bytes = b""
    location: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    robots_tag: str = ""  # X-Robots-Tag


def anything(content_type: str) -> bool:
    return True


class Fetcher:
    def __init__(self, *, concurrency: int, delay: float, timeout: float = DEFAULT_TIMEOUT, retries: int = 2,
                 backoff: float = 1.0, max_bytes: int = DEFAULT_MAX_BYTES, user_agent: str = USER_AGENT) -> None:
        httpx = require("httpx", "importing a website")
        self._httpx: Any = httpx
        self._client: Any = httpx.Client(
            headers={"User-Agent": user_agent, "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.5"},
            timeout=httpx.Timeout(timeout), follow_redirects=False,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self.delay = delay
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_bytes = max_bytes
        self.requests = 0  # requests sent, retries included
        self._turn_lock = threading.Lock()
        self._next_turn = 0.0
        self._stopped = threading.Event()

    def get(self, url: str, *, etag: str | None = None, last_modified: str | None = None,
            want: Callable[[str], bool] = anything) -> Answer:
        """One GET of `url`, conditional on the validators given; its body read when it is a 200 `want`s."""
        headers = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            self._wait_turn()
            try:
                answer, retry_after = self._once(url, headers, want)
            except self._httpx.RequestError as problem:
                if last or isinstance(problem, self._httpx.DecodingError):
                    raise FetchFailed(_transport_problem(problem, self.timeout)) from None
                self._pause(self.backoff * 2 ** attempt)
                continue
            if answer.status in RETRIED_STATUSES and not last:
                self._pause(retry_after if retry_after is not None else self.backoff * 2 ** attempt)
                continue
            return answer
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _once(self, url: str, headers: dict[str, str], want: Callable[[str], bool]) -> tuple[Answer, float | None]:
        with self._client.stream("GET", url, headers=headers) as response:
            found = response.headers
            content_type = found.get("Content-Type", "")
            body = b""
            if response.status_code == 200 and want(content_type):
                declared = found.get("Content-Length")
                if declared and declared.isdigit() and int(declared) > self.max_bytes:
                    raise FetchFailed(f"{int(declared):,} bytes, over the {self.max_bytes:,} a page may have")
                parts: list[bytes] = []
                size = 0
                for part in response.iter_bytes():
                    size += len(part)
                    if size > self.max_bytes:
                        raise FetchFailed(f"over the {self.max_bytes:,} bytes a page may have")
                    parts.append(part)
                body = b"".join(parts)
            answer = Answer(url, response.status_code, content_type, body, found.get("Location"), found.get("ETag"),
                            found.get("Last-Modified"), found.get("X-Robots-Tag", ""))
            return answer, _retry_after(found.get("Retry-After"))

    def _wait_turn(self) -> None:
        """Wait until `delay` seconds after the previous request's turn (raise FetchStopped if stopped meanwhile)."""
        with self._turn_lock:
            now = time.monotonic()
            turn = max(now, self._next_turn)
            self._next_turn = turn + self.delay
            self.requests += 1
        self._pause(turn - now)

    def _pause(self, seconds: float) -> None:
        if self._stopped.wait(max(0.0, min(seconds, LONGEST_RETRY_AFTER))) or self._stopped.is_set():
            raise FetchStopped()

    def stop(self) -> None:
        self._stopped.set()

    def close(self) -> None:
        self._stopped.set()
        self._client.close()


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (a number of seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _transport_problem(problem: Exception, timeout: float) -> str:
    name = type(problem).__name__
    if "Timeout" in name:
        return f"no answer within {timeout:g} s"
    if name == "DecodingError":
        return f"its compressed body is damaged ({' '.join(str(problem).split())})"
    said = " ".join(str(problem).split()) or name
    return f"cannot connect or read ({said})"
