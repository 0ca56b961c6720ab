"""The admin commands: access init/rotate/remove-key, token issue/revoke/list."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import jwt
import pytest

import access.cli
from access import AccessControl, Grant, TokenRejected
from access.files import write_atomically


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = access.cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "access.SECRET.json"


@pytest.fixture
def initialised(path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert run(capsys, "access", "init", "--access", str(path), "--issuer", "https://lib.example.com")[0] == 0
    return path


def issue(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> str:
    code, out, err = run(capsys, "token", "issue", *args, "--access", str(path))
    assert code == 0, err
    return out.strip()


def file_data(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# --- access init ----------------------------------------------------------------------


def test_init_creates_a_private_file_with_one_fresh_hs256_key(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "access", "init", "--access", str(path))

    assert code == 0
    assert out == ""
    assert "created" in err
    assert os.stat(path).st_mode & 0o777 == 0o600
    data = file_data(path)
    assert data["issuer"] == "polymath-host"
    [key] = data["keys"]
    assert key["alg"] == "HS256"
    assert key["secret"] not in err
    assert AccessControl.from_file(path).settings.keys[0].kid == key["kid"]


def test_init_keys_are_different_every_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "access", "init", "--access", str(tmp_path / "a.json"))
    run(capsys, "access", "init", "--access", str(tmp_path / "b.json"))
    secrets = {file_data(tmp_path / name)["keys"][0]["secret"] for name in ("a.json", "b.json")}
    assert len(secrets) == 2


def test_init_refuses_to_overwrite_without_force(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = initialised.read_text()
    code, _, err = run(capsys, "access", "init", "--access", str(initialised))

    assert code == 1
    assert err.startswith("error: ") and "--force" in err and err.count("\n") == 1
    assert initialised.read_text() == before


def test_init_with_force_replaces_the_file_and_old_tokens_stop_working(
    initialised: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = issue(capsys, initialised, "bob")
    assert run(capsys, "access", "init", "--force", "--access", str(initialised))[0] == 0
    with pytest.raises(TokenRejected, match="bad signature"):
        AccessControl.from_file(initialised).authorize(token)


def test_init_into_a_missing_directory_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "access", "init", "--access", str(tmp_path / "nope" / "access.SECRET.json"))
    assert code == 1
    assert err.startswith("error: ")


# --- token issue ----------------------------------------------------------------------


def test_issue_prints_only_the_token_and_it_grants_the_tags(
    initialised: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "token", "issue", "bob@example.com", "--tag", "team", "--tag", "board", "--access", str(initialised)
    )

    assert code == 0
    token = out.strip()
    assert out == token + "\n"
    assert token not in err and "bob@example.com" in err
    assert AccessControl.from_file(initialised).authorize(token) == Grant(
        "bob@example.com", frozenset({"team", "board"})
    )


def test_issue_records_the_token_without_storing_it(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = issue(capsys, initialised, "bob", "--expires", "12h")
    [record] = file_data(initialised)["issued"]
    claims = jwt.decode(token, options={"verify_signature": False})

    assert record == {
        "jti": claims["jti"],
        "sub": "bob",
        "access_tags": ["unpublished"],
        "iat": claims["iat"],
        "exp": claims["iat"] + 12 * 3600,
        "kid": record["kid"],
    }
    assert token not in initialised.read_text()
    assert os.stat(initialised).st_mode & 0o777 == 0o600


def test_issue_never_expiring_token(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = issue(capsys, initialised, "robot", "--expires", "never")
    claims = jwt.decode(token, options={"verify_signature": False})
    assert "exp" not in claims and claims["exp_never"] is True
    assert AccessControl.from_file(initialised).authorize(token).subject == "robot"


@pytest.mark.parametrize("lifetime", ["30", "0d", "-1d", "1y", "forever", ""])
def test_issue_with_a_bad_lifetime_is_a_usage_error(
    initialised: Path, capsys: pytest.CaptureFixture[str], lifetime: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        access.cli.main(["token", "issue", "bob", f"--expires={lifetime}", "--access", str(initialised)])
    assert caught.value.code == 2
    assert "lifetime" in capsys.readouterr().err


def test_issue_with_a_bad_tag_is_a_user_error(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "token", "issue", "bob", "--tag", "../etc", "--access", str(initialised))
    assert (code, out) == (1, "")
    assert err.startswith("error: access tag")


def test_issue_without_an_access_file_is_a_user_error(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "token", "issue", "bob", "--access", str(path))
    assert (code, out) == (1, "")
    assert err.startswith("error: ") and "access init" in err


def test_issue_refuses_to_touch_a_malformed_file(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    initialised.write_text('{"revokd": []}')
    code, out, err = run(capsys, "token", "issue", "bob", "--access", str(initialised))
    assert (code, out) == (1, "")
    assert "revokd: unknown field" in err
    assert initialised.read_text() == '{"revokd": []}'


# --- access rotate / remove-key -------------------------------------------------------


def test_rotate_signs_new_tokens_with_the_new_key_and_old_ones_keep_working(
    initialised: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_token = issue(capsys, initialised, "bob")
    code, _, err = run(capsys, "access", "rotate", "--alg", "EdDSA", "--access", str(initialised))
    assert code == 0 and "1 older key(s) still verify" in err

    old_kid, new_kid = [key["kid"] for key in file_data(initialised)["keys"]]
    new_token = issue(capsys, initialised, "carol")
    assert jwt.get_unverified_header(new_token) == {"alg": "EdDSA", "kid": new_kid, "typ": "JWT"}
    control = AccessControl.from_file(initialised)
    assert control.authorize(old_token).subject == "bob"
    assert control.authorize(new_token).subject == "carol"

    assert run(capsys, "access", "remove-key", old_kid, "--access", str(initialised))[0] == 0
    control = AccessControl.from_file(initialised)
    with pytest.raises(TokenRejected, match="unknown key id"):
        control.authorize(old_token)
    assert control.authorize(new_token).subject == "carol"


def test_remove_key_refuses_unknown_and_last_keys(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [key] = file_data(initialised)["keys"]
    code, _, err = run(capsys, "access", "remove-key", "nope", "--access", str(initialised))
    assert code == 1 and err.startswith("error: no key 'nope'")
    code, _, err = run(capsys, "access", "remove-key", key["kid"], "--access", str(initialised))
    assert code == 1 and "only key" in err
    assert file_data(initialised)["keys"] == [key]


# --- token revoke ---------------------------------------------------------------------


def test_revoke_by_jti_refuses_that_token_only(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = issue(capsys, initialised, "bob"), issue(capsys, initialised, "bob")
    jti = jwt.decode(first, options={"verify_signature": False})["jti"]

    code, out, err = run(capsys, "token", "revoke", jti, "--access", str(initialised))
    assert (code, out) == (0, "")
    assert "issued to bob" in err
    control = AccessControl.from_file(initialised)
    with pytest.raises(TokenRejected, match="revoked"):
        control.authorize(first)
    assert control.authorize(second).subject == "bob"


def test_revoke_by_subject_refuses_all_its_tokens(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = [issue(capsys, initialised, "bob") for _ in range(2)]
    code, _, err = run(capsys, "token", "revoke", "bob", "--access", str(initialised))
    assert code == 0 and "2 token(s)" in err
    control = AccessControl.from_file(initialised)
    for token in tokens:
        with pytest.raises(TokenRejected, match="revoked"):
            control.authorize(token)


def test_revoking_twice_or_an_unknown_name_says_so(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "token", "revoke", "nobody", "--access", str(initialised))
    assert code == 0 and "no token recorded here matches it" in err
    code, _, err = run(capsys, "token", "revoke", "nobody", "--access", str(initialised))
    assert code == 0 and "already revoked" in err
    assert file_data(initialised)["revoked"] == ["nobody"]


# --- token list -----------------------------------------------------------------------


def test_list_shows_tokens_and_never_a_secret(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "access", "rotate", "--alg", "EdDSA", "--access", str(initialised))
    data = file_data(initialised)
    data["tokens"] = {"alice@example.com": {"token": "sk_legacy_secret_value", "access_tags": ["team"]}}
    write_atomically(initialised, data)
    bob = issue(capsys, initialised, "bob", "--tag", "team")
    robot = issue(capsys, initialised, "robot", "--expires", "never")
    run(capsys, "token", "revoke", "bob", "--access", str(initialised))

    code, table, err = run(capsys, "token", "list", "--access", str(initialised))
    code_json, listing, _ = run(capsys, "token", "list", "--json", "--access", str(initialised))

    assert code == code_json == 0
    secrets = [
        bob,
        robot,
        "sk_legacy_secret_value",
        data["keys"][0]["secret"],
        data["keys"][1]["private_key"],
        "PRIVATE KEY",
    ]
    for secret in secrets:
        assert secret not in table + err + listing
    bob_row = next(line for line in table.splitlines() if line.startswith("bob "))
    assert "team" in bob_row and bob_row.endswith("revoked")
    robot_row = next(line for line in table.splitlines() if line.startswith("robot "))
    assert "never" in robot_row and robot_row.endswith("active")
    assert "alice@example.com" in table
    parsed = json.loads(listing)
    assert [row["subject"] for row in parsed["issued"]] == ["bob", "robot"]
    assert parsed["legacy"] == [
        {"name": "alice@example.com", "access_tags": ["team"], "description": "", "status": "active"}
    ]


def test_list_on_a_fresh_file(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "token", "list", "--access", str(initialised))[:2] == (0, "no tokens issued yet\n")


# --- wiring ---------------------------------------------------------------------------


def test_commands_plug_into_the_host_parser(initialised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="polymath-host")
    subparsers = parser.add_subparsers(dest="command", required=True)
    subparsers.add_parser("serve").set_defaults(func=lambda args: 0)
    access.cli.register(subparsers)

    args = parser.parse_args(["token", "issue", "bob", "--access", str(initialised)])
    assert args.func(args) == 0
    assert capsys.readouterr().out.count(".") == 2


@pytest.mark.parametrize(
    "command",
    [
        ["access"],
        ["access", "init"],
        ["access", "rotate"],
        ["access", "remove-key"],
        ["token"],
        ["token", "issue"],
        ["token", "revoke"],
        ["token", "list"],
    ],
)
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        access.cli.main([*command, "--help"])
    assert caught.value.code == 0
    assert "usage: polymath-host" in capsys.readouterr().out


def test_a_missing_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        access.cli.main(["token"])
    assert caught.value.code == 2
