"""Who is asking: the one place a request's access token is read and turned into a grant.

A token arrives as `Authorization: Bearer <token>`, as the `access_token` query parameter, or as
the `access_token` argument of a query body; `""` means none. A token that fails verification is
a 401 saying why ("renew it"); an unknown legacy opaque token is anonymous, as in the original
host. Every endpoint and the rate limiter ask here; none reads credentials itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import Request

from access import ANONYMOUS, AccessControl, Grant, TokenRejected
from host.web.errors import HTTPError
from host.web.state import host_state


@dataclass(frozen=True)
class Caller:
    grant: Grant
    token: str | None  # as presented; decides whether a response may be cached publicly

    @property
    def access_tags(self) -> frozenset[str]:
        return self.grant.access_tags


def bearer_token(headers: Headers) -> str | None:
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


def presented_token(request: Request, body_token: str | None = None) -> str | None:
    """The token a request carries: a query body's `access_token`, else the query string's, else Bearer."""
    return body_token or request.query_params.get("access_token") or bearer_token(request.headers)


def caller_for(access: AccessControl, token: str | None) -> Caller:
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


def verified_subject(access: AccessControl, headers: Headers) -> str | None:
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
