"""access.SECRET.json: strict validation, safe writing, and reloading while the host runs."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from access import ANONYMOUS, AccessConfigError, AccessControl, TokenRejected
from access.config import load_settings, parse_settings
from access.files import update, write_atomically
from access.keys import generate_key_entry
from access.tokens import issue_token

HS256_KEY = generate_key_entry("HS256", "k1")
EDDSA_KEY = generate_key_entry("EdDSA", "e1")
LEGACY_TOKEN = "sk_live_do_not_print_me_0123456789"


def full_file(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "issuer": "https://library.example.com",
        "keys": [HS256_KEY, EDDSA_KEY],
        "default_private_access_tag": "unpublished",
        "restricted": {"count": True, "message": "Ask for access."},
        "tokens": {"alice@example.com": {"token": LEGACY_TOKEN, "access_tags": ["team"], "description": "Alice"}},
        "revoked": ["some-jti"],
        "issued": [{"jti": "j1", "sub": "bob", "access_tags": ["team"], "iat": 1, "exp": None, "kid": "k1"}],
    }
    data.update(changes)
    return data


def write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def access_file(tmp_path: Path) -> Path:
    path = tmp_path / "access.SECRET.json"
    write_atomically(path, full_file())
    return path


# --- reading --------------------------------------------------------------------------


def test_a_complete_file_loads(access_file: Path) -> None:
    settings = load_settings(access_file)
    assert settings.issuer == "https://library.example.com"
    assert [key.kid for key in settings.keys] == ["k1", "e1"]
    assert settings.newest_key is not None and settings.newest_key.kid == "e1"
    assert (settings.restricted_count, settings.restricted_message) == (True, "Ask for access.")
    assert settings.revoked == {"some-jti"}
    assert settings.issued[0].subject == "bob"


def test_an_empty_object_is_a_public_only_file_with_defaults() -> None:
    settings = parse_settings({}, "access.SECRET.json")
    assert settings.issuer == "polymath-host"
    assert settings.default_private_access_tag == "unpublished"
    assert (settings.keys, settings.restricted_count, settings.restricted_message) == ((), False, "")


def test_restricted_signals_are_exposed(access_file: Path) -> None:
    control = AccessControl.from_file(access_file)
    assert control.restricted_count is True
    assert control.restricted_message == "Ask for access."


def test_no_file_means_a_public_only_host(tmp_path: Path) -> None:
    jwt_from_elsewhere = issue_token(parse_settings({"keys": [HS256_KEY]}, "x"), "bob").token
    for control in (AccessControl.from_file(None), AccessControl.from_file(tmp_path / "missing.json")):
        assert control.authorize("sk_anything") is ANONYMOUS
        assert control.restricted_count is False
        with pytest.raises(TokenRejected):
            control.authorize(jwt_from_elsewhere)


BAD_FILES = [
    ("{", "not valid JSON"),
    ("[]", "must contain a JSON object"),
    ('{"revoked": [], "revoked": ["x"]}', "'revoked' appears twice"),
    ('{"restricted": {"count": NaN}}', "NaN is not valid JSON"),
    ({"revokd": []}, "revokd: unknown field"),
    ({"issuer": ""}, "issuer: must be a non-empty string"),
    ({"keys": {}}, "keys: must be a list"),
    ({"keys": [{"kid": "k1", "alg": "none"}]}, "keys[0].alg: 'none' is not supported"),
    ({"keys": [{"kid": "k1", "alg": "HS256", "secret": "c2hvcnQ"}]}, "keys[0].secret: decodes to 5 bytes"),
    ({"keys": [{"kid": "k1", "alg": "HS256", "secret": "not base64!"}]}, "keys[0].secret: must be base64url"),
    ({"keys": [{"kid": "k1", "alg": "HS256"}]}, "keys[0].secret: missing"),
    ({"keys": [{"kid": "", "alg": "HS256", "secret": "x"}]}, "keys[0].kid: must be a non-empty string"),
    ({"keys": [HS256_KEY, HS256_KEY]}, "keys[1].kid: 'k1' is used by an earlier key"),
    ({"keys": [{**HS256_KEY, "public_key": "x"}]}, "keys[0].public_key: not a field of HS256 keys"),
    ({"keys": [{"kid": "e", "alg": "EdDSA"}]}, "keys[0].public_key: missing"),
    ({"keys": [{**EDDSA_KEY, "public_key": "hello"}]}, "keys[0].public_key: must be a PEM public key"),
    (
        {"keys": [{**EDDSA_KEY, "private_key": generate_key_entry("EdDSA", "x")["private_key"]}]},
        "keys[0].private_key: does not match public_key",
    ),
    ({"keys": [{**EDDSA_KEY, "alg": "ES256"}]}, "keys[0].public_key: ES256 keys must be on the P-256 curve"),
    ({"default_private_access_tag": "a/b"}, "default_private_access_tag: 'a/b' contains a slash"),
    ({"restricted": {"count": "yes"}}, "restricted.count: must be true or false"),
    ({"restricted": {"mesage": ""}}, "restricted.mesage: unknown field"),
    ({"tokens": []}, "tokens: must be an object"),
    ({"tokens": {"a": {"token": ""}}}, "tokens.a.token: must be a non-empty string"),
    ({"tokens": {"a": {"token": "t", "access_tag": ["x"]}}}, "tokens.a.access_tag: unknown field"),
    ({"tokens": {"a": {"token": "t", "access_tags": "x"}}}, "tokens.a.access_tags: must be a list of tags"),
    ({"revoked": "jti"}, "revoked: must be a list of non-empty strings"),
    ({"issued": [{"jti": "j", "sub": "s", "kid": "k", "iat": "now"}]}, "issued[0].iat: must be a whole number"),
]


@pytest.mark.parametrize(("content", "problem"), BAD_FILES)
def test_a_malformed_file_is_refused_with_one_line_naming_file_and_field(
    tmp_path: Path, content: Any, problem: str
) -> None:
    path = write(tmp_path / "access.SECRET.json", content)
    with pytest.raises(AccessConfigError) as caught:
        AccessControl.from_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_error_messages_never_echo_secrets(tmp_path: Path) -> None:
    short_secret = "c2VjcmV0LXNlY3JldA"  # base64url of 13 bytes
    duplicate = {"a": {"token": LEGACY_TOKEN}, "b": {"token": LEGACY_TOKEN}}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"keys": [{"kid": "k", "alg": "HS256", "secret": short_secret}]}, short_secret),
        ({"tokens": duplicate}, LEGACY_TOKEN),
        ({"keys": [{**EDDSA_KEY, "private_key": EDDSA_KEY["private_key"][:-40]}]}, EDDSA_KEY["private_key"][40:80]),
    ]
    for content, secret in cases:
        with pytest.raises(AccessConfigError) as caught:
            parse_settings(content, "access.SECRET.json")
        assert secret not in str(caught.value)


# --- writing --------------------------------------------------------------------------


def test_write_is_atomic_with_mode_0600_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "access.SECRET.json"
    write(path, {})
    os.chmod(path, 0o644)

    write_atomically(path, full_file())

    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_settings(path).issuer == "https://library.example.com"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["access.SECRET.json"]


def test_write_refuses_settings_the_host_would_refuse(tmp_path: Path) -> None:
    path = write(tmp_path / "access.SECRET.json", full_file())
    before = path.read_text()
    with pytest.raises(AccessConfigError, match="revokd"):
        write_atomically(path, {"revokd": []})
    assert path.read_text() == before


# --- reloading ------------------------------------------------------------------------


def reloading(path: Path) -> AccessControl:
    return AccessControl.from_file(path, check_interval=0)


def test_reload_picks_up_a_changed_file(access_file: Path) -> None:
    control = reloading(access_file)
    write_atomically(access_file, full_file(restricted={"count": False, "message": "New."}))

    assert control.reload_if_changed() is True
    assert (control.restricted_count, control.restricted_message) == (False, "New.")
    assert control.reload_if_changed() is False  # nothing changed since


def test_authorize_notices_a_new_legacy_token_by_itself(access_file: Path) -> None:
    control = reloading(access_file)
    assert control.authorize("sk_new_token_0123456789") is ANONYMOUS
    write_atomically(access_file, full_file(tokens={"carol": {"token": "sk_new_token_0123456789"}}))
    assert control.authorize("sk_new_token_0123456789").subject == "carol"


def test_a_malformed_file_is_logged_once_and_the_previous_settings_stay(
    access_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    control = reloading(access_file)
    write(access_file, '{"restricted": {"count": false, "message": "broken"')

    with caplog.at_level(logging.ERROR, logger="polymath_host.access"):
        assert control.reload_if_changed() is False
        assert control.reload_if_changed() is False
    assert control.restricted_message == "Ask for access."
    assert control.authorize(LEGACY_TOKEN).subject == "alice@example.com"
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "not valid JSON" in errors[0].getMessage()
    assert LEGACY_TOKEN not in caplog.text

    write_atomically(access_file, full_file(restricted={"count": True, "message": "Fixed."}))
    assert control.reload_if_changed() is True
    assert control.restricted_message == "Fixed."


def test_revocation_applies_at_once_even_to_a_cached_token(access_file: Path) -> None:
    control = reloading(access_file)
    issued = issue_token(control.settings, "bob")
    assert control.authorize(issued.token).subject == "bob"  # now cached

    write_atomically(access_file, full_file(revoked=[issued.record.jti]))
    with pytest.raises(TokenRejected, match="revoked"):
        control.authorize(issued.token)


def test_a_deleted_file_means_public_only_and_a_new_one_is_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "access.SECRET.json"
    control = reloading(path)
    assert control.authorize(LEGACY_TOKEN) is ANONYMOUS

    write_atomically(path, full_file())
    assert control.authorize(LEGACY_TOKEN).subject == "alice@example.com"

    path.unlink()
    assert control.reload_if_changed() is True
    assert control.authorize(LEGACY_TOKEN) is ANONYMOUS


def test_changes_are_checked_at_most_once_per_interval(access_file: Path) -> None:
    control = AccessControl.from_file(access_file, check_interval=3600)
    write_atomically(access_file, full_file(restricted={"count": False, "message": "New."}))
    assert control.reload_if_changed() is False
    assert control.restricted_message == "Ask for access."


def test_a_file_readable_by_others_is_warned_about(access_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    os.chmod(access_file, 0o644)
    with caplog.at_level(logging.WARNING, logger="polymath_host.access"):
        AccessControl.from_file(access_file)
    assert "chmod 600" in caplog.text


def test_concurrent_edits_do_not_lose_each_other(access_file: Path) -> None:
    def revoke(jti: str) -> None:
        def change(data: dict[str, Any]) -> None:
            time.sleep(0.005)  # widen the read-change-write window; without the lock edits get lost
            data["revoked"].append(jti)

        update(access_file, change)

    threads = [threading.Thread(target=revoke, args=(f"jti-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert load_settings(access_file).revoked == {"some-jti"} | {f"jti-{n}" for n in range(8)}
