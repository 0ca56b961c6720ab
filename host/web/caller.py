"""Small helpers every endpoint shares: the host state, the caller's token, cache headers."""

from __future__ import annotations

from starlette.requests import Request

from host.web.state import HostState


def host_state(request: Request) -> HostState:
    return request.app.state.host


def bearer_token(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


def cache_headers(token: str | None, *, revalidate: bool = False) -> dict[str, str]:
    """A response computed with a token is private: no shared cache or CDN may keep it."""
    policy = "no-cache" if revalidate else "no-store"
    return {"Cache-Control": f"private, {policy}" if token else f"public, {policy}", "Vary": "Authorization"}
