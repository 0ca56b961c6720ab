"""Fetching a small JSON document from an identity provider, bounded in every way a provider can fail.

Used for OpenID discovery documents and key sets only. What a provider can do wrong, and what it
costs here:

- a URL that is not HTTPS: refused before connecting (`insecure_url`), except plain HTTP to a
  loopback address (a provider on the same machine, as in tests); a redirect is followed (at most
  three) only to a URL that passes the same check;
- unreachable, refused, a TLS failure, an answer that is not HTTP or breaks off: `unreachable`; a
  status other than 200: `http_status`;
- slow: each read waits at most `READ_TIMEOUT`, and the whole fetch stops at its deadline
  (`timeout`) however slowly the bytes drip;
- large: a declared `Content-Length` over the limit is refused before reading, and reading stops
  one byte past the limit (`too_large`): 50 MB costs a 1 MiB buffer;
- not JSON (HTML, garbage, NaN, duplicate keys): `not_json`.

Every failure is a `FetchFailed` with its reason (a metric label) and one line naming the URL,
never the body. Plain HTTP to loopback never goes through a proxy; other fetches follow the usual
`HTTPS_PROXY`/`NO_PROXY` variables.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any
from urllib.parse import urlsplit

LIMIT_BYTES = 1 << 20  # a provider's key set is a few KB; its discovery document a few more
DEADLINE_SECONDS = 10.0
READ_TIMEOUT = 5.0
MAX_REDIRECTS = 3
REASONS = ("insecure_url", "unreachable", "timeout", "http_status", "too_large", "not_json", "bad_document",
           "wrong_issuer")
_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?([0-9]{1,10})")
_USER_AGENT = "polymath-host (identity provider keys)"


class FetchFailed(Exception):
    """A fetch that failed; `reason` is one of REASONS, the message one line naming the URL."""

    def __init__(self, reason: str, message: str) -> None:
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Fetched:
    document: Any  # decoded JSON
    max_age: float | None  # from Cache-Control: max-age (0 for no-store/no-cache), None when not said


def url_problem(url: str) -> str | None:
    """What makes `url` unfit to fetch keys from, or None: HTTPS, or plain HTTP to a loopback address."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        return f"{url!r:.200} is not a URL"
    if not host:
        return f"{url!r:.200} is not a URL with a host"
    if parts.username or parts.password:
        return f"{url!r:.200} holds a user name or password"
    if parts.scheme == "https":
        return None
    if parts.scheme == "http" and is_loopback(host):
        return None
    return f"{url!r:.200} is not HTTPS (plain HTTP is allowed only to a loopback address such as 127.0.0.1)"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fetch_json(url: str, *, limit: int = LIMIT_BYTES, deadline: float = DEADLINE_SECONDS) -> Fetched:
    """GET `url` and decode it as strict JSON within `limit` bytes and `deadline` seconds (FetchFailed)."""
    problem = url_problem(url)
    if problem:
        raise FetchFailed("insecure_url", problem)
    ends = time.monotonic() + deadline
    request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": _USER_AGENT})
    opener = _opener(url)
    try:
        with opener.open(request, timeout=min(READ_TIMEOUT, deadline)) as response:
            if response.status != 200:
                raise FetchFailed("http_status", f"{url}: answered {response.status}, not 200")
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise FetchFailed("too_large", f"{url}: answered {int(declared):,} bytes (at most {limit:,} are read)")
            body = _read_within(response, url, limit, ends)
            max_age = _max_age(response.headers)
    except FetchFailed:
        raise
    except urllib.error.HTTPError as error:
        raise FetchFailed("http_status", f"{url}: answered {error.code}, not 200") from None
    except TimeoutError:
        raise FetchFailed("timeout", f"{url}: no answer within {READ_TIMEOUT:g} s") from None
    except http.client.HTTPException as error:  # not HTTP at all, a body cut short, a flood of headers
        raise FetchFailed("unreachable", f"{url}: did not answer as an HTTP server does "
                                         f"({type(error).__name__})") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError | socket.timeout):
            raise FetchFailed("timeout", f"{url}: no answer within {READ_TIMEOUT:g} s") from None
        raise FetchFailed("unreachable", f"{url}: cannot be reached ({str(reason)[:120]})") from None
    try:
        document = json.loads(body, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except (ValueError, _Refused, RecursionError):
        raise FetchFailed("not_json", f"{url}: did not answer JSON ({_what(body)})") from None
    return Fetched(document, max_age)


def _read_within(response: Any, url: str, limit: int, ends: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > ends:
            raise FetchFailed("timeout", f"{url}: still sending after the {DEADLINE_SECONDS:g} s deadline")
        chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise FetchFailed("too_large", f"{url}: answered more than {limit:,} bytes")
        chunks.append(chunk)


def _max_age(headers: Message) -> float | None:
    control = ",".join(headers.get_all("Cache-Control") or []).lower()
    if not control:
        return None
    if "no-store" in control or "no-cache" in control:
        return 0.0
    match = _MAX_AGE.search(control)
    return float(match[1]) if match else None


def _what(body: bytes) -> str:
    start = body[:200].lstrip().lower()
    if start.startswith((b"<!doctype", b"<html", b"<")):
        return "an HTML or XML page"
    if not body.strip():
        return "an empty body"
    return f"{len(body):,} bytes that are not JSON"


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        problem = url_problem(newurl)
        if problem is None and urlsplit(newurl).scheme != urlsplit(req.full_url).scheme:
            problem = f"{newurl!r:.200}, leaving HTTPS for plain HTTP"
        if problem:
            raise FetchFailed("insecure_url", f"{req.full_url}: redirects to {problem}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(url: str) -> urllib.request.OpenerDirector:
    handlers: list[urllib.request.BaseHandler] = [_CheckedRedirects()]
    if urlsplit(url).scheme == "http":  # loopback only (url_problem): never through a proxy
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


class _Refused(Exception):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(key)
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise _Refused(name)
