"""Verifying an identity provider's token, as RFC 8725 and OpenID Connect say.

In order, each failure a `TokenRejected` with a short reason (the same words as the host's own tokens):

1. at most MAX_TOKEN_LENGTH characters, three base64url segments (`malformed token`); no `crit`
   header (none is understood here); a `typ`, if any, of an access or ID token (`JWT`, `at+jwt`),
   so no other kind of JWT (a logout token, a DPoP proof) passes for one (`wrong token type`);
2. the header's `alg` is on the issuer's allow-list (`wrong algorithm`: `none` and HMAC never are),
   and its `kid` selects a key of the issuer's set whose type fits that algorithm (`unknown key id`,
   `missing key id`, `wrong algorithm`): the header never chooses a key's algorithm, and the key is
   a public key object, never an HMAC secret. `jku`, `x5u` and `jwk` headers are never followed;
3. PyJWT checks the signature with `algorithms=[alg]`, `iss` exactly, `aud` holding the audience,
   `exp` required, `nbf`/`iat` with the host's leeway;
4. `sub` is a non-empty string; the access file's `revoked` names neither the `jti` nor the `sub`.

Then the grant rules turn its claims into tags. A valid token that matches no rule is a caller
without tags: public bits only, as anyone.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import jwt

from .claim_rules import GrantRule, granted_by
from .errors import TokenRejected
from .issuers import TrustedIssuer
from .jwks import KeySet, PublicJwk
from .tokens import LEEWAY_SECONDS, looks_like_jwt, rejection_reason

MAX_TOKEN_LENGTH = 16384  # providers' tokens with many groups run to several KB; the host's own stay under 8 KiB
ACCEPTED_TYPES = frozenset({"jwt", "at+jwt", "application/at+jwt"})
REQUIRED_CLAIMS = ("iss", "aud", "exp", "sub")


@dataclass(frozen=True)
class ProviderVerified:
    issuer: str
    subject: str
    jti: str | None
    expires_at: int
    access_tags: frozenset[str]
    matched: tuple[GrantRule, ...]
    key: PublicJwk  # the key that verified it: a cached verification lasts while the issuer's keys hold it


def unverified_claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT-shaped token, NOT verified (None if it is not a JSON object): only to pick the verifier."""
    return _segment(token, 1)


def unverified_issuer(token: str) -> str | None:
    claims = unverified_claims(token)
    issuer = claims.get("iss") if claims else None
    return issuer if isinstance(issuer, str) else None


def unverified_header(token: str) -> dict[str, Any]:
    """The token's header (TokenRejected `malformed token` if it is not one), NOT verified."""
    header = _segment(token, 0)
    if header is None:
        raise TokenRejected("malformed token")
    return header


def _segment(token: str, index: int) -> dict[str, Any] | None:
    # looks_like_jwt has checked the alphabet of every segment, so this decodes without PyJWT's per-character
    # check again (a tenth of a millisecond for a token of a few hundred bytes).
    if len(token) > MAX_TOKEN_LENGTH or not looks_like_jwt(token):
        return None
    segment = token.split(".", 2)[index]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return None
    return decoded if isinstance(decoded, dict) else None


def checked_algorithm(trusted: TrustedIssuer, header: dict[str, Any]) -> str:
    """The token's algorithm, if the issuer allows it and nothing else in the header is amiss (else TokenRejected)."""
    if "crit" in header:
        raise TokenRejected("malformed token")
    kind = header.get("typ")
    if kind is not None and (not isinstance(kind, str) or kind.lower() not in ACCEPTED_TYPES):
        raise TokenRejected("wrong token type")
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in trusted.algorithms:
        raise TokenRejected("wrong algorithm")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise TokenRejected("malformed token")
    return alg


def select_key(trusted: TrustedIssuer, keys: KeySet, header: dict[str, Any]) -> tuple[PublicJwk, str]:
    """The key and algorithm a token's header asks for, if the issuer allows them (else TokenRejected)."""
    alg = checked_algorithm(trusted, header)
    found = keys.select(header.get("kid"), alg)
    if isinstance(found, str):
        raise TokenRejected(found)
    return found, alg


def verify_provider_token(trusted: TrustedIssuer, keys: KeySet | None, token: str,
                          revoked: frozenset[str] = frozenset()) -> ProviderVerified:
    """Check a token of `trusted` against its keys (None: none fetched yet); TokenRejected with a short reason."""
    header = unverified_header(token)
    if keys is None:
        checked_algorithm(trusted, header)
        raise TokenRejected("issuer keys unavailable")
    key, alg = select_key(trusted, keys, header)
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=[alg],
            audience=trusted.audience,
            issuer=trusted.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": list(REQUIRED_CLAIMS)},
        )
    except jwt.PyJWTError as error:
        raise TokenRejected(rejection_reason(error)) from None
    subject, jti = claims["sub"], claims.get("jti")
    if not isinstance(subject, str) or not subject:
        raise TokenRejected("malformed token")
    if jti is not None and not isinstance(jti, str):
        raise TokenRejected("malformed token")
    if subject in revoked or (jti and jti in revoked):
        raise TokenRejected("revoked")
    tags, matched = granted_by(trusted.grants, claims)
    return ProviderVerified(trusted.issuer, subject, jti or None, int(claims["exp"]), tags, matched, key)

