"""Issuing and verifying the host's JWTs, the careful way (RFC 8725).

Claims of an issued token: ``iss`` and ``aud`` (both the configured issuer), ``sub``,
``access_tags``, ``iat``, ``jti`` and either ``exp`` or ``"exp_never": true``.

Non-expiring tokens: ``token issue --expires never`` leaves out ``exp`` and sets the claim
``exp_never: true`` instead. Verification requires ``exp`` unless that claim is exactly
``true``. The claim is inside the signed payload, so only a holder of a signing key can
make one; it exists so that a token which merely *lacks* ``exp`` (made by some other tool,
or by mistake) is refused rather than silently living forever. A token carrying both is
malformed. Non-expiring tokens are still ended by ``token revoke``.

Verification reads the unverified header only for ``kid``, finds that key, and decodes with
``algorithms=[that key's alg]``: the header never chooses the algorithm, ``none`` is never
accepted, and one decode call never mixes symmetric and asymmetric algorithms.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import jwt

from .config import AccessSettings, IssuedRecord
from .errors import AccessConfigError, TokenRejected
from .tags import check_tag

LEEWAY_SECONDS = 30
NEVER_EXPIRES_CLAIM = "exp_never"
REQUIRED_CLAIMS = ("iss", "aud", "sub", "iat", "jti")
# Our tokens are a few hundred bytes; refusing huge ones early bounds the work a caller can cause.
MAX_TOKEN_LENGTH = 8192

# Three dot-separated base64url segments; the signature may be empty (as in alg=none tokens),
# so those are treated as JWTs and refused rather than passed off as unknown opaque tokens.
_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


@dataclass(frozen=True)
class IssuedToken:
    token: str
    record: IssuedRecord


@dataclass(frozen=True)
class VerifiedToken:
    subject: str
    access_tags: frozenset[str]
    jti: str
    expires_at: int | None


def looks_like_jwt(token: str) -> bool:
    return _JWT_SHAPE.fullmatch(token) is not None


def issue_token(
    settings: AccessSettings,
    subject: str,
    access_tags: Iterable[str] = (),
    expires_in: int | None = 30 * 24 * 3600,
    now: int | None = None,
) -> IssuedToken:
    """Sign a token for ``subject`` with the newest key; ``expires_in=None`` never expires.

    Empty ``access_tags`` become ``[default_private_access_tag]``, written out in the token
    so that the token itself says what it grants.
    """
    if not isinstance(subject, str) or not subject.strip():
        raise ValueError("the subject must be a non-empty string")
    tags = tuple(dict.fromkeys(access_tags)) or (settings.default_private_access_tag,)
    for tag in tags:
        problem = check_tag(tag)
        if problem:
            raise ValueError(f"access tag {problem}")
    if expires_in is not None and expires_in <= 0:
        raise ValueError("the lifetime must be positive")
    key = settings.newest_key
    if key is None:
        raise AccessConfigError(f"{settings.source}: keys: no key to sign with (run `access rotate`)")
    if key.sign_key is None:
        raise AccessConfigError(
            f"{settings.source}: keys[{len(settings.keys) - 1}]: key {key.kid!r} has no private_key, "
            "so tokens cannot be issued here"
        )
    issued_at = int(time.time()) if now is None else now
    expires_at = None if expires_in is None else issued_at + expires_in
    claims: dict[str, Any] = {
        "iss": settings.issuer,
        "aud": settings.issuer,
        "sub": subject,
        "access_tags": list(tags),
        "iat": issued_at,
        # 128 random bits as hex: unlike base64url it never starts with "-", which
        # `token revoke JTI` would otherwise take for an option.
        "jti": secrets.token_hex(16),
    }
    if expires_at is None:
        claims[NEVER_EXPIRES_CLAIM] = True
    else:
        claims["exp"] = expires_at
    token = jwt.encode(claims, key.sign_key, algorithm=key.alg, headers={"kid": key.kid})
    record = IssuedRecord(claims["jti"], subject, tags, issued_at, expires_at, key.kid)
    return IssuedToken(token, record)


def verify_token(settings: AccessSettings, token: str) -> VerifiedToken:
    """Check a JWT against the settings; raise TokenRejected with a short reason."""
    if len(token) > MAX_TOKEN_LENGTH or not looks_like_jwt(token):
        raise TokenRejected("malformed token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise TokenRejected("malformed token") from None
    kid = header.get("kid")
    if not isinstance(kid, str):
        raise TokenRejected("missing key id")
    key = settings.key(kid)
    if key is None:
        raise TokenRejected("unknown key id")
    # PyJWT would refuse this too; checking first gives a clearer reason.
    if header.get("alg") != key.alg:
        raise TokenRejected("wrong algorithm")
    try:
        claims = jwt.decode(
            token,
            key.verify_key,
            algorithms=[key.alg],
            audience=settings.issuer,
            issuer=settings.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": list(REQUIRED_CLAIMS), "strict_aud": True},
        )
    except jwt.PyJWTError as error:
        raise TokenRejected(rejection_reason(error)) from None
    return _check_claims(settings, claims)


def _check_claims(settings: AccessSettings, claims: dict[str, Any]) -> VerifiedToken:
    subject, jti = claims["sub"], claims["jti"]
    if not subject or not jti:  # PyJWT has checked that both are strings
        raise TokenRejected("malformed token")
    never = claims.get(NEVER_EXPIRES_CLAIM)
    if "exp" in claims:
        if never is not None:
            raise TokenRejected("malformed token")
        expires_at: int | None = int(claims["exp"])
    elif never is True:
        expires_at = None
    else:
        raise TokenRejected("missing claim: exp")
    tags = claims.get("access_tags")
    if tags is None:
        raise TokenRejected("missing claim: access_tags")
    if not isinstance(tags, list) or any(check_tag(tag) for tag in tags):
        raise TokenRejected("malformed token")
    if jti in settings.revoked or subject in settings.revoked:
        raise TokenRejected("revoked")
    granted = frozenset(tags) or frozenset([settings.default_private_access_tag])
    return VerifiedToken(subject, granted, jti, expires_at)


def rejection_reason(error: jwt.PyJWTError) -> str:
    # Order matters: InvalidSignatureError is a DecodeError, and so on.
    if isinstance(error, jwt.ExpiredSignatureError):
        return "expired"
    if isinstance(error, jwt.InvalidSignatureError):
        return "bad signature"
    if isinstance(error, jwt.InvalidAudienceError):
        return "wrong audience"
    if isinstance(error, jwt.InvalidIssuerError):
        return "wrong issuer"
    if isinstance(error, jwt.MissingRequiredClaimError):
        return f"missing claim: {error.claim}"
    if isinstance(error, jwt.ImmatureSignatureError):
        return "not yet valid"
    if isinstance(error, jwt.InvalidAlgorithmError):
        return "wrong algorithm"
    return "malformed token"
