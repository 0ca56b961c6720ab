"""Who is asking: the one place a request's access token is read and turned into a grant.

A token arrives as `Authorization: Bearer <token>` or as the `access_token` argument of a query
body; `""` means none. Never in the URL: URLs are written to load balancers', proxies' and
browsers' logs (RFC 6750 §5.3), so a request carrying a token in its query string is refused
(`url_token_parameter`, asked by the `TokensOutOfURLs` middleware in front of every door) and a
token there is never read. A token that fails verification is a 401 saying why ("renew it"); an
unknown legacy opaque token is anonymous, as in the original host. Every endpoint and the rate
limiter ask here; none reads credentials itself.

A trusted identity provider's token comes in the same way and is verified by the same
`AccessControl.authorize`. Its issuer's keys are fetched off the request's path; the one wait a
request may have is `keys_ready`: for a token naming a key id its issuer's keys lack (the provider
rotated them), or its issuer's first keys, the single bounded fetch (access/issuer_keys.py), awaited
at most KEYS_WAIT_SECONDS on the event loop without blocking it. The `IssuerKeysReady` middleware does
this for a Bearer token before any endpoint reads it; `POST /` for a token in its body.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.datastructures import Headers
from starlette.requests import Request

from access import ANONYMOUS, Grant, TokenRejected
from host.web.access_rules import AccessRules
from host.web.errors import HTTPError
from host.web.state import host_state


@dataclass(frozen=True)
class Caller:
    grant: Grant
    token: str | None  # as presented; decides whether a response may be cached publicly

    @property
    def access_tags(self) -> frozenset[str]:
        return self.grant.access_tags


KEYS_WAIT_SECONDS = 5.0
URL_TOKEN_PARAMETERS = frozenset({"access_token", "token"})  # names clients put tokens under, in any case
URL_TOKEN_REFUSAL = ("an access token in the URL is refused, because URLs end up in proxy, server and browser logs: "
                     "send it in an Authorization: Bearer header (POST / also reads an access_token field in its body), "
                     "and treat this one as exposed")


def bearer_token(headers: Headers) -> str | None:
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


def url_token_parameter(query_string: bytes) -> str | None:
    """The name of a query-string parameter that carries a token (a non-blank `access_token` or
    `token`, in any case, percent-encoded or not), or None."""
    if not query_string:
        return None
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    return next((name for name, value in pairs if name.lower() in URL_TOKEN_PARAMETERS and value.strip()), None)


def presented_token(request: Request, body_token: str | None = None) -> str | None:
    """The token a request carries: a query body's `access_token`, else Bearer (never the URL's)."""
    return body_token or bearer_token(request.headers)


def caller_for(access: AccessRules, token: str | None) -> Caller:
    """The caller behind `token`; raises HTTPError(401) for a token that fails verification."""
    if not token:
        return Caller(ANONYMOUS, None)
    try:
        return Caller(access.authorize(token), token)
    except TokenRejected as rejected:
        raise HTTPError(
            401,
            f"the access token was refused: {rejected.reason}",
            {"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{rejected.reason}"'},
        ) from None


def request_caller(request: Request, body_token: str | None = None) -> Caller:
    return caller_for(host_state(request).access, presented_token(request, body_token))


async def keys_ready(access: AccessRules, token: str | None) -> None:
    """Wait for the fetch of a trusted issuer's keys that `token` needs, if any, at most KEYS_WAIT_SECONDS."""
    pending = access.keys_pending(token) if token else None
    if pending is not None:
        with suppress(TimeoutError):  # then the token is answered with the keys there are
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), KEYS_WAIT_SECONDS)


def verified_subject(access: AccessRules, headers: Headers) -> str | None:
    """Who a request's valid Bearer token belongs to; None for none, an unknown or a refused one.

    For the rate limiter, which runs before the body is read and must never refuse by itself.
    """
    token = bearer_token(headers)
    if not token:
        return None
    try:
        return access.authorize(token).subject
    except TokenRejected:
        return None
