"""The commands about identity providers (issue 37): `access trust|untrust|trusted`, `token explain`, and
`publish --access ... --issuer-keys embed` with a replica that verifies with the embedded keys alone.

Providers are `oidc_support.KeyServer`s (real HTTP on loopback); commands run through `access.cli.main` and
`host.cli.main` in this process, as the admin runs them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oidc_support import AUDIENCE, KeyServer, ProviderKey, claims_for, key_server
from origin_support import library_folder, publish_now

import access.cli
from access import AccessControl
from access.issuer_keys import IssuerKeyRegistry
from host.origin.manifest import parse_manifest

RSA = ProviderKey.make("rsa-1")
EC = ProviderKey.make("ec-1", "ES256")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = access.cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    file = tmp_path / "access.SECRET.json"
    assert run(capsys, "access", "init", "--access", str(file), "--issuer", "https://library.test", "--alg",
               "EdDSA")[0] == 0
    return file


@pytest.fixture
def provider() -> Iterator[KeyServer]:
    with key_server([RSA]) as server:
        yield server


def trust(capsys: pytest.CaptureFixture[str], path: Path, issuer: str, *options: str) -> tuple[int, str, str]:
    return run(capsys, "access", "trust", issuer, "--audience", AUDIENCE, *options, "--access", str(path))


def entries(path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(path.read_text()).get("trusted_issuers", [])
    return found


def test_trust_checks_the_providers_keys_and_writes_the_entry(path: Path, provider: KeyServer,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = trust(capsys, path, provider.issuer, "--grant", "groups=members:members",
                           "--grant", "https://example.com/tier=paid:members,paid")
    assert code == 0, err
    assert f"trusting {provider.issuer} (added)" in err and "kid rsa-1" in err
    assert entries(path) == [{"issuer": provider.issuer, "audience": AUDIENCE, "algorithms": ["RS256"], "grants": [
        {"claim": "groups", "value": "members", "tags": ["members"]},
        {"claim": "https://example.com/tier", "value": "paid", "tags": ["members", "paid"]}]}]
    assert provider.count("/.well-known/openid-configuration") == 1 and provider.count() == 1

    code, out, err = run(capsys, "access", "trusted", "--access", str(path))
    assert code == 0
    assert out.splitlines() == [f"{provider.issuer}  audience {AUDIENCE}  RS256  keys fetched by OpenID discovery "
                                f"({provider.issuer}/.well-known/openid-configuration)  grants groups=members:members; "
                                "https://example.com/tier=paid:members,paid"]


def test_trusting_an_issuer_again_replaces_its_entry_and_untrust_removes_it(
        path: Path, provider: KeyServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert trust(capsys, path, provider.issuer, "--grant", "*:preview")[0] == 0
    code, _, err = trust(capsys, path, provider.issuer, "--jwks-uri", f"{provider.url}/jwks", "--grant",
                         "email_verified:readers", "--last-good-keys", "6h")
    assert code == 0 and "(replaced its entry)" in err
    assert entries(path) == [{"issuer": provider.issuer, "audience": AUDIENCE, "jwks_uri": f"{provider.url}/jwks",
                              "algorithms": ["RS256"], "grants": [{"claim": "email_verified", "tags": ["readers"]}],
                              "last_good_keys_seconds": 6 * 3600}]
    code, _, err = run(capsys, "access", "untrust", provider.issuer, "--access", str(path))
    assert code == 0 and "no longer trusting" in err
    assert entries(path) == []
    code, _, err = run(capsys, "access", "untrust", provider.issuer, "--access", str(path))
    assert code == 1 and err.startswith("error: ") and "is not trusted" in err
    assert run(capsys, "access", "trusted", "--access", str(path))[1].startswith("no trusted issuers")


def test_a_jwks_file_is_copied_into_the_access_file(path: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [EC.jwk]}))
    issuer = "https://members.example.com"
    code, _, err = trust(capsys, path, issuer, "--jwks-file", str(keys), "--algorithms", "ES256", "--grant", "*:members")
    assert code == 0, err
    assert entries(path)[0]["jwks"] == {"keys": [EC.jwk]}
    assert "1 key(s) given in the access file" in run(capsys, "access", "trusted", "--access", str(path))[1]
    control = AccessControl.from_file(path, registry=IssuerKeyRegistry())
    assert control.authorize(EC.sign({**claims_for(issuer), "aud": AUDIENCE})).access_tags == {"members"}


@pytest.mark.parametrize(("options", "problem"), [
    (("--grant", "members"), "a rule is CLAIM=VALUE:TAG"),
    (("--grant", "*:a/b"), "contains a slash"),
    (("--grant", "*:a", "--last-good-keys", "2y"), "is not a duration"),
    (("--grant", "*:a", "--last-good-keys", "90d"), "give from 1m to 30d"),
])
def test_trust_refuses_a_bad_rule_or_duration_as_a_usage_error(options: tuple[str, ...], problem: str, path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    before = path.read_text()
    with pytest.raises(SystemExit) as exit:
        trust(capsys, path, "https://id.example.com", *options)
    assert exit.value.code == 2 and problem in capsys.readouterr().err
    assert path.read_text() == before


@pytest.mark.parametrize(("algorithms", "problem"), [
    ("HS256", "never an HMAC algorithm"), ("none", "never none"), ("RS256,RS256", "names an algorithm twice"),
])
def test_trust_refuses_algorithms_a_provider_must_never_use(algorithms: str, problem: str, path: Path,
                                                            provider: KeyServer,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = path.read_text()
    code, _, err = trust(capsys, path, provider.issuer, "--grant", "*:a", "--algorithms", algorithms)
    assert code == 1 and err.startswith("error: --algorithms: ") and problem in err
    assert path.read_text() == before
    assert provider.count("/.well-known/openid-configuration") == 0  # refused before any fetch


@pytest.mark.parametrize(("setup", "problem"), [
    ({"mode": "oct"}, "symmetric (oct) key"),
    ({"discovery_issuer": "https://elsewhere.example.com"}, "names the issuer 'https://elsewhere.example.com'"),
    ({"mode": "html"}, "did not answer JSON (an HTML or XML page)"),
    ({"mode": "error"}, "answered 500"),
    ({"mode": "not_http"}, "did not answer as an HTTP server does (BadStatusLine)"),
    ({"mode": "cut"}, "did not answer as an HTTP server does (IncompleteRead)"),
    ({"keys": [EC.jwk]}, "verify ES256, none of the algorithms allowed (RS256): add --algorithms ES256"),
])
def test_trust_refuses_a_provider_whose_keys_cannot_be_used(setup: dict[str, Any], problem: str, path: Path,
                                                            provider: KeyServer,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    provider.set(**setup)
    before = path.read_text()
    code, _, err = trust(capsys, path, provider.issuer, "--grant", "*:members")
    assert code == 1
    assert err.startswith("error: ") and problem in err and "nothing was changed" in err
    assert len(err.strip().splitlines()) == 1
    assert path.read_text() == before


def test_trust_refuses_plain_http_beyond_loopback_and_the_files_own_issuer(path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = trust(capsys, path, "http://id.example.com", "--grant", "*:members")
    assert code == 1 and "is not HTTPS" in err
    code, _, err = trust(capsys, path, "https://127.0.0.1:1", "--grant", "*:members")
    assert code == 1 and "cannot be reached" in err


# ---- token explain -------------------------------------------------------------------------------------------


def test_explain_says_what_a_providers_token_grants_without_printing_it(path: Path, provider: KeyServer,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert trust(capsys, path, provider.issuer, "--grant", "groups=members:members", "--grant", "*:preview")[0] == 0
    token = RSA.sign(claims_for(provider.issuer, "alice", groups=["members"]))
    code, out, _ = run(capsys, "token", "explain", token, "--access", str(path))
    assert code == 0
    assert token not in out
    lines = out.splitlines()
    assert lines[1].startswith(f"issuer: {provider.issuer} (trusted by this file; keys fetched by OpenID discovery")
    assert "key: kid rsa-1, algorithm RS256" in lines
    assert "subject: alice" in lines
    assert "verifies now: yes" in lines
    assert "rules matched: groups=members:members; *:preview" in lines
    assert "grants: members, preview" in lines

    expired = RSA.sign(claims_for(provider.issuer, "alice", lifetime=-3600, groups=["members"]))
    code, out, _ = run(capsys, "token", "explain", expired, "--access", str(path))
    assert code == 1
    assert "verifies now: no: expired" in out.splitlines()
    assert "rules its claims match: groups=members:members; *:preview (they would grant: members, preview)" in out


def test_explain_reads_stdin_and_explains_the_hosts_own_tokens(path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    code, token, _ = run(capsys, "token", "issue", "bob", "--tag", "staff", "--access", str(path))
    assert code == 0
    monkeypatch.setattr("sys.stdin", io.StringIO(token))
    code, out, _ = run(capsys, "token", "explain", "-", "--access", str(path))
    assert code == 0 and token.strip() not in out
    assert "issuer: https://library.test (this file's own: a token issued by polymath-host token issue)" in out
    assert "subject: bob" in out and "grants: staff" in out
    code, out, _ = run(capsys, "token", "explain", "not-a-token", "--access", str(path))
    assert code == 1 and "neither a JWT nor a legacy token" in out


def test_explain_explains_a_legacy_token(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(path.read_text())
    data["tokens"] = {"alice": {"token": "sk_alice_0123456789", "access_tags": ["team"]}}
    path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "token", "explain", "sk_alice_0123456789", "--access", str(path))
    assert code == 0 and "sk_alice" not in out
    assert "kind: the legacy opaque token 'alice' of this file" in out and "grants: team" in out


def test_explain_names_an_untrusted_issuer(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = RSA.sign(claims_for("https://stranger.example.com"))
    code, out, _ = run(capsys, "token", "explain", token, "--access", str(path))
    assert code == 1
    assert "issuer: https://stranger.example.com: neither this file's own (https://library.test) nor a trusted one" in out


# ---- the edge edition ------------------------------------------------------------------------------------------


def test_publish_embeds_the_providers_keys_for_replicas_that_cannot_reach_it(
        path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with key_server([RSA]) as provider:
        assert trust(capsys, path, provider.issuer, "--grant", "groups=members:members")[0] == 0
        origin = tmp_path / "origin"
        publish_now(library_folder(tmp_path / "libraries", notes=1), origin, "--access", str(path),
                    "--issuer-keys", "embed")
        assert f"embedded the keys of {provider.issuer} (kid rsa-1)" in capsys.readouterr().err
        issuer = provider.issuer
    manifest = parse_manifest((origin / "manifest.json").read_bytes(), "manifest")
    assert manifest.access is not None
    edition = origin / manifest.access.key
    published = json.loads(edition.read_text())
    assert published["trusted_issuers"][0]["jwks"]["keys"][0]["kid"] == "rsa-1"
    assert "private_key" not in edition.read_text()
    # The provider is gone: a replica verifies with the keys the edition carries.
    replica = AccessControl.from_file(edition, registry=IssuerKeyRegistry())
    token = RSA.sign(claims_for(issuer, "erin", groups=["members"]))
    assert replica.keys_pending(token) is None
    assert replica.authorize(token).access_tags == {"members"}


def test_publish_embeds_the_keys_of_a_publisher_folders_own_providers_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    libraries = library_folder(tmp_path / "libraries" / "writers" / "ada", notes=1).parents[1]
    file = libraries / "writers" / "ada" / "access.SECRET.json"
    assert run(capsys, "access", "init", "--access", str(file), "--issuer", "https://library.test/p/writers/ada")[0] == 0
    origin = tmp_path / "origin"
    with key_server([RSA]) as provider:
        assert trust(capsys, file, provider.issuer, "--grant", "*:members")[0] == 0
        publish_now(libraries, origin, "--issuer-keys", "embed")
        assert f"embedded the keys of {provider.issuer} (kid rsa-1)" in capsys.readouterr().err
    (scope,) = parse_manifest((origin / "manifest.json").read_bytes(), "manifest").publishers
    assert scope.folder == "writers/ada"
    published = json.loads((origin / scope.blob.key).read_text())
    assert published["trusted_issuers"][0]["jwks"]["keys"][0]["kid"] == "rsa-1"


def test_publish_with_embed_refuses_when_a_provider_cannot_be_reached(path: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with key_server([RSA]) as provider:
        assert trust(capsys, path, provider.issuer, "--grant", "*:members")[0] == 0
        provider.set(mode="garbage")
        from host.cli import main
        origin = tmp_path / "origin"
        code = main(["publish", str(library_folder(tmp_path / "libraries", notes=1)), str(origin), "--quiet",
                     "--access", str(path), "--issuer-keys", "embed"])
    err = capsys.readouterr().err
    assert code == 1
    assert "--issuer-keys embed" in err and "did not answer JSON" in err and "nothing was published" in err
    assert not (origin / "manifest.json").exists()
