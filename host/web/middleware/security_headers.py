"""Headers that keep a browser on the safe side of every response the host sends.

- `Content-Security-Policy`: the page loads only its own script, style sheet and icon, from this
  host; no inline script or style, no plugins, no frames of it, forms only to this host. The host
  never serves anything that needs more, so one policy covers every response (a JSON answer or a
  map opened on its own is a document too). The one exception is the page itself when it signs
  readers in (`serve --sign-in`): its script may also connect to the provider's token endpoint.
- `X-Content-Type-Options: nosniff`: a JSON answer is never run as a script nor a bit's text as
  a style sheet, whatever it holds.
- `Referrer-Policy: no-referrer`: following a bit's link never tells its site what was searched
  (the page's URL holds the search).
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def content_security_policy(connect: tuple[str, ...] = ()) -> str:
    """The policy, with `connect` origins beside this host's for the page's script: the one widening there is
    (the page signing readers in redeems a code at its provider's token endpoint: host/web/page/sign_in.py)."""
    sources = " ".join(("'self'", *connect))
    return ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            f"connect-src {sources}; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


CONTENT_SECURITY_POLICY = content_security_policy()
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """Add SECURITY_HEADERS to every HTTP response that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
