"""`token explain`: what the host makes of a token, in words, without ever showing the token.

For the host's own tokens, legacy opaque tokens and trusted identity providers' tokens alike: who
issued it and whether that issuer is trusted (and where its keys come from), its key id and
algorithm, subject and expiry, whether it verifies now and, if not, the reason a request would get,
and which grant rules match its claims and the tags they grant. A provider's keys are fetched now,
as a host would (access/issuer_keys.py), unless the file gives them.

`explain(settings, token)` returns the lines and whether the token verifies; it prints nothing.
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .claim_rules import granted_by
from .config import AccessSettings, token_digest
from .errors import TokenRejected
from .fetching import FetchFailed
from .issuer_keys import fetch_key_set
from .issuers import TrustedIssuer
from .jwks import JwksRefused, KeySet
from .provider_tokens import unverified_claims, unverified_header, verify_provider_token
from .tokens import looks_like_jwt, verify_token


@dataclass(frozen=True)
class Explanation:
    lines: tuple[str, ...]
    verifies: bool


def explain(settings: AccessSettings, token: str, now: float | None = None) -> Explanation:
    now = time.time() if now is None else now
    token = token.strip()
    if not token:
        return Explanation(("no token: a request without one sees public bits only",), False)
    lines = [f"token: {len(token):,} characters (not shown)"]
    legacy = _legacy(settings, token)
    if legacy is not None:
        return _explain_legacy(settings, legacy, lines)
    if not looks_like_jwt(token):
        lines.append("kind: neither a JWT nor a legacy token of this file: a request with it sees public bits "
                     "only, as with no token")
        return Explanation(tuple(lines), False)
    try:
        header = unverified_header(token)
    except TokenRejected as rejected:
        lines.append(f"verifies now: no: {rejected.reason}")
        return Explanation(tuple(lines), False)
    claims = unverified_claims(token) or {}
    issuer = claims.get("iss")
    trusted = settings.trusted_issuer(issuer) if isinstance(issuer, str) else None
    lines.append(f"key: kid {_shown(header.get('kid'))}, algorithm {_shown(header.get('alg'))}")
    lines += _times(claims, now)
    if trusted is not None:
        return _explain_provider(settings, trusted, token, claims, lines)
    return _explain_own(settings, token, issuer, lines)


def _explain_own(settings: AccessSettings, token: str, issuer: Any, lines: list[str]) -> Explanation:
    if issuer == settings.issuer:
        lines.insert(1, f"issuer: {settings.issuer} (this file's own: a token issued by polymath-host token issue)")
    else:
        trusted = ", ".join(t.issuer for t in settings.trusted_issuers) or "none"
        lines.insert(1, f"issuer: {_shown(issuer)}: neither this file's own ({settings.issuer}) nor a trusted one "
                        f"(trusted: {trusted}); a request with it is refused")
    try:
        verified = verify_token(settings, token)
    except TokenRejected as rejected:
        lines.append(f"verifies now: no: {rejected.reason}")
        return Explanation(tuple(lines), False)
    lines += [f"subject: {_shown(verified.subject)}", f"jti: {_shown(verified.jti)}", "verifies now: yes",
              f"grants: {', '.join(sorted(verified.access_tags))}"]
    return Explanation(tuple(lines), True)


def _explain_provider(settings: AccessSettings, trusted: TrustedIssuer, token: str, claims: dict[str, Any],
                      lines: list[str]) -> Explanation:
    lines.insert(1, f"issuer: {trusted.issuer} (trusted by this file; keys {trusted.keys_source})")
    lines.append(f"subject: {_shown(claims.get('sub'))}")
    lines.append(f"audience: {_shown(claims.get('aud'))} (this file wants {trusted.audience})")
    keys, problem = _keys(trusted)
    if problem:
        lines.append(f"keys: {problem}")
    tags, matched = granted_by(trusted.grants, claims)
    rules = "; ".join(rule.text for rule in matched) or "none"
    try:
        verified = verify_provider_token(trusted, keys, token, settings.revoked)
    except TokenRejected as rejected:
        lines.append(f"verifies now: no: {rejected.reason}")
        lines.append(f"rules its claims match: {rules} (they would grant: {', '.join(sorted(tags)) or 'no tag'})")
        return Explanation(tuple(lines), False)
    lines.append("verifies now: yes")
    lines.append(f"rules matched: {rules}")
    lines.append("grants: " + (", ".join(sorted(verified.access_tags)) or
                               "no tag (a valid token no rule matches sees public bits only)"))
    return Explanation(tuple(lines), True)


def _keys(trusted: TrustedIssuer) -> tuple[KeySet | None, str | None]:
    if trusted.jwks is not None:
        return trusted.jwks, None
    try:
        fetched = fetch_key_set(trusted.issuer, trusted.jwks_uri)
    except (FetchFailed, JwksRefused) as problem:
        return None, f"cannot be fetched now ({problem})"
    return fetched.keys, None


def _explain_legacy(settings: AccessSettings, name: str, lines: list[str]) -> Explanation:
    entry = next(t for t in settings.legacy_tokens if t.name == name)
    lines.append(f"kind: the legacy opaque token {name!r} of this file")
    if name in settings.revoked:
        lines.append("verifies now: no: revoked")
        return Explanation(tuple(lines), False)
    lines += ["verifies now: yes", f"grants: {', '.join(sorted(entry.access_tags)) or 'no tag'}"]
    return Explanation(tuple(lines), True)


def _legacy(settings: AccessSettings, token: str) -> str | None:
    digest = token_digest(token)
    found = None
    for legacy in settings.legacy_tokens:
        if hmac.compare_digest(digest, legacy.digest):
            found = legacy.name
    return found


def _times(claims: dict[str, Any], now: float) -> list[str]:
    lines = []
    for name, label in (("iat", "issued"), ("nbf", "valid from"), ("exp", "expires")):
        value = claims.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            lines.append(f"{label}: {_when(value)} ({_relative(value - now)})")
    if "exp" not in claims:
        lines.append("expires: never" if claims.get("exp_never") is True else "expires: (no exp claim)")
    return lines


def _when(timestamp: float) -> str:
    try:
        return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{timestamp!r:.20}"


def _relative(seconds: float) -> str:
    amount = abs(seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if amount >= size:
            text = f"{amount / size:.0f} {unit}"
            break
    else:
        text = f"{amount:.0f} s"
    return f"in {text}" if seconds >= 0 else f"{text} ago"


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    text = value if isinstance(value, str) else repr(value)
    if any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in text):  # nothing a terminal would act on
        text = repr(text)
    return text if len(text) <= 120 else text[:117] + "..."
