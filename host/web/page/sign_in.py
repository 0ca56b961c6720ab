"""The page's "Sign in": readers sign in at an identity provider and search with its token.

`serve --sign-in ISSUER_URL --sign-in-client CLIENT_ID` makes the page a public OAuth client (OAuth
2.0 for Browser-Based Apps): page.js runs the authorization code flow with PKCE (S256) against the
provider's endpoints, which this module reads from the provider's OpenID discovery document (its
`issuer` checked, as for keys: access/discovery.py), keeps the token in the tab's memory and searches
with it. What the page needs is handed to it as data attributes (`SignInPage`), never as script.

Only the page's Content-Security-Policy changes, and only by what the flow needs: `connect-src` adds
the origin of the provider's token endpoint, where page.js redeems the code. Sending the reader to the
provider is a top-level navigation, which no directive governs.

The discovery document is fetched on a background thread when the app starts, and again (at most
once a minute) while it cannot be had; until then the page has no "Sign in", and says nothing wrong.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from access.discovery import ProviderMetadata, fetch_metadata
from access.fetching import FetchFailed, url_problem

log = logging.getLogger("polymath_host")

RETRY_SECONDS = 60.0
TokenKind = Literal["access", "id"]
# What page.js sets itself: a parameter of these names in --sign-in-parameters would break the flow.
RESERVED_PARAMETERS = frozenset({"response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge",
                                 "code_challenge_method", "nonce", "response_mode"})


@dataclass(frozen=True)
class SignInConfig:
    issuer: str
    client_id: str
    scope: str
    parameters: tuple[tuple[str, str], ...]
    token: TokenKind


@dataclass(frozen=True)
class SignInPage:
    """What page.js is given: where to send the reader, where to redeem the code, what to ask for."""

    issuer: str
    client_id: str
    authorization_endpoint: str
    token_endpoint: str
    scope: str
    parameters: str  # extra authorization parameters, as a query string
    token: TokenKind

    @property
    def connect_origin(self) -> str:
        parts = urlsplit(self.token_endpoint)
        return f"{parts.scheme}://{parts.netloc}"


def sign_in_config(issuer: str | None, client_id: str | None, scope: str, parameters: str | None,
                   token: str) -> SignInConfig | None:
    """The sign-in `serve` was asked for (None: none); ValueError naming the option that is wrong."""
    if issuer is None and client_id is None:
        return None
    if issuer is None or client_id is None:
        raise ValueError("--sign-in ISSUER_URL and --sign-in-client CLIENT_ID go together")
    problem = url_problem(issuer)
    if problem:
        raise ValueError(f"--sign-in: {problem}")
    if not client_id.strip():
        raise ValueError("--sign-in-client: must not be empty")
    scopes = scope.split()
    if "openid" not in scopes:
        raise ValueError(f"--sign-in-scope {scope!r}: must include openid (the page signs readers in with OpenID Connect)")
    try:
        pairs = tuple(parse_qsl(parameters or "", keep_blank_values=False, strict_parsing=bool(parameters)))
    except ValueError:
        raise ValueError(f"--sign-in-parameters {parameters!r}: give them as a query string, e.g. "
                         "audience=https://library.example.com") from None
    reserved = sorted({name for name, _ in pairs} & RESERVED_PARAMETERS)
    if reserved:
        raise ValueError(f"--sign-in-parameters: {', '.join(reserved)} is set by the page itself")
    if token not in ("access", "id"):
        raise ValueError(f"--sign-in-token {token!r}: access or id")
    kind: TokenKind = "id" if token == "id" else "access"
    return SignInConfig(issuer, client_id, " ".join(scopes), pairs, kind)


class SignIn:
    """One process's sign-in: the config, and the provider's endpoints once its discovery document is had."""

    def __init__(self, config: SignInConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._metadata: ProviderMetadata | None = None
        self._problem: str | None = None
        self._last_attempt = -RETRY_SECONDS
        self._fetching = False
        self._start()

    def page(self) -> SignInPage | None:
        """What the page needs to sign a reader in, or None while the provider's endpoints are unknown."""
        metadata = self._metadata
        if metadata is None:
            self._start()
            return None
        assert metadata.authorization_endpoint is not None and metadata.token_endpoint is not None
        return SignInPage(self.config.issuer, self.config.client_id, metadata.authorization_endpoint,
                          metadata.token_endpoint, self.config.scope, urlencode(self.config.parameters),
                          self.config.token)

    def _start(self) -> None:
        with self._lock:
            if self._fetching or time.monotonic() - self._last_attempt < RETRY_SECONDS:
                return
            self._fetching, self._last_attempt = True, time.monotonic()
        threading.Thread(target=self._fetch, name="sign-in-discovery", daemon=True).start()

    def _fetch(self) -> None:
        try:
            metadata = fetch_metadata(self.config.issuer)
            if metadata.authorization_endpoint is None or metadata.token_endpoint is None:
                raise FetchFailed("bad_document", f"{self.config.issuer}: its discovery document names no "
                                                  "authorization_endpoint or token_endpoint")
            if metadata.code_challenge_methods and "S256" not in metadata.code_challenge_methods:
                raise FetchFailed("bad_document", f"{self.config.issuer}: does not support PKCE with S256")
        except FetchFailed as failed:
            if str(failed) != self._problem:
                log.error("sign-in: the page shows no 'Sign in' until the provider's endpoints can be read: %s", failed)
            self._problem = str(failed)
        else:
            self._metadata = metadata
            if self._problem is not None:
                log.warning("sign-in: the provider's endpoints are read again; the page shows 'Sign in'")
            self._problem = None
        finally:
            with self._lock:
                self._fetching = False
