"""OpenID Connect Discovery: where an issuer publishes its keys and its endpoints.

`ISSUER/.well-known/openid-configuration` (the issuer without its trailing slash, then the path:
OpenID Connect Discovery 1.0 §4) must name exactly the issuer it was fetched for (§4.3: a document
naming another issuer is refused, `wrong_issuer`, so no one can point this host at keys that are not
the issuer's), and its `jwks_uri` must pass the same URL check as every fetch (HTTPS, or HTTP on
loopback). The page's sign-in also reads the authorization and token endpoints from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .fetching import FetchFailed, fetch_json, url_problem

WELL_KNOWN = "/.well-known/openid-configuration"


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    jwks_uri: str
    authorization_endpoint: str | None
    token_endpoint: str | None
    code_challenge_methods: tuple[str, ...]
    max_age: float | None  # how long the document may be kept, from its Cache-Control


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + WELL_KNOWN


def fetch_metadata(issuer: str) -> ProviderMetadata:
    """The issuer's discovery document, fetched and checked (FetchFailed)."""
    url = discovery_url(issuer)
    fetched = fetch_json(url)
    return parse_metadata(fetched.document, issuer, url, fetched.max_age)


def parse_metadata(document: Any, issuer: str, where: str, max_age: float | None = None) -> ProviderMetadata:
    if not isinstance(document, Mapping):
        raise FetchFailed("bad_document", f"{where}: is not an OpenID provider's configuration (a JSON object)")
    named = document.get("issuer")
    if named != issuer:
        raise FetchFailed("wrong_issuer", f"{where}: names the issuer {named!r:.120}, not {issuer!r:.120}: refused "
                                          "(trust the exact issuer the provider names, trailing slash included)")
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str):
        raise FetchFailed("bad_document", f"{where}: names no jwks_uri (give one: access trust ... --jwks-uri URL)")
    problem = url_problem(jwks_uri)
    if problem:
        raise FetchFailed("insecure_url", f"{where}: its jwks_uri {problem}")
    methods = document.get("code_challenge_methods_supported", [])
    return ProviderMetadata(
        issuer=issuer,
        jwks_uri=jwks_uri,
        authorization_endpoint=_endpoint(document, "authorization_endpoint", where),
        token_endpoint=_endpoint(document, "token_endpoint", where),
        code_challenge_methods=tuple(m for m in methods if isinstance(m, str)) if isinstance(methods, list) else (),
        max_age=max_age,
    )


def _endpoint(document: Mapping[str, Any], name: str, where: str) -> str | None:
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or url_problem(value):
        raise FetchFailed("bad_document", f"{where}: its {name} is not an HTTPS URL")
    return value
