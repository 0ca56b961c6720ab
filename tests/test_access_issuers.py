"""Trusted identity providers (issue 37): grant rules, the access file's `trusted_issuers`, and verifying a
provider's tokens through `AccessControl.authorize`, with its keys fetched over real HTTP.

The provider here is `oidc_support.KeyServer` (a real HTTP server on loopback that publishes a discovery
document and a key set, and misbehaves when told to); tests/test_oidc_provider.py does the same against the
real `oidc-provider`. Each test gets its own `IssuerKeyRegistry`, so no test sees another's fetches.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oidc_support import AUDIENCE, KeyServer, ProviderKey, claims_for, hs256_with_public_key, key_server, unsigned

from access import AccessControl, Grant, TokenRejected
from access.claim_rules import GrantRule, parse_rule
from access.config import parse_settings
from access.errors import AccessConfigError
from access.issuer_keys import IssuerKeyRegistry
from access.keys import generate_key_entry
from access.tokens import issue_token

HOST_ISSUER = "https://library.test"
RSA = ProviderKey.make("rsa-1")
RSA_NEXT = ProviderKey.make("rsa-2")
EC = ProviderKey.make("ec-1", "ES256")
MEMBERS = {"claim": "groups", "value": "members", "tags": ["members"]}


# ---- grant rules ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "rule"), [
    ("groups=members:members", GrantRule("groups", "members", ("members",))),
    ("email_verified:readers", GrantRule("email_verified", None, ("readers",))),
    ("*:preview,public-notes", GrantRule("*", None, ("preview", "public-notes"))),
    ("app_metadata.tier=paid:paid", GrantRule("app_metadata.tier", "paid", ("paid",))),
    ("https://example.com/roles=editor:staff", GrantRule("https://example.com/roles", "editor", ("staff",))),
    ("scope=library:read:members", GrantRule("scope", "library:read", ("members",))),
    ("https://example.com:8443/paid:members", GrantRule("https://example.com:8443/paid", None, ("members",))),
])
def test_a_rule_reads_as_claim_value_and_tags(text: str, rule: GrantRule) -> None:
    assert parse_rule(text) == rule
    assert parse_rule(rule.text) == rule


@pytest.mark.parametrize(("text", "problem"), [
    ("members", "a rule is CLAIM=VALUE:TAG"),
    (":members", "a rule is CLAIM=VALUE:TAG"),
    ("groups=:members", "nothing after '='"),
    ("groups=members:", "the tag must be a non-empty string"),
    ("groups=members:a/b", "contains a slash"),
    ("app..tier=paid:paid", "empty step"),
    ("my claim=x:members", "holds spaces"),
])
def test_a_bad_rule_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_rule(text)


CLAIMS = {
    "groups": ["members", "staff"],
    "scope": "openid library:read profile",
    "scp": ["library:write"],
    "email_verified": True,
    "paid": "true",
    "level": 3,
    "app_metadata": {"tier": "paid", "flags": {"beta": True}},
    "https://example.com/roles": ["editor"],
    "realm_access": {"roles": ["reader"]},
}


@pytest.mark.parametrize(("rule", "matches"), [
    ("groups=members:t", True),  # a list holding it
    ("groups=member:t", False),
    ("scope=library:read:t", True),  # a space-separated string holding it
    ("scope=library:t", False),
    ("scp=library:write:t", True),  # Okta's list of scopes
    ("email_verified:t", True),  # exactly true
    ("paid:t", False),  # the string "true" is not true
    ("paid=true:t", True),
    ("level=3:t", True),
    ("app_metadata.tier=paid:t", True),
    ("app_metadata.flags.beta:t", True),
    ("app_metadata.tier.x:t", False),  # a path through a string
    ("https://example.com/roles=editor:t", True),
    ("realm_access.roles=reader:t", True),
    ("missing:t", False),
    ("missing=x:t", False),
    ("*:t", True),
])
def test_rules_match_claims_as_providers_send_them(rule: str, matches: bool) -> None:
    assert parse_rule(rule).matches(CLAIMS) is matches


# ---- the access file -------------------------------------------------------------------------------------------


def file_with(*issuers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"issuer": HOST_ISSUER, "keys": [generate_key_entry("EdDSA", "own")], "trusted_issuers": list(issuers),
            **fields}


def entry(issuer: str = "https://id.example.com/", **fields: Any) -> dict[str, Any]:
    return {"issuer": issuer, "audience": AUDIENCE, "grants": [MEMBERS], **fields}


def test_a_trusted_issuer_is_read_with_its_defaults() -> None:
    settings = parse_settings(file_with(entry()), "access.SECRET.json")
    (trusted,) = settings.trusted_issuers
    assert trusted.algorithms == ("RS256",)
    assert trusted.grants == (GrantRule("groups", "members", ("members",)),)
    assert trusted.last_good_keys_seconds == 24 * 3600
    assert trusted.keys_source == "fetched by OpenID discovery (https://id.example.com/.well-known/openid-configuration)"


@pytest.mark.parametrize(("issuers", "problem"), [
    ([entry(audiences="x")], r"trusted_issuers\[0\]\.audiences: unknown field"),
    ([entry(algorithms=["HS256"])], r"algorithms: 'HS256' is not one of .*never an HMAC algorithm"),
    ([entry(algorithms=["none"])], r"algorithms: 'none' is not one of .*never none"),
    ([entry(algorithms=[])], "must name at least one algorithm"),
    ([entry(issuer=HOST_ISSUER)], "is this file's own issuer"),
    ([entry(), entry()], r"trusted_issuers\[1\]\.issuer: .* is trusted by an earlier entry"),
    ([entry(issuer="http://id.example.com")], "is not HTTPS"),
    ([entry(jwks_uri="http://keys.example.com/jwks")], r"jwks_uri: .* is not HTTPS"),
    ([entry(audience="")], "audience: must be a non-empty string"),
    ([entry(grants=[{"claim": "groups", "value": "x", "tags": []}])], r"grants\[0\]\.tags: must be a non-empty list"),
    ([entry(grants=[{"claim": "*", "value": "x", "tags": ["a"]}])], "a rule for any token"),
    ([entry(jwks={"keys": [{"kty": "oct", "kid": "s", "k": "c2VjcmV0"}]})], "symmetric \\(oct\\) key"),
    ([entry(jwks={"keys": [{**RSA.jwk, "d": "AQAB"}]})], "private key material"),
    ([entry(last_good_keys_seconds=5)], "from 60 to"),
])
def test_a_bad_trusted_issuer_is_refused_naming_the_field(issuers: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(AccessConfigError, match=problem) as caught:
        parse_settings(file_with(*issuers), "access.SECRET.json")
    assert str(caught.value).startswith("access.SECRET.json: ")


def test_plain_http_is_allowed_only_for_loopback() -> None:
    settings = parse_settings(file_with(entry("http://127.0.0.1:9999"), entry("http://[::1]:9999"),
                                        entry("http://localhost:9999")), "f")
    assert len(settings.trusted_issuers) == 3


class Clock:
    """A monotonic clock a test moves forward."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# ---- verification against a provider on loopback ----------------------------------------------------------------


@pytest.fixture
def provider() -> Iterator[KeyServer]:
    with key_server([RSA, EC]) as server:
        yield server


def control_for(tmp_path: Path, *issuers: dict[str, Any], registry: IssuerKeyRegistry | None = None,
                **fields: Any) -> AccessControl:
    path = tmp_path / "access.SECRET.json"
    path.write_text(json.dumps(file_with(*issuers, **fields)))
    path.chmod(0o600)
    return AccessControl.from_file(path, registry=registry or IssuerKeyRegistry())


def ready(control: AccessControl, token: str) -> AccessControl:
    """What the web layer does before `authorize`: wait for the keys this token needs (bounded)."""
    pending = control.keys_pending(token)
    if pending is not None:
        pending.result(timeout=15)
    return control


def grant_of(control: AccessControl, token: str) -> Grant:
    return ready(control, token).authorize(token)


def rejection(control: AccessControl, token: str) -> str:
    ready(control, token)
    with pytest.raises(TokenRejected) as caught:
        control.authorize(token)
    assert token not in str(caught.value)
    return caught.value.reason


RULES = [MEMBERS, {"claim": "scope", "value": "library:read", "tags": ["readers"]},
         {"claim": "app_metadata.tier", "value": "paid", "tags": ["paid"]}]


def test_a_providers_token_grants_the_tags_its_claims_match(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer, grants=RULES, algorithms=["RS256", "ES256"]))
    token = RSA.sign(claims_for(provider.issuer, "alice", groups=["members"], scope="openid library:read"))
    assert grant_of(control, token) == Grant("alice", frozenset({"members", "readers"}))
    by_ec = EC.sign(claims_for(provider.issuer, "bob", app_metadata={"tier": "paid"}))
    assert grant_of(control, by_ec) == Grant("bob", frozenset({"paid"}))
    assert provider.count("/.well-known/openid-configuration") == 1 and provider.count() == 1


def test_a_valid_token_no_rule_matches_is_a_caller_without_tags(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer))
    token = RSA.sign(claims_for(provider.issuer, "carol", groups=["free"], access_tags=["members"]))
    assert grant_of(control, token) == Grant("carol", frozenset())  # its own access_tags claim grants nothing


def test_the_hosts_own_tokens_work_beside_a_trusted_issuer(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer))
    own = issue_token(control.settings, "dave", ["unpublished"]).token
    assert control.keys_pending(own) is None
    assert control.authorize(own) == Grant("dave", frozenset({"unpublished"}))


def bad_tokens(issuer: str) -> dict[str, tuple[str, str]]:
    """name -> (token, the reason a request with it is refused)."""
    good = claims_for(issuer, groups=["members"])
    without = {name: {k: v for k, v in good.items() if k != name} for name in ("sub", "exp", "aud")}
    return {
        "expired": (RSA.sign(claims_for(issuer, lifetime=-120)), "expired"),
        "not yet valid": (RSA.sign({**good, "nbf": good["iat"] + 600}), "not yet valid"),
        "issued in the future": (RSA.sign({**good, "iat": good["iat"] + 600}), "not yet valid"),
        "wrong issuer": (RSA.sign({**good, "iss": "https://elsewhere.example.com"}), "wrong issuer"),
        "wrong audience": (RSA.sign({**good, "aud": "https://other.test"}), "wrong audience"),
        "audience in a list": (RSA.sign({**good, "aud": ["https://other.test"]}), "wrong audience"),
        "unknown kid": (RSA.sign(good, kid="made-up"), "unknown key id"),
        "alg none": (unsigned(good, kid=RSA.kid), "wrong algorithm"),
        "HS256 with the public key": (hs256_with_public_key(good, RSA), "wrong algorithm"),
        "ES256 not allowed": (EC.sign(good), "wrong algorithm"),
        "RS256 naming the EC key": (RSA.sign(good, kid=EC.kid), "wrong algorithm"),
        "a tampered signature": (RSA.sign(good)[:-6] + "AAAAAA", "bad signature"),
        "no sub": (RSA.sign(without["sub"]), "missing claim: sub"),
        "no exp": (RSA.sign(without["exp"]), "missing claim: exp"),
        "no aud": (RSA.sign(without["aud"]), "missing claim: aud"),
        "empty sub": (RSA.sign({**good, "sub": ""}), "malformed token"),
        "critical header": (RSA.sign(good, crit=["exp"]), "malformed token"),
        "a logout token": (RSA.sign(good, typ="logout+jwt"), "wrong token type"),
        "too large": (RSA.sign({**good, "groups": ["x" * 20_000]}), "malformed token"),
    }


def test_every_bad_token_is_refused_with_its_reason(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer))
    for name, (token, reason) in bad_tokens(provider.issuer).items():
        assert rejection(control, token) == reason, name
    good = RSA.sign(claims_for(provider.issuer, groups=["members"]))
    assert grant_of(control, good).access_tags == {"members"}  # and the host is unharmed


def test_a_token_without_a_kid_is_verified_only_when_one_key_fits(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer))
    token = RSA.sign(claims_for(provider.issuer), kid=None)
    assert grant_of(control, token).subject == "reader-1"  # RSA and EC published: one fits RS256
    provider.publish([RSA, RSA_NEXT, EC])
    keys_two_rsa = control_for(tmp_path, entry(provider.issuer))
    assert rejection(keys_two_rsa, token) == "missing key id"


def test_an_rs256_token_under_an_ec_keys_kid_is_the_wrong_algorithm_when_both_are_allowed(
        provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer, algorithms=["RS256", "ES256"]))
    token = RSA.sign(claims_for(provider.issuer), kid=EC.kid)
    assert rejection(control, token) == "wrong algorithm"


def test_revoking_a_subject_or_jti_ends_its_provider_tokens(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer))
    erin = RSA.sign(claims_for(provider.issuer, "erin", groups=["members"]))
    frank = RSA.sign(claims_for(provider.issuer, "frank", groups=["members"], jti="frank-1"))
    assert grant_of(control, erin).access_tags == {"members"} and grant_of(control, frank).subject == "frank"
    path = tmp_path / "access.SECRET.json"
    path.write_text(json.dumps(file_with(entry(provider.issuer), revoked=["erin", "frank-1"])))
    control.reload_if_changed(force=True)
    assert rejection(control, erin) == "revoked"
    assert rejection(control, frank) == "revoked"


# ---- keys kept fresh, within bounds -----------------------------------------------------------------------------


def test_a_rotated_key_is_accepted_at_once_and_the_old_one_while_published(provider: KeyServer,
                                                                           tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer))
    old = RSA.sign(claims_for(provider.issuer, "old", groups=["members"]))
    assert grant_of(control, old).subject == "old"
    provider.publish([RSA_NEXT, RSA])
    new = RSA_NEXT.sign(claims_for(provider.issuer, "new", groups=["members"]))
    assert grant_of(control, new) == Grant("new", frozenset({"members"}))
    assert grant_of(control, old).subject == "old"
    assert provider.count() == 2  # the first fetch and the one refetch

    provider.publish([RSA_NEXT])  # the provider withdraws the old key: the next refresh drops it
    made_up = RSA_NEXT.sign(claims_for(provider.issuer), kid="nope")
    assert rejection(control, made_up) == "unknown key id"  # within 30 s of the last refetch: no fetch


def test_a_flood_of_unknown_kids_costs_one_fetch(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer))
    assert grant_of(control, RSA.sign(claims_for(provider.issuer))).subject == "reader-1"
    before = provider.count()
    flood = [RSA.sign(claims_for(provider.issuer), kid=f"made-up-{n}") for n in range(300)]
    reasons = {rejection(control, token) for token in flood}
    assert reasons == {"unknown key id"}
    assert provider.count() - before == 1


def test_a_key_set_holding_a_symmetric_key_is_refused_whole(provider: KeyServer, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    provider.set(mode="oct")
    registry = IssuerKeyRegistry()
    control = control_for(tmp_path, entry(provider.issuer), registry=registry)
    with caplog.at_level(logging.ERROR, "polymath_host.access"):
        assert rejection(control, RSA.sign(claims_for(provider.issuer))) == "issuer keys unavailable"
    assert "symmetric (oct) key" in caplog.text
    (status,) = registry.statuses()
    # The fetch at start, and a refetch if the token came after it failed: refused each time.
    assert set(status.failures) == {"bad_document"} and status.fetched_at is None


def test_a_discovery_document_naming_another_issuer_is_refused(provider: KeyServer, tmp_path: Path) -> None:
    provider.set(discovery_issuer="https://attacker.example.com")
    registry = IssuerKeyRegistry()
    control = control_for(tmp_path, entry(provider.issuer), registry=registry)
    assert rejection(control, RSA.sign(claims_for(provider.issuer))) == "issuer keys unavailable"
    assert set(registry.statuses()[0].failures) == {"wrong_issuer"}
    assert provider.count() == 0  # its jwks_uri was never followed


@pytest.mark.parametrize("mode", ["garbage", "html", "huge", "error", "not_http", "cut"])
def test_a_failing_provider_leaves_the_last_good_keys_in_force(mode: str, provider: KeyServer, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    registry = IssuerKeyRegistry(clock=clock)
    control = control_for(tmp_path, entry(provider.issuer), registry=registry)
    token = RSA.sign(claims_for(provider.issuer, groups=["members"]))
    assert grant_of(control, token).access_tags == {"members"}
    provider.set(mode=mode)
    with caplog.at_level(logging.INFO, "polymath_host.access"):
        for n in range(3):  # three unknown kids, 31 s apart
            clock.advance(31)
            assert rejection(control, RSA.sign(claims_for(provider.issuer), kid=f"new-{n}")) == "unknown key id"
        assert grant_of(control, RSA.sign(claims_for(provider.issuer, "again", groups=["members"]))).access_tags \
            == {"members"}
    reason = {"garbage": "not_json", "html": "not_json", "huge": "too_large", "error": "http_status",
              "not_http": "unreachable", "cut": "unreachable"}[mode]
    assert set(registry.statuses()[0].failures) == {reason}  # each try failed (refetches and retries alike)
    failures = [record for record in caplog.records  # this provider's: an earlier test's fetch may still end
                if "could not be fetched" in record.getMessage() and provider.issuer in record.getMessage()]
    assert len(failures) == 1  # one line per change of state, not per failure
    assert "stay in force" in failures[0].getMessage()
    provider.set(mode="ok")
    clock.advance(31)
    with caplog.at_level(logging.INFO, "polymath_host.access"):
        rejection(control, RSA.sign(claims_for(provider.issuer), kid="new-after"))
        settle(registry, provider.issuer)  # a refetch the refusal started, if the one waited for was older
    assert "fetched again" in caplog.text and registry.statuses()[0].problem is None


def settle(registry: IssuerKeyRegistry, issuer: str) -> None:
    """Wait for the fetches of an issuer's keys in flight, if any."""
    keys = registry.keys_for(issuer, None)
    while (pending := keys.pending()) is not None:
        pending.result(timeout=15)


def test_a_provider_that_hangs_or_drips_never_holds_a_request(provider: KeyServer, tmp_path: Path) -> None:
    with key_server([RSA]) as dripping:
        provider.set(mode="hang")  # answers nothing at all
        dripping.set(mode="slow")  # a byte every half second: each read is quick, the whole never ends
        registry = IssuerKeyRegistry()
        control = control_for(tmp_path, entry(provider.issuer), entry(dripping.issuer), registry=registry)
        tokens = [RSA.sign(claims_for(provider.issuer)), RSA.sign(claims_for(dripping.issuer))]
        pending = [control.keys_pending(token) for token in tokens]
        assert all(future is not None and not future.done() for future in pending)
        answered = threading.Event()

        def ask() -> None:
            for token in tokens:
                with pytest.raises(TokenRejected, match="issuer keys unavailable"):
                    control.authorize(token)  # while the fetches hang
            answered.set()

        asking = threading.Thread(target=ask)
        asking.start()
        assert answered.wait(30), "authorize waited on a provider"
        asking.join()
        for future in pending:
            assert future is not None and future.result(timeout=30) is None  # each fetch gave up by itself
        assert [status.failures for status in registry.statuses()] == [{"timeout": 1}, {"timeout": 1}]


def test_an_unreachable_provider_is_refused_at_once(tmp_path: Path) -> None:
    from host.service.harness import free_port
    issuer = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    registry = IssuerKeyRegistry()
    control = control_for(tmp_path, entry(issuer), registry=registry)
    for n in range(20):
        assert rejection(control, RSA.sign(claims_for(issuer, f"reader-{n}"))) == "issuer keys unavailable"
    # The fetch at start, and the one refetch the first token asked for: no more within 30 s.
    assert registry.statuses()[0].failures == {"unreachable": 2}


def test_keys_older_than_the_files_window_stop_verifying(provider: KeyServer, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    token = RSA.sign(claims_for(provider.issuer, groups=["members"]))
    two_hours_ago = IssuerKeyRegistry(wall=lambda: time.time() - 7200)
    lenient = control_for(tmp_path, entry(provider.issuer, last_good_keys_seconds=3 * 3600), registry=two_hours_ago)
    assert grant_of(lenient, token).access_tags == {"members"}
    strict_path = tmp_path / "strict"
    strict_path.mkdir()
    strict = control_for(strict_path, entry(provider.issuer, last_good_keys_seconds=3600), registry=two_hours_ago)
    with caplog.at_level(logging.ERROR, "polymath_host.access"):
        assert rejection(strict, token) == "issuer keys unavailable"
        assert rejection(strict, token) == "issuer keys unavailable"
    assert caplog.text.count("older than 3600 s") == 1
    assert len(two_hours_ago.statuses()) == 1  # both files share the provider's keys in the process
    settle(two_hours_ago, provider.issuer)
    assert provider.count() == 2  # the fetch at start, and one refetch the refused token started (not waited for)


def test_keys_given_in_the_file_are_never_fetched(provider: KeyServer, tmp_path: Path) -> None:
    control = control_for(tmp_path, entry(provider.issuer, jwks={"keys": [RSA.jwk]}))
    token = RSA.sign(claims_for(provider.issuer, groups=["members"]))
    assert control.keys_pending(token) is None
    assert control.authorize(token).access_tags == {"members"}
    assert rejection(control, RSA_NEXT.sign(claims_for(provider.issuer), kid="other")) == "unknown key id"
    assert provider.count() == 0 and provider.count("/.well-known/openid-configuration") == 0


def test_a_verified_token_is_served_from_the_cache_while_its_key_is_published(provider: KeyServer,
                                                                              tmp_path: Path) -> None:
    clock = Clock()
    registry = IssuerKeyRegistry(clock=clock)
    control = control_for(tmp_path, entry(provider.issuer), registry=registry)
    token = RSA.sign(claims_for(provider.issuer, groups=["members"]))
    assert grant_of(control, token).access_tags == {"members"}
    assert control.keys_pending(token) is None  # verified already: nothing to wait for
    provider.publish([RSA_NEXT])  # the provider withdraws the key that signed it...
    clock.advance(301)  # ...and the keys, kept for their max-age of 300 s, are refreshed in the background
    keys = registry.keys_for(provider.issuer, None)
    keys.snapshot()
    pending = keys.pending()
    if pending is not None:  # else it is over already
        pending.result(timeout=15)
    assert registry.statuses()[0].fetches == 2
    assert rejection(control, token) == "unknown key id"  # the cached verification went with the key


def test_the_verified_token_cache_keeps_the_newest_within_its_bound() -> None:
    from access.control import _VerifiedCache

    cache = _VerifiedCache(size=3)
    grants = {bytes([n]) * 32: Grant(f"reader-{n}", cache.shared(frozenset({"members"}))) for n in range(5)}
    for digest, grant in grants.items():
        cache.put(digest, grant, time.time() + 60)
    assert len(cache) == 3
    assert [cache.get(digest) for digest in grants] == [None, None, *list(grants.values())[2:]]
    assert len({id(grant.access_tags) for grant in grants.values()}) == 1  # one frozenset for them all
    cache.put(bytes([4]) * 32, grants[bytes([4]) * 32], time.time() - 1)  # put again, expired
    assert cache.get(bytes([4]) * 32) is None and len(cache) == 3


def test_metrics_name_each_issuers_keys_once_when_two_files_fetch_them_differently(provider: KeyServer,
                                                                                    tmp_path: Path) -> None:
    from access.issuer_keys import REGISTRY
    from host.web.service_endpoints import issuer_key_lines

    by_discovery = control_for(tmp_path, entry(provider.issuer), registry=REGISTRY)
    other = tmp_path / "other"
    other.mkdir()
    by_uri = control_for(other, entry(provider.issuer, jwks_uri=f"{provider.url}/jwks"), registry=REGISTRY)
    token = RSA.sign(claims_for(provider.issuer, groups=["members"]))
    assert grant_of(by_discovery, token).access_tags == grant_of(by_uri, token).access_tags == {"members"}
    series = [line.rsplit(" ", 1)[0] for line in issuer_key_lines() if not line.startswith("#")]
    ours = [name for name in series if provider.issuer in name]
    assert len(ours) == 4  # age and fetches, for each way of fetching its keys
    assert len(series) == len(set(series))  # Prometheus drops a series named twice


def test_a_provider_serving_many_publishers_has_its_token_verified_by_those_it_is_for(tmp_path: Path) -> None:
    from host.library.visibility import scoped_tag
    from host.web.access_rules import AccessRules

    issuer, keys = "https://id.example.com/", {"keys": [RSA.jwk]}
    folders = [f"writers/w{n:02}" for n in range(40)]
    for n, folder in enumerate(folders):  # one provider, forty publishers, each its own audience
        (tmp_path / folder).mkdir(parents=True)
        file = tmp_path / folder / "access.SECRET.json"
        file.write_text(json.dumps({**file_with(entry(issuer, audience=f"https://w{n:02}.test", jwks=keys)),
                                    "issuer": f"https://library.test/{folder}"}))
        file.chmod(0o600)
    rules = AccessRules(AccessControl.from_file(None))
    rules.follow(tmp_path, folders)
    token = RSA.sign({**claims_for(issuer, "ada", groups=["members"]), "aud": ["https://w07.test", "other"]})
    assert [folder for folder, _ in rules._candidates(token)] == ["writers/w07"]  # not all forty
    assert rules.authorize(token) == Grant("ada", frozenset({scoped_tag("writers/w07", "members")}))
    for refused, reason in [(RSA.sign({**claims_for(issuer), "aud": "https://nobody.test"}), "wrong audience"),
                            (RSA.sign({**claims_for(issuer, lifetime=-120), "aud": "https://w03.test"}), "expired")]:
        assert len(rules._candidates(refused)) == 1  # the file it is for, or the first trusting its issuer
        with pytest.raises(TokenRejected) as caught:
            rules.authorize(refused)
        assert caught.value.reason == reason
