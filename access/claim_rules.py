"""Grant rules: which access tags a verified identity provider's token grants, from its claims.

A rule, as `access trust --grant` takes it and `access trusted` shows it:

    CLAIM=VALUE:TAG[,TAG...]   the claim equals VALUE, or is a list holding it, or (for `scope` and
                               `scp`) is a space-separated string holding it
    CLAIM:TAG[,TAG...]         the claim is present and exactly `true`
    *:TAG[,TAG...]             any valid token of the issuer

CLAIM is a dotted path into nested claims (`app_metadata.tier`, `realm_access.roles`), or a
URL-shaped claim name taken whole (`https://example.com/roles`: namespaced claims hold dots). The
text is split at its last `:` (tags never hold one) and then at the first `=`, so a VALUE may hold
`:` (`scope=library:read:members`). In the access file a rule is an object:
`{"claim": "groups", "value": "members", "tags": ["members"]}` (no `value`: present and true;
`"claim": "*"`: any token).

Claims are compared as the provider sent them: strings exactly, `true`/`false` as those words,
whole numbers as their digits; objects and `null` never match. A token's own `access_tags` claim
grants nothing unless a rule names it: only the access file decides what a provider's token opens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import AccessConfigError
from .tags import check_tag

ANY_TOKEN = "*"
SPACE_SEPARATED = frozenset({"scope", "scp"})  # RFC 8693 §4.2 `scope`; Microsoft's and Okta's `scp`
_RULE_FIELDS = ("claim", "value", "tags")
_MISSING = object()


@dataclass(frozen=True)
class GrantRule:
    claim: str  # ANY_TOKEN, a dotted path, or a URL-shaped name
    value: str | None  # None: the claim is present and true
    tags: tuple[str, ...]

    def matches(self, claims: Mapping[str, Any]) -> bool:
        if self.claim == ANY_TOKEN:
            return True
        found = claim_value(claims, self.claim)
        if found is _MISSING:
            return False
        if self.value is None:
            return found is True
        if self.claim in SPACE_SEPARATED and isinstance(found, str):
            return self.value in found.split()
        if isinstance(found, list):
            return any(_same(item, self.value) for item in found)
        return _same(found, self.value)

    @property
    def text(self) -> str:
        """The rule as `--grant` takes it."""
        condition = self.claim if self.value is None else f"{self.claim}={self.value}"
        return f"{condition}:{','.join(self.tags)}"

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"claim": self.claim}
        if self.value is not None:
            entry["value"] = self.value
        entry["tags"] = list(self.tags)
        return entry


def parse_rule(text: str) -> GrantRule:
    """A rule from its command-line form; ValueError saying what is wrong and what a rule looks like."""
    shape = "a rule is CLAIM=VALUE:TAG[,TAG...], CLAIM:TAG[,TAG...] or *:TAG[,TAG...]"
    condition, colon, tag_text = text.rpartition(":")
    if not colon or not condition:
        raise ValueError(f"{text!r}: {shape}")
    tags = tuple(tag.strip() for tag in tag_text.split(","))
    for tag in tags:
        problem = check_tag(tag)
        if problem:
            raise ValueError(f"{text!r}: the tag {problem} ({shape})")
    if condition == ANY_TOKEN:
        return GrantRule(ANY_TOKEN, None, _unique(tags))
    claim, equals, value = condition.partition("=")
    if equals and not value:
        raise ValueError(f"{text!r}: nothing after '=' ({shape}; CLAIM:TAG means the claim is true)")
    problem = check_claim_name(claim)
    if problem:
        raise ValueError(f"{text!r}: the claim {problem}")
    return GrantRule(claim, value if equals else None, _unique(tags))


def rule_from_json(entry: Any, where: str) -> GrantRule:
    """A rule from the access file; AccessConfigError naming `where` (e.g. `...: trusted_issuers[0].grants[1]`)."""
    if not isinstance(entry, dict):
        raise AccessConfigError(f"{where}: must be an object with claim, value (optional) and tags")
    for name in entry:
        if name not in _RULE_FIELDS:
            raise AccessConfigError(f"{where}.{name}: unknown field (expected one of {', '.join(_RULE_FIELDS)})")
    claim = entry.get("claim")
    problem = "must be a string" if not isinstance(claim, str) else (
        None if claim == ANY_TOKEN else check_claim_name(claim))
    if problem:
        raise AccessConfigError(f"{where}.claim: {problem}")
    assert isinstance(claim, str)
    value = entry.get("value")
    if value is not None and (not isinstance(value, str) or not value):
        raise AccessConfigError(f"{where}.value: must be a non-empty string (leave it out for 'the claim is true')")
    if claim == ANY_TOKEN and value is not None:
        raise AccessConfigError(f"{where}.value: a rule for any token ('*') has no value")
    tags = entry.get("tags")
    if not isinstance(tags, list) or not tags:
        raise AccessConfigError(f"{where}.tags: must be a non-empty list of tags")
    for tag in tags:
        tag_problem = check_tag(tag)
        if tag_problem:
            raise AccessConfigError(f"{where}.tags: {tag_problem}")
    return GrantRule(claim, value, _unique(tags))


def granted_by(rules: Iterable[GrantRule], claims: Mapping[str, Any]) -> tuple[frozenset[str], tuple[GrantRule, ...]]:
    """The tags the rules grant for these claims, and the rules that matched."""
    matched = tuple(rule for rule in rules if rule.matches(claims))
    return frozenset(tag for rule in matched for tag in rule.tags), matched


def check_claim_name(claim: str) -> str | None:
    """What is wrong with a claim name, or None."""
    if not claim:
        return "name is empty"
    if claim != claim.strip() or any(ch.isspace() or ord(ch) < 32 for ch in claim):
        return f"name {claim!r} holds spaces or control characters"
    if claim == ANY_TOKEN:
        return "name '*' is for any token: write *:TAG"
    if not is_url_shaped(claim) and any(not part for part in claim.split(".")):
        return f"path {claim!r} has an empty step (two dots, or a dot at an end)"
    return None


def is_url_shaped(claim: str) -> bool:
    return "://" in claim


def claim_value(claims: Mapping[str, Any], claim: str) -> Any:
    """The value at `claim` (a URL-shaped name whole, else a dotted path), or _MISSING."""
    if is_url_shaped(claim):
        return claims.get(claim, _MISSING)
    found: Any = claims
    for step in claim.split("."):
        if not isinstance(found, Mapping) or step not in found:
            return _MISSING
        found = found[step]
    return found


def _same(found: Any, value: str) -> bool:
    if isinstance(found, bool):
        return ("true" if found else "false") == value
    if isinstance(found, str):
        return found == value
    if isinstance(found, int):
        return str(found) == value
    return False


def _unique(tags: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(tags))
