"""`access.SECRET.json`: reading it strictly into one immutable AccessSettings.

The file (SPEC §4), with every field optional:

    {
      "issuer": "https://library.example.com",     # JWT iss and aud; default "polymath-host"
      "keys": [{"kid": ..., "alg": "HS256" | "EdDSA" | "ES256", ...}],   # see keys.py
      "default_private_access_tag": "unpublished",
      "restricted": {"count": false, "message": ""},
      "tokens": {"<name>": {"token": "sk_...", "access_tags": [...], "description": ""}},
      "revoked": ["<jti or subject>", ...],
      "issued": [{"jti": ..., "sub": ..., "access_tags": [...], "iat": <unix>, "exp": <unix> | null,
                  "kid": ...}],
      "trusted_issuers": [{"issuer": ..., "audience": ..., "algorithms": [...], "grants": [...]}]   # issuers.py
    }

`trusted_issuers` (access/issuers.py) names identity providers whose tokens this file's rules
accept, and what their claims grant. `issued` is this project's addition: the admin CLI records every token it issues there (never
the token itself), so `token list` can show them and `token revoke SUBJECT` can say what it
revoked. The host reads it only to validate it.

Validation is strict because a typo in this file is a security problem (a misspelt
`"revokd"` would silently un-revoke everything): unknown fields, duplicate JSON keys and
wrong types are errors. Each error is one line naming the file, the field and the problem,
and never echoes a secret or a token.

Legacy `tokens` follow the original Polymath host: an entry without `token` is skipped, a
missing `access_tags` means `[default_private_access_tag]`, and an explicit empty list grants
no tags.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import AccessConfigError
from .issuers import TrustedIssuer, parse_trusted_issuers
from .keys import Key, parse_key
from .tags import check_tag

DEFAULT_ISSUER = "polymath-host"
DEFAULT_PRIVATE_ACCESS_TAG = "unpublished"

TOP_LEVEL_FIELDS = (
    "issuer",
    "keys",
    "default_private_access_tag",
    "restricted",
    "tokens",
    "revoked",
    "issued",
    "trusted_issuers",
)
_RESTRICTED_FIELDS = ("count", "message")
_LEGACY_TOKEN_FIELDS = ("token", "access_tags", "description")
_ISSUED_FIELDS = ("jti", "sub", "access_tags", "iat", "exp", "kid")


@dataclass(frozen=True)
class LegacyToken:
    """An opaque token from `tokens`. Only a SHA-256 digest of the token is kept in memory."""

    name: str
    digest: bytes
    access_tags: frozenset[str]
    description: str


@dataclass(frozen=True)
class IssuedRecord:
    """What the CLI remembers about a JWT it issued (never the token itself)."""

    jti: str
    subject: str
    access_tags: tuple[str, ...]
    issued_at: int
    expires_at: int | None
    kid: str


@dataclass(frozen=True)
class AccessSettings:
    """Everything the host knows about access, swapped as one object on reload."""

    source: str
    issuer: str = DEFAULT_ISSUER
    keys: tuple[Key, ...] = ()
    default_private_access_tag: str = DEFAULT_PRIVATE_ACCESS_TAG
    restricted_count: bool = False
    restricted_message: str = ""
    legacy_tokens: tuple[LegacyToken, ...] = ()
    revoked: frozenset[str] = frozenset()
    issued: tuple[IssuedRecord, ...] = ()
    trusted_issuers: tuple[TrustedIssuer, ...] = ()

    def key(self, kid: str) -> Key | None:
        for key in self.keys:
            if key.kid == kid:
                return key
        return None

    def trusted_issuer(self, issuer: str) -> TrustedIssuer | None:
        for trusted in self.trusted_issuers:
            if trusted.issuer == issuer:
                return trusted
        return None

    @property
    def newest_key(self) -> Key | None:
        """The key new tokens are signed with: the last one listed."""
        return self.keys[-1] if self.keys else None


def public_only_settings(source: str = "(no access file)") -> AccessSettings:
    """A host without an access file: public bits only, every JWT rejected."""
    return AccessSettings(source=source)


def token_digest(token: str) -> bytes:
    # surrogatepass keeps the encoding one-to-one for every Python str, so two different
    # tokens can never share a digest input.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def read_json_object(text: str, source: str) -> dict[str, Any]:
    """Parse the file's text: one JSON object, no duplicate keys, no NaN/Infinity."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        # error.msg never contains the document itself, so no secret leaks into the message.
        raise AccessConfigError(
            f"{source}: not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    except _Refused as error:
        raise AccessConfigError(f"{source}: {error}") from None
    if not isinstance(data, dict):
        raise AccessConfigError(f"{source}: must contain a JSON object")
    return data


def load_settings(path: Path) -> AccessSettings:
    """Read and validate the file. FileNotFoundError is left to the caller to decide on."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except UnicodeDecodeError:
        raise AccessConfigError(f"{path}: is not UTF-8 text") from None
    except OSError as error:
        raise AccessConfigError(f"{path}: cannot be read ({error.strerror})") from None
    return parse_settings(read_json_object(text, str(path)), str(path))


def parse_settings(data: dict[str, Any], source: str) -> AccessSettings:
    """Validate a decoded file; raise AccessConfigError at the first problem."""
    _reject_unknown(data, TOP_LEVEL_FIELDS, source, "")

    issuer = data.get("issuer", DEFAULT_ISSUER)
    if not isinstance(issuer, str) or not issuer.strip():
        raise AccessConfigError(f"{source}: issuer: must be a non-empty string")

    default_tag = data.get("default_private_access_tag")
    if default_tag in (None, ""):  # the original host treated a blank value as the default
        default_tag = DEFAULT_PRIVATE_ACCESS_TAG
    _check_tag(default_tag, f"{source}: default_private_access_tag")

    restricted = data.get("restricted", {})
    if not isinstance(restricted, dict):
        raise AccessConfigError(f"{source}: restricted: must be an object with count and message")
    _reject_unknown(restricted, _RESTRICTED_FIELDS, source, "restricted.")
    count = restricted.get("count", False)
    if not isinstance(count, bool):
        raise AccessConfigError(f"{source}: restricted.count: must be true or false")
    message = restricted.get("message", "")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise AccessConfigError(f"{source}: restricted.message: must be a string")

    return AccessSettings(
        source=source,
        issuer=issuer,
        keys=_parse_keys(data.get("keys", []), source),
        default_private_access_tag=default_tag,
        restricted_count=count,
        restricted_message=message,
        legacy_tokens=_parse_legacy_tokens(data.get("tokens", {}), default_tag, source),
        revoked=frozenset(_string_list(data.get("revoked", []), f"{source}: revoked")),
        issued=_parse_issued(data.get("issued", []), source),
        trusted_issuers=parse_trusted_issuers(data.get("trusted_issuers", []), issuer, source),
    )


def _parse_keys(value: Any, source: str) -> tuple[Key, ...]:
    if not isinstance(value, list):
        raise AccessConfigError(f"{source}: keys: must be a list of key objects")
    keys = tuple(parse_key(entry, f"{source}: keys[{i}]") for i, entry in enumerate(value))
    seen: set[str] = set()
    for i, key in enumerate(keys):
        if key.kid in seen:
            raise AccessConfigError(f"{source}: keys[{i}].kid: {key.kid!r} is used by an earlier key")
        seen.add(key.kid)
    return keys


def _parse_legacy_tokens(value: Any, default_tag: str, source: str) -> tuple[LegacyToken, ...]:
    if not isinstance(value, dict):
        raise AccessConfigError(f"{source}: tokens: must be an object of name -> {{token, access_tags}}")
    result: list[LegacyToken] = []
    owners: dict[bytes, str] = {}
    for name, entry in value.items():
        where = f"{source}: tokens.{name}"
        if not name:
            raise AccessConfigError(f"{source}: tokens: a token name must not be empty")
        if not isinstance(entry, dict):
            raise AccessConfigError(f"{where}: must be an object with token and access_tags")
        _reject_unknown(entry, _LEGACY_TOKEN_FIELDS, source, f"tokens.{name}.")
        description = entry.get("description", "")
        if not isinstance(description, str):
            raise AccessConfigError(f"{where}.description: must be a string")
        if "token" not in entry:  # a placeholder entry, as the original host allowed
            continue
        token = entry["token"]
        if not isinstance(token, str) or not token:
            raise AccessConfigError(f"{where}.token: must be a non-empty string")
        tags = _tag_list(entry["access_tags"], f"{where}.access_tags") if "access_tags" in entry else (default_tag,)
        digest = token_digest(token)
        if digest in owners:
            raise AccessConfigError(f"{where}.token: is the same token as tokens.{owners[digest]}")
        owners[digest] = name
        result.append(LegacyToken(name, digest, frozenset(tags), description))
    return tuple(result)


def _parse_issued(value: Any, source: str) -> tuple[IssuedRecord, ...]:
    if not isinstance(value, list):
        raise AccessConfigError(f"{source}: issued: must be a list")
    records = []
    for i, entry in enumerate(value):
        where = f"{source}: issued[{i}]"
        if not isinstance(entry, dict):
            raise AccessConfigError(f"{where}: must be an object")
        _reject_unknown(entry, _ISSUED_FIELDS, source, f"issued[{i}].")
        for name in ("jti", "sub", "kid"):
            if not isinstance(entry.get(name), str) or not entry[name]:
                raise AccessConfigError(f"{where}.{name}: must be a non-empty string")
        iat, exp = entry.get("iat"), entry.get("exp")
        if not isinstance(iat, int) or isinstance(iat, bool):
            raise AccessConfigError(f"{where}.iat: must be a whole number of seconds")
        if exp is not None and (not isinstance(exp, int) or isinstance(exp, bool)):
            raise AccessConfigError(f"{where}.exp: must be a whole number of seconds or null")
        tags = _tag_list(entry.get("access_tags", []), f"{where}.access_tags")
        records.append(IssuedRecord(entry["jti"], entry["sub"], tags, iat, exp, entry["kid"]))
    return tuple(records)


def _tag_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise AccessConfigError(f"{where}: must be a list of tags")
    for tag in value:
        _check_tag(tag, where)
    return tuple(value)


def _check_tag(tag: Any, where: str) -> None:
    problem = check_tag(tag)
    if problem:
        raise AccessConfigError(f"{where}: {problem}")


def _string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise AccessConfigError(f"{where}: must be a list of non-empty strings")
    return value


def _reject_unknown(obj: dict[str, Any], allowed: tuple[str, ...], source: str, prefix: str) -> None:
    for name in obj:
        if name not in allowed:
            raise AccessConfigError(f"{source}: {prefix}{name}: unknown field (expected one of {', '.join(allowed)})")


class _Refused(Exception):
    """Raised from inside json.loads hooks for JSON that parses but must not be accepted."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A repeated key would otherwise silently keep the last value, e.g. a second
    # "revoked": [] quietly un-revoking everything listed in the first.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"the key {key!r} appears twice in one object")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not valid JSON")
