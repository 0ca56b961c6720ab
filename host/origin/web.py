"""A plain HTTP(S) static server as a read-only origin: `https://cdn.example/published/`.

Anything that serves the published folder as files will do (nginx, Caddy, a CDN, object storage's
website endpoint, `python -m http.server`). The standard library is enough for GETs with a timeout,
so the core needs nothing more. The manifest is asked for with `If-None-Match` when the server gave
an ETag (never `If-Modified-Since`: a one-second clock would hide two publishes in one second).

A published set holds private libraries too: such an origin must not be public. When
`POLYMATH_ORIGIN_TOKEN` is set, every request carries `Authorization: Bearer <it>` for the server
(or the CDN's token check) to demand; it is never logged.
"""

from __future__ import annotations

import http.client
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

from host.origin.base import (
    Fetched,
    Listed,
    ObjectMissing,
    Origin,
    OriginError,
    OriginRefused,
    OriginUnreachable,
    Progress,
    Sink,
)

TIMEOUT = 10.0  # seconds for connecting and between two reads: a stall fails one poll, not the replica
TOKEN_VARIABLE = "POLYMATH_ORIGIN_TOKEN"
BLOCK = 1 << 20


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *arguments: object, **options: object) -> None:
        return None  # the 3xx then surfaces as an HTTPError: "the server answered 301"


class WebOrigin(Origin):
    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise OriginRefused(f"{url}: a web origin is http(s)://HOST/PATH")
        if parsed.username or parsed.password:
            raise OriginRefused(f"{parsed.scheme}://{parsed.hostname}/...: no credentials in the URL "
                                f"(set {TOKEN_VARIABLE} for a bearer token)")
        self.base = url.rstrip("/") + "/"
        self.url = url.rstrip("/")
        # Redirects are not followed: they would carry the bearer token to wherever they point.
        self._opener = urllib.request.build_opener(NoRedirects)

    def _request(self, key: str, headers: dict[str, str]) -> urllib.request.Request:
        token = os.environ.get(TOKEN_VARIABLE)
        if token:
            headers = {**headers, "Authorization": f"Bearer {token}"}
        return urllib.request.Request(self.base + key, headers=headers)

    def fetch(self, key: str, *, etag: str | None = None, limit: int) -> Fetched | None:
        headers = {"If-None-Match": etag} if etag else {}
        try:
            with self._opener.open(self._request(key, headers), timeout=TIMEOUT) as answer:
                length = answer.headers.get("Content-Length")
                if length is not None and int(length) > limit:
                    raise OriginUnreachable(f"{self.url}/{key}: {int(length):,} bytes, over the {limit:,} expected")
                body = answer.read(limit + 1)
                if len(body) > limit:
                    raise OriginUnreachable(f"{self.url}/{key}: over the {limit:,} bytes expected")
                if length is not None and len(body) != int(length):
                    raise OriginUnreachable(f"{self.url}/{key}: cut short ({len(body):,} of {int(length):,} bytes)")
                return Fetched(body, answer.headers.get("ETag"))
        except urllib.error.HTTPError as problem:
            if problem.code == 304:
                return None
            raise self._translated(problem, key) from None
        except (OSError, http.client.HTTPException, ValueError) as problem:
            raise self._translated(problem, key) from None

    def download(self, key: str, sink: Sink, progress: Progress | None = None) -> None:
        try:
            with self._opener.open(self._request(key, {}), timeout=TIMEOUT) as answer:
                for block in iter(lambda: answer.read(BLOCK), b""):
                    sink.write(block)
                    if progress:
                        progress(len(block))
        except urllib.error.HTTPError as problem:
            raise self._translated(problem, key) from None
        except OriginError:  # the sink's own refusal
            raise
        except (OSError, http.client.HTTPException, ValueError) as problem:
            raise self._translated(problem, key) from None

    def exists(self, key: str) -> bool:
        raise self._read_only()

    def upload(self, key: str, source: Path, progress: Progress | None = None) -> None:
        raise self._read_only()

    def put(self, key: str, body: bytes) -> None:
        raise self._read_only()

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        raise self._read_only()

    def delete(self, keys: Sequence[str]) -> None:
        raise self._read_only()

    def _read_only(self) -> OriginRefused:
        return OriginRefused(f"{self.url}: a web origin is read-only: publish to the folder or bucket it serves")

    def _translated(self, problem: Exception, key: str) -> Exception:
        where = f"{self.url}/{key}"
        if isinstance(problem, urllib.error.HTTPError):
            if problem.code == 404:
                return ObjectMissing(f"{where}: no such object (404)")
            if problem.code in (401, 403):
                return OriginRefused(f"{where}: refused ({problem.code}): check {TOKEN_VARIABLE} and the server's rules")
            if 300 <= problem.code < 400:
                return OriginRefused(f"{where}: the server redirects ({problem.code}): give the URL it redirects to")
            return OriginUnreachable(f"{where}: the server answered {problem.code}")
        if isinstance(problem, TimeoutError | socket.timeout):
            return OriginUnreachable(f"{where}: no answer within {TIMEOUT:g} s")
        if isinstance(problem, urllib.error.URLError):
            reason = problem.reason
            if isinstance(reason, TimeoutError | socket.timeout):
                return OriginUnreachable(f"{where}: no answer within {TIMEOUT:g} s")
            what = reason.strerror if isinstance(reason, OSError) and reason.strerror else type(reason).__name__
            return OriginUnreachable(f"{where}: cannot connect ({what})")
        if isinstance(problem, OSError) and problem.strerror:
            return OriginUnreachable(f"{where}: the transfer failed ({problem.strerror})")
        return OriginUnreachable(f"{where}: the transfer failed ({type(problem).__name__})")
