"""Trusted identity providers: the `trusted_issuers` of an access file, read as strictly as the rest.

    "trusted_issuers": [
      {
        "issuer": "https://example.eu.auth0.com/",        # the tokens' `iss`, exactly
        "audience": "https://library.example.com",         # `aud` must hold it
        "jwks_uri": "https://.../jwks.json",               # optional; without it and `jwks`: OpenID discovery
        "jwks": {"keys": [...]},                           # optional: keys given here, never fetched
        "algorithms": ["RS256"],                           # asymmetric only, never none or HMAC
        "grants": [{"claim": "groups", "value": "members", "tags": ["members"]}],
        "last_good_keys_seconds": 86400                    # optional: how long keys outlive a failing provider
      }
    ]

Each entry belongs to the access file it is in: its grants give tags within what that file governs.
An issuer is trusted once per file, and never the file's own `issuer` (the host's own tokens keep
their own rules). A `jwks` given in the file (from `access trust --jwks-file`, or embedded in an
edge edition by `publish --issuer-keys embed`) is used as it is; `jwks_uri` beside it then only says
where the keys came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .claim_rules import GrantRule, rule_from_json
from .discovery import discovery_url
from .errors import AccessConfigError
from .fetching import url_problem
from .jwks import SUPPORTED_ALGORITHMS, JwksRefused, KeySet, parse_jwks

DEFAULT_ALGORITHMS = ("RS256",)
LAST_GOOD_KEYS_SECONDS = 24 * 3600
MAX_LAST_GOOD_KEYS_SECONDS = 30 * 24 * 3600
MAX_ISSUERS = 100
MAX_GRANTS = 100
ISSUER_FIELDS = ("issuer", "audience", "jwks_uri", "jwks", "algorithms", "grants", "last_good_keys_seconds")


@dataclass(frozen=True)
class TrustedIssuer:
    issuer: str
    audience: str
    algorithms: tuple[str, ...]
    grants: tuple[GrantRule, ...]
    jwks_uri: str | None = None
    jwks: KeySet | None = None  # keys given in the file: never fetched
    last_good_keys_seconds: int = LAST_GOOD_KEYS_SECONDS

    @property
    def fetches_keys(self) -> bool:
        return self.jwks is None

    @property
    def keys_source(self) -> str:
        """Where this issuer's keys come from, in words."""
        if self.jwks is not None:
            count = f"{len(self.jwks.keys)} key(s)"
            if self.jwks_uri is not None:
                return f"{count} fetched from {self.jwks_uri} when this edition was published (never fetched here)"
            return f"{count} given in the access file"
        if self.jwks_uri is not None:
            return f"fetched from {self.jwks_uri}"
        return f"fetched by OpenID discovery ({discovery_url(self.issuer)})"


def parse_trusted_issuers(value: Any, own_issuer: str, source: str) -> tuple[TrustedIssuer, ...]:
    if not isinstance(value, list):
        raise AccessConfigError(f"{source}: trusted_issuers: must be a list of issuer objects")
    if len(value) > MAX_ISSUERS:
        raise AccessConfigError(f"{source}: trusted_issuers: {len(value)} issuers; at most {MAX_ISSUERS}")
    issuers: list[TrustedIssuer] = []
    for index, entry in enumerate(value):
        where = f"{source}: trusted_issuers[{index}]"
        trusted = parse_trusted_issuer(entry, where)
        if trusted.issuer == own_issuer:
            raise AccessConfigError(f"{where}.issuer: {trusted.issuer!r} is this file's own issuer, whose tokens it "
                                    "signs itself; trust another issuer")
        if any(earlier.issuer == trusted.issuer for earlier in issuers):
            raise AccessConfigError(f"{where}.issuer: {trusted.issuer!r} is trusted by an earlier entry")
        issuers.append(trusted)
    return tuple(issuers)


def parse_trusted_issuer(entry: Any, where: str) -> TrustedIssuer:
    if not isinstance(entry, dict):
        raise AccessConfigError(f"{where}: must be an object with issuer, audience, algorithms and grants")
    for name in entry:
        if name not in ISSUER_FIELDS:
            raise AccessConfigError(f"{where}.{name}: unknown field (expected one of {', '.join(ISSUER_FIELDS)})")
    issuer = _url(entry, "issuer", where, required=True)
    assert issuer is not None
    audience = entry.get("audience")
    if not isinstance(audience, str) or not audience.strip():
        raise AccessConfigError(f"{where}.audience: must be a non-empty string (the `aud` this host's tokens carry)")
    jwks_uri = _url(entry, "jwks_uri", where, required=False)
    jwks = None
    if "jwks" in entry:
        try:
            jwks = parse_jwks(entry["jwks"], f"{where}.jwks")
        except JwksRefused as refused:
            raise AccessConfigError(str(refused)) from None
        if not jwks.keys:
            raise AccessConfigError(f"{where}.jwks: holds no key this host can verify with"
                                    + (f" ({'; '.join(jwks.skipped)[:300]})" if jwks.skipped else ""))
    algorithms = _algorithms(entry.get("algorithms", list(DEFAULT_ALGORITHMS)), f"{where}.algorithms")
    grants = entry.get("grants", [])
    if not isinstance(grants, list) or len(grants) > MAX_GRANTS:
        raise AccessConfigError(f"{where}.grants: must be a list of at most {MAX_GRANTS} rules")
    window = entry.get("last_good_keys_seconds", LAST_GOOD_KEYS_SECONDS)
    if (not isinstance(window, int) or isinstance(window, bool) or not 60 <= window <= MAX_LAST_GOOD_KEYS_SECONDS):
        raise AccessConfigError(f"{where}.last_good_keys_seconds: must be a whole number of seconds from 60 to "
                                f"{MAX_LAST_GOOD_KEYS_SECONDS}")
    return TrustedIssuer(
        issuer=issuer,
        audience=audience,
        algorithms=algorithms,
        grants=tuple(rule_from_json(rule, f"{where}.grants[{i}]") for i, rule in enumerate(grants)),
        jwks_uri=jwks_uri,
        jwks=jwks,
        last_good_keys_seconds=window,
    )


def check_algorithms(names: list[str]) -> str | None:
    """What is wrong with an allow-list of algorithms, or None."""
    if not names:
        return "must name at least one algorithm"
    for name in names:
        if not isinstance(name, str) or name not in SUPPORTED_ALGORITHMS:
            refused = " (never none, never an HMAC algorithm: a provider's tokens are verified with its public keys)" \
                if isinstance(name, str) and (name.lower() == "none" or name.upper().startswith("HS")) else ""
            return f"{name!r:.20} is not one of {', '.join(SUPPORTED_ALGORITHMS)}{refused}"
    if len(set(names)) != len(names):
        return "names an algorithm twice"
    return None


def _algorithms(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise AccessConfigError(f"{where}: must be a list such as [\"RS256\"]")
    problem = check_algorithms(value)
    if problem:
        raise AccessConfigError(f"{where}: {problem}")
    return tuple(value)


def _url(entry: dict[str, Any], name: str, where: str, *, required: bool) -> str | None:
    value = entry.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise AccessConfigError(f"{where}.{name}: must be a URL")
    problem = url_problem(value)
    if problem:
        raise AccessConfigError(f"{where}.{name}: {problem}")
    return value
