"""Issuing and verifying access tokens (SPEC §4, RFC 8725), through AccessControl.authorize."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest

import access.tokens
from access import ANONYMOUS, AccessControl, Grant, TokenRejected
from access.config import AccessSettings, parse_settings
from access.keys import generate_key_entry, parse_key
from access.tokens import NEVER_EXPIRES_CLAIM, issue_token

ISSUER = "https://library.example.com"


def settings_with(*keys: dict[str, str], issuer: str = ISSUER, **fields: Any) -> AccessSettings:
    return parse_settings({"issuer": issuer, "keys": list(keys), **fields}, "access.SECRET.json")


def control_with(*keys: dict[str, str], **fields: Any) -> AccessControl:
    return AccessControl(settings_with(*keys, **fields))


def hs256(kid: str = "k1") -> dict[str, str]:
    return generate_key_entry("HS256", kid)


def eddsa(kid: str = "e1") -> dict[str, str]:
    return generate_key_entry("EdDSA", kid)


def claims(**changes: Any) -> dict[str, Any]:
    """Valid claims for ISSUER; a change to None removes that claim."""
    now = int(time.time())
    base = {
        "iss": ISSUER,
        "aud": ISSUER,
        "sub": "bob",
        "access_tags": ["team"],
        "iat": now,
        "jti": "j-1",
        "exp": now + 3600,
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not None}


def sign(payload: dict[str, Any], entry: dict[str, str]) -> str:
    """A token made with a real key but claims the issuer would never write."""
    key = parse_key(entry, "test")
    assert key.sign_key is not None
    return jwt.encode(payload, key.sign_key, algorithm=entry["alg"], headers={"kid": entry["kid"]})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def segments(header: dict[str, Any], payload: dict[str, Any]) -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"


def rejection(control: AccessControl, token: str) -> str:
    with pytest.raises(TokenRejected) as caught:
        control.authorize(token)
    assert token not in str(caught.value)
    return caught.value.reason


# --- issue and verify -----------------------------------------------------------------


@pytest.mark.parametrize("alg", ["HS256", "EdDSA", "ES256"])
def test_issued_token_grants_its_subject_and_tags(alg: str) -> None:
    key = generate_key_entry(alg, "k1")
    control = control_with(key)
    issued = issue_token(control.settings, "bob@example.com", ["team", "drafts"])

    assert control.authorize(issued.token) == Grant("bob@example.com", frozenset({"team", "drafts"}))
    assert jwt.get_unverified_header(issued.token) == {"alg": alg, "kid": "k1", "typ": "JWT"}


def test_issued_token_carries_the_spec_claims() -> None:
    settings = settings_with(hs256())
    issued = issue_token(settings, "bob", [], expires_in=3600, now=1_000_000)
    payload = json.loads(base64.urlsafe_b64decode(issued.token.split(".")[1] + "=="))

    assert payload == {
        "iss": ISSUER,
        "aud": ISSUER,
        "sub": "bob",
        "access_tags": ["unpublished"],  # no tags given: the default private tag, written out
        "iat": 1_000_000,
        "jti": issued.record.jti,
        "exp": 1_003_600,
    }
    assert len(issued.record.jti) == 32  # 128 random bits, hex


def test_token_with_an_empty_tag_list_grants_the_default_private_tag() -> None:
    key = hs256()
    control = control_with(key, default_private_access_tag="members")
    assert control.authorize(sign(claims(access_tags=[]), key)).access_tags == {"members"}


def test_no_token_is_anonymous() -> None:
    control = control_with(hs256())
    assert control.authorize(None) is ANONYMOUS
    assert control.authorize("") is ANONYMOUS


# --- refused tokens -------------------------------------------------------------------


def test_alg_none_token_is_refused() -> None:
    key = hs256()
    token = segments({"alg": "none", "kid": "k1", "typ": "JWT"}, claims()) + "."
    assert rejection(control_with(key), token) == "wrong algorithm"


def test_token_whose_header_asks_for_another_algorithm_is_refused() -> None:
    key = hs256()
    token = sign(claims(), key)
    _, payload, signature = token.split(".")
    other_header = b64(json.dumps({"alg": "HS512", "kid": "k1", "typ": "JWT"}).encode())
    assert rejection(control_with(key), f"{other_header}.{payload}.{signature}") == "wrong algorithm"


def test_token_signed_with_another_secret_under_the_same_kid_is_refused() -> None:
    impostor = hs256("k1")
    assert rejection(control_with(hs256("k1")), sign(claims(), impostor)) == "bad signature"


def test_hs256_token_forged_with_the_eddsa_public_key_as_secret_is_refused() -> None:
    # The classic key-confusion attack: the public key is public, so an attacker can HMAC
    # with its PEM text and claim alg=HS256 under the EdDSA key's kid.
    public = eddsa("e1")
    control = control_with(hs256("k1"), public)
    signing_input = segments({"alg": "HS256", "kid": "e1", "typ": "JWT"}, claims())
    mac = hmac.new(public["public_key"].encode(), signing_input.encode(), hashlib.sha256).digest()

    assert rejection(control, f"{signing_input}.{b64(mac)}") == "wrong algorithm"


def test_token_with_a_changed_payload_is_refused() -> None:
    key = hs256()
    header, _, signature = sign(claims(access_tags=["team"]), key).split(".")
    widened = b64(json.dumps(claims(access_tags=["team", "board"])).encode())
    assert rejection(control_with(key), f"{header}.{widened}.{signature}") == "bad signature"


def test_token_for_another_audience_is_refused() -> None:
    key = hs256()
    token = sign(claims(aud="https://other.example.com"), key)
    assert rejection(control_with(key), token) == "wrong audience"


def test_token_with_a_list_audience_is_refused() -> None:
    key = hs256()
    token = sign(claims(aud=[ISSUER, "https://other.example.com"]), key)
    assert rejection(control_with(key), token) == "wrong audience"


def test_token_from_another_issuer_is_refused() -> None:
    key = hs256()
    token = sign(claims(iss="https://other.example.com"), key)
    assert rejection(control_with(key), token) == "wrong issuer"


def test_expired_token_is_refused() -> None:
    control = control_with(hs256())
    issued = issue_token(control.settings, "bob", expires_in=60, now=int(time.time()) - 3600)
    assert rejection(control, issued.token) == "expired"


def test_token_expired_within_the_leeway_is_still_accepted() -> None:
    key = hs256()
    token = sign(claims(exp=int(time.time()) - 5), key)
    assert control_with(key).authorize(token).subject == "bob"


def test_token_issued_in_the_future_is_refused() -> None:
    key = hs256()
    token = sign(claims(iat=int(time.time()) + 3600), key)
    assert rejection(control_with(key), token) == "not yet valid"


@pytest.mark.parametrize("claim", ["iss", "aud", "sub", "iat", "jti", "access_tags"])
def test_token_missing_a_required_claim_is_refused(claim: str) -> None:
    key = hs256()
    token = sign(claims(**{claim: None}), key)
    assert rejection(control_with(key), token) == f"missing claim: {claim}"


def test_token_revoked_by_jti_is_refused() -> None:
    key = hs256()
    settings = settings_with(key)
    issued = issue_token(settings, "bob")
    control = control_with(key, revoked=[issued.record.jti])
    assert rejection(control, issued.token) == "revoked"
    assert control.authorize(issue_token(settings, "bob").token).subject == "bob"


def test_tokens_revoked_by_subject_are_refused() -> None:
    key = hs256()
    settings = settings_with(key)
    first, second = issue_token(settings, "bob"), issue_token(settings, "bob")
    control = control_with(key, revoked=["bob"])
    assert rejection(control, first.token) == "revoked"
    assert rejection(control, second.token) == "revoked"
    assert control.authorize(issue_token(settings, "carol").token).subject == "carol"


@pytest.mark.parametrize(
    "garbage",
    [
        "a.b.c",
        "eyJ.eyJ.",
        "e30.e30.",
        "e30.e30.c2ln",  # {} header: no kid
        "eyJhbGciOiJIUzI1NiIsImtpZCI6MX0.e30.c2ln",  # kid is a number
        "W10.e30.c2ln",  # header is a JSON list
        "AAAA." * 2 + "AAAA",
        "x" * 9000 + ".y.z",
    ],
)
def test_jwt_shaped_garbage_is_refused(garbage: str) -> None:
    assert rejection(control_with(hs256()), garbage) in {"malformed token", "missing key id"}


@pytest.mark.parametrize("garbage", ["not a token", "sk_unknown", "é.é.é", "a.b", "a..b.c", "\x00", "Bearer x"])
def test_other_garbage_is_an_unknown_opaque_token_and_anonymous(garbage: str) -> None:
    assert control_with(hs256()).authorize(garbage) is ANONYMOUS


def test_token_with_an_unknown_kid_is_refused() -> None:
    assert rejection(control_with(hs256("k1")), sign(claims(), hs256("k9"))) == "unknown key id"


def test_token_with_non_string_tags_is_refused() -> None:
    key = hs256()
    assert rejection(control_with(key), sign(claims(access_tags="team"), key)) == "malformed token"
    assert rejection(control_with(key), sign(claims(access_tags=[1]), key)) == "malformed token"


# --- tokens without expiry ------------------------------------------------------------


def test_token_without_exp_is_refused() -> None:
    key = hs256()
    assert rejection(control_with(key), sign(claims(exp=None), key)) == "missing claim: exp"


@pytest.mark.parametrize("marker", [False, "true", 1])
def test_only_a_literal_true_marks_a_token_as_non_expiring(marker: Any) -> None:
    key = hs256()
    token = sign(claims(exp=None, **{NEVER_EXPIRES_CLAIM: marker}), key)
    assert rejection(control_with(key), token) == "missing claim: exp"


def test_token_issued_without_expiry_is_accepted() -> None:
    control = control_with(hs256())
    issued = issue_token(control.settings, "robot", ["team"], expires_in=None)
    assert issued.record.expires_at is None
    assert control.authorize(issued.token) == Grant("robot", frozenset({"team"}))


def test_token_with_both_exp_and_the_never_marker_is_refused() -> None:
    key = hs256()
    token = sign(claims(**{NEVER_EXPIRES_CLAIM: True}), key)
    assert rejection(control_with(key), token) == "malformed token"


# --- rotation -------------------------------------------------------------------------


def test_rotation_keeps_old_tokens_valid_until_the_old_key_is_removed() -> None:
    old, new = hs256("2026-01"), eddsa("2026-06")
    old_token = issue_token(settings_with(old), "bob").token

    rotated = control_with(old, new)
    new_token = issue_token(rotated.settings, "carol").token
    assert jwt.get_unverified_header(new_token)["kid"] == "2026-06"  # the newest key signs
    assert rotated.authorize(old_token).subject == "bob"
    assert rotated.authorize(new_token).subject == "carol"

    retired = control_with(new)
    assert rejection(retired, old_token) == "unknown key id"
    assert retired.authorize(new_token).subject == "carol"


def test_verify_only_replica_accepts_tokens_but_cannot_issue() -> None:
    from access.errors import AccessConfigError

    full = eddsa("e1")
    public_only = {k: v for k, v in full.items() if k != "private_key"}
    token = issue_token(settings_with(full), "bob").token

    replica = control_with(public_only)
    assert replica.authorize(token).subject == "bob"
    with pytest.raises(AccessConfigError, match="no private_key"):
        issue_token(replica.settings, "bob")


def test_a_host_with_no_keys_refuses_every_jwt() -> None:
    token = issue_token(settings_with(hs256()), "bob").token
    assert rejection(control_with(), token) == "unknown key id"


# --- legacy opaque tokens -------------------------------------------------------------


LEGACY = {
    "alice@example.com": {"token": "sk_alice_0123456789", "access_tags": ["team", "board"]},
    "bob@example.com": {"token": "sk_bob_0123456789", "description": "no tags given"},
    "guest": {"token": "sk_guest_0123456789", "access_tags": []},
    "placeholder": {"description": "no token yet"},
    "dotted": {"token": "abc.def.ghi"},
}


def test_legacy_token_grants_its_tags() -> None:
    control = control_with(tokens=LEGACY)
    assert control.authorize("sk_alice_0123456789") == Grant("alice@example.com", frozenset({"team", "board"}))


def test_legacy_token_without_tags_grants_the_default_private_tag() -> None:
    control = control_with(tokens=LEGACY)
    assert control.authorize("sk_bob_0123456789").access_tags == {"unpublished"}


def test_legacy_token_with_an_empty_tag_list_grants_nothing_as_in_the_original_host() -> None:
    assert control_with(tokens=LEGACY).authorize("sk_guest_0123456789") == Grant("guest", frozenset())


def test_legacy_token_that_looks_like_a_jwt_still_works() -> None:
    assert control_with(tokens=LEGACY).authorize("abc.def.ghi").subject == "dotted"


def test_unknown_opaque_token_is_anonymous() -> None:
    control = control_with(tokens=LEGACY)
    assert control.authorize("sk_alice_012345678") is ANONYMOUS  # one character short
    assert control.authorize("sk_alice_0123456789x") is ANONYMOUS


def test_legacy_token_revoked_by_name_is_refused() -> None:
    control = control_with(tokens=LEGACY, revoked=["alice@example.com"])
    assert rejection(control, "sk_alice_0123456789") == "revoked"


# --- the verification cache -----------------------------------------------------------


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every full verification AccessControl performs."""
    calls: list[str] = []
    real = access.tokens.verify_token

    def counting(settings: AccessSettings, token: str) -> Any:
        calls.append(token)
        return real(settings, token)

    monkeypatch.setattr("access.control.verify_token", counting)
    return calls


def test_a_verified_token_is_served_from_the_cache(verifications: list[str]) -> None:
    control = control_with(hs256())
    token = issue_token(control.settings, "bob").token
    assert control.authorize(token) == control.authorize(token)
    assert len(verifications) == 1


def test_a_cached_grant_is_never_served_past_the_token_expiry(
    verifications: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    control = control_with(hs256())
    now = int(time.time())
    token = issue_token(control.settings, "bob", expires_in=100, now=now).token
    control.authorize(token)

    monkeypatch.setattr(time, "time", lambda: now + 101.0)
    control.authorize(token)  # still valid for PyJWT's real clock, but not from the cache
    assert len(verifications) == 2


def test_refused_tokens_are_not_cached(verifications: list[str]) -> None:
    control = control_with(hs256())
    for _ in range(2):
        with pytest.raises(TokenRejected):
            control.authorize("e30.e30.c2ln")
    assert len(verifications) == 2
