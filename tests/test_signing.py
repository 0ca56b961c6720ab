"""Signed published sets: `publish --sign`, `publisher-key`, and replicas that pin keys (`--origin-key`).

What must hold: a signature verifies only the exact bytes it signed, with a pinned key; anything
else (tampered bytes, another key, no signature, a pasted signature, a replayed older manifest) is
refused as a fault that leaves the last good set serving, counted by reason and said once for each
manifest refused; two pinned keys let a rotation pass without a refused poll; a replica without
pinned keys behaves as before (and says so); every bad key is one line saying what to do.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from components import PROJECT
from conftest import start_host
from forgery import BucketWriter
from origin_support import library_folder, publish_now, wait_for_port

from access import AccessControl, TokenRejected
from host.catalog.replica import Replica
from host.cli import main
from host.origin import open_origin
from host.origin.local import FolderOrigin
from host.origin.manifest import MANIFEST_KEY
from host.origin.publisher_keys import KeyProblem, PublicKey, load_pinned_key, load_signing_key, new_key_file
from host.origin.signatures import (
    BAD,
    REPLAYED,
    UNPINNED,
    UNSIGNED,
    SignatureRefused,
    sign_manifest,
    signature_key,
    verify_manifest,
)
from host.service.harness import child_environment, free_port

MANIFEST = b'{"format": "polymath-host/published-2", "libraries": []}\n'


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """Two publisher keys: the one in use, and the next one (a rotation)."""
    return new_key_file(tmp_path / "a.SECRET.pem").path, new_key_file(tmp_path / "b.SECRET.pem").path


def public(path: Path) -> PublicKey:
    return load_signing_key(path).public


# ---- signatures, on their own -----------------------------------------------------------------------


def test_a_signature_verifies_only_the_bytes_it_signed(keys: tuple[Path, Path]) -> None:
    key = load_signing_key(keys[0])
    document = sign_manifest(MANIFEST, [key])
    assert verify_manifest(MANIFEST, document, [key.public], "m") == key.public
    tampered = MANIFEST.replace(b"[]", b"[ ]")
    with pytest.raises(SignatureRefused, match="for another manifest") as refused:
        verify_manifest(tampered, document, [key.public], "m")
    assert refused.value.reason == BAD
    pasted = json.loads(document)
    pasted["manifest_sha256"] = signature_key(tampered).split("/")[1].removesuffix(".json")
    with pytest.raises(SignatureRefused, match="does not verify") as refused:
        verify_manifest(tampered, json.dumps(pasted).encode(), [key.public], "m")
    assert refused.value.reason == BAD


def test_a_signature_by_a_key_not_pinned_is_refused(keys: tuple[Path, Path]) -> None:
    document = sign_manifest(MANIFEST, [load_signing_key(keys[1])])
    with pytest.raises(SignatureRefused, match="which --origin-key does not pin") as refused:
        verify_manifest(MANIFEST, document, [public(keys[0])], "m")
    assert refused.value.reason == UNPINNED


def test_a_missing_or_empty_signature_is_refused(keys: tuple[Path, Path]) -> None:
    with pytest.raises(SignatureRefused, match="not signed") as refused:
        verify_manifest(MANIFEST, None, [public(keys[0])], "m")
    assert refused.value.reason == UNSIGNED
    with pytest.raises(SignatureRefused, match="lists no signature") as refused:
        verify_manifest(MANIFEST, sign_manifest(MANIFEST, []), [public(keys[0])], "m")
    assert refused.value.reason == UNSIGNED


@pytest.mark.parametrize("document", [b"not json", b"[]", b'{"format": "x", "manifest_sha256": "", "signatures": []}',
                                      b'{"format": "polymath-host/signature-1", "manifest_sha256": "", "signatures": 1}'])
def test_a_malformed_signature_object_is_refused(keys: tuple[Path, Path], document: bytes) -> None:
    with pytest.raises(SignatureRefused, match=r"malformed|for another manifest") as refused:
        verify_manifest(MANIFEST, document, [public(keys[0])], "m")
    assert refused.value.reason == BAD


def test_either_of_two_pinned_keys_verifies_and_a_set_signed_by_both_passes_either_pin(keys: tuple[Path, Path]) -> None:
    old, new = load_signing_key(keys[0]), load_signing_key(keys[1])
    both = [old.public, new.public]
    assert verify_manifest(MANIFEST, sign_manifest(MANIFEST, [old]), both, "m") == old.public
    assert verify_manifest(MANIFEST, sign_manifest(MANIFEST, [new]), both, "m") == new.public
    signed_by_both = sign_manifest(MANIFEST, [old, new])
    assert verify_manifest(MANIFEST, signed_by_both, [old.public], "m") == old.public
    assert verify_manifest(MANIFEST, signed_by_both, [new.public], "m") == new.public


# ---- keys ----------------------------------------------------------------------------------------------


def test_a_pinned_key_is_read_from_its_text_a_file_of_it_or_a_pem_file(keys: tuple[Path, Path], tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = load_signing_key(keys[0])
    assert load_pinned_key(key.public.text) == key.public
    (tmp_path / "a.pub").write_text(f"# the publisher's key since May\n{key.public.text}\n")
    assert load_pinned_key(str(tmp_path / "a.pub")).text == key.public.text
    pem = key.private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "a.pem").write_bytes(pem)
    assert load_pinned_key(str(tmp_path / "a.pem")).text == key.public.text


@pytest.mark.parametrize(("given", "message"), [
    ("ed25519:AAAA", r"^--origin-key 'ed25519:AAAA': not an Ed25519 public key \(ed25519: and the base64 of 32 bytes"),
    ("ed25519:" + "A" * 43 + "!", "not an Ed25519 public key"),
    ("missing.pub", r"^--origin-key missing.pub: no such file; give the public key \(ed25519:...\) that polymath-host "
                    "publisher-key public prints"),
    ("PRIVATE", r"holds a private key, which must never be on a replica: give its public key \(polymath-host "
                "publisher-key public --key "),
    ("TWO", "should hold one public key"),
])
def test_a_bad_pinned_key_is_one_line_saying_what_to_do(keys: tuple[Path, Path], tmp_path: Path, given: str,
                                                         message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if given == "PRIVATE":
        given = str(keys[0])
    elif given == "TWO":
        (tmp_path / "two.pub").write_text(f"{public(keys[0]).text}\n{public(keys[1]).text}\n")
        given = "two.pub"
    with pytest.raises(KeyProblem, match=message) as problem:
        load_pinned_key(given)
    assert "\n" not in str(problem.value)


def test_publisher_key_init_writes_a_private_key_only_its_owner_reads_and_never_over_another(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "publisher.SECRET.pem"
    assert main(["publisher-key", "init", "--key", str(path)]) == 0
    printed = capsys.readouterr()
    assert printed.out.strip() == public(path).text and printed.out.startswith("ed25519:")
    assert f"serve --origin-key {printed.out.strip()}" in printed.err
    assert path.stat().st_mode & 0o777 == 0o600
    before = path.read_bytes()
    assert main(["publisher-key", "init", "--key", str(path)]) == 1
    assert "already exists" in capsys.readouterr().err and path.read_bytes() == before
    assert main(["publisher-key", "public", "--key", str(path)]) == 0
    assert capsys.readouterr().out.strip() == public(path).text
    assert main(["publisher-key", "init", "--key", str(path), "--force"]) == 0
    assert path.read_bytes() != before and not [entry for entry in tmp_path.iterdir() if entry.name.endswith(".tmp")]


@pytest.mark.parametrize("key_file", ["missing", "garbage", "public", "ecdsa"])
def test_a_bad_signing_key_is_one_line_and_nothing_is_published(
        tmp_path: Path, keys: tuple[Path, Path], key_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = tmp_path / "key.pem"
    if key_file == "garbage":
        path.write_text("not a key\n")
    elif key_file == "public":
        path.write_text(public(keys[0]).text + "\n")
    elif key_file == "ecdsa":
        path.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    source = library_folder(tmp_path / "source", a=1)
    assert main(["publish", str(source), str(tmp_path / "published"), "--sign", str(path)]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith(f"error: --sign {path}: ")
    assert "publisher-key init" in said or "the private key file" in said
    assert not (tmp_path / "published").exists()


# ---- publishing signed sets ------------------------------------------------------------------------------


def test_publish_signs_the_manifest_and_an_unsigned_publish_over_it_needs_unsigned(
        tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    source = library_folder(tmp_path / "source", a=1)
    destination = tmp_path / "published"
    publish_now(source, destination, "--sign", str(keys[0]))
    body = (destination / MANIFEST_KEY).read_bytes()
    document = (destination / signature_key(body)).read_bytes()
    assert verify_manifest(body, document, [public(keys[0])], "m") == public(keys[0])
    capsys.readouterr()
    publish_now(source, destination, "--prune")  # nothing to publish (a run to prune only): no key needed
    assert "already holds this set" in capsys.readouterr().err
    library_folder(source, b=2)
    assert main(["publish", str(source), str(destination)]) == 1
    said = capsys.readouterr().err
    assert "is signed; replicas that pin its key refuse an unsigned one: add --sign KEY_FILE" in said
    assert (destination / MANIFEST_KEY).read_bytes() == body
    publish_now(source, destination, "--unsigned")
    assert not (destination / signature_key((destination / MANIFEST_KEY).read_bytes())).exists()


def test_an_unchanged_set_is_signed_again_only_when_the_keys_change(
        tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    source = library_folder(tmp_path / "source", a=1)
    destination = tmp_path / "published"
    publish_now(source, destination, "--sign", str(keys[0]))
    capsys.readouterr()
    publish_now(source, destination, "--sign", str(keys[0]))
    assert "already holds this set" in capsys.readouterr().err
    publish_now(source, destination, "--sign", str(keys[0]), "--sign", str(keys[1]))
    assert "~ the signature" in capsys.readouterr().err
    body = (destination / MANIFEST_KEY).read_bytes()
    for key in keys:
        assert verify_manifest(body, (destination / signature_key(body)).read_bytes(), [public(key)], "m")


# ---- replicas that pin keys --------------------------------------------------------------------------------


@pytest.fixture
def signed(tmp_path: Path, keys: tuple[Path, Path]) -> tuple[Path, Path, Path]:
    """A set with an access file (EdDSA, alice revoked), published signed by the first key; the admin's file."""
    access_file = tmp_path / "access.SECRET.json"
    assert main(["access", "init", "--alg", "EdDSA", "--access", str(access_file)]) == 0
    assert main(["token", "revoke", "alice", "--access", str(access_file)]) == 0
    source = library_folder(tmp_path / "source", a=1)
    destination = tmp_path / "published"
    publish_now(source, destination, "--sign", str(keys[0]), "--access", str(access_file))
    return source, destination, access_file


def test_a_replica_pinning_the_key_takes_a_signed_set(signed: tuple[Path, Path, Path], keys: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    replica = Replica(FolderOrigin(signed[1]), tmp_path / "cache", keys=[public(keys[0])])
    folder = replica.sync()
    assert folder is not None and (folder / "a.json").exists() and (folder / ".signature.json").exists()
    assert replica.status.refusals == {UNSIGNED: 0, UNPINNED: 0, BAD: 0, REPLAYED: 0}


@pytest.mark.parametrize(("forgery", "reason"), [
    ("new library", UNSIGNED), ("new library, signed by the forger", UNPINNED),
    ("new library, a real signature pasted", BAD), ("revocation removed", UNSIGNED), ("tag granted", UNSIGNED),
    ("older set replayed", REPLAYED)])
def test_a_bucket_writers_forgery_is_refused_and_the_last_good_set_serves(
        signed: tuple[Path, Path, Path], keys: tuple[Path, Path], tmp_path: Path, forgery: str, reason: str,
        caplog: pytest.LogCaptureFixture) -> None:
    source, destination, access_file = signed
    replica = Replica(FolderOrigin(destination), tmp_path / "cache", keys=[public(keys[0])])
    older = (destination / MANIFEST_KEY).read_bytes()
    library_folder(source, b=2)
    publish_now(source, destination, "--sign", str(keys[0]), "--access", str(access_file))
    good = replica.sync()
    assert good is not None
    real = (destination / MANIFEST_KEY).read_bytes()
    writer = BucketWriter(FolderOrigin(destination))
    forged_token = None
    if forgery.startswith("new library"):
        body = writer.add_library("injected.json", (source / "a.json").read_bytes())
        if "forger" in forgery:
            writer.sign_with_own_key(body, tmp_path)
        elif "pasted" in forgery:
            writer.paste_signature(body, real)
        writer.put_manifest(body)
    elif forgery == "revocation removed":
        body = writer.put_manifest(writer.edit_access(lambda access: access["revoked"].clear()))
    elif forgery == "tag granted":
        body, forged_token = writer.grant_tag("unpublished")
        writer.put_manifest(body)
    else:
        body = writer.replay(older)
    with caplog.at_level(logging.INFO, "polymath_host.origin"):
        assert replica.poll() is None and replica.poll() is None
    assert replica.current() == good and not (good / "injected.json").exists()
    assert replica.status.refusals[reason] == 2 and sum(replica.status.refusals.values()) == 2
    said = [record.getMessage() for record in caplog.records if "sync failed" in record.getMessage()]
    assert len(said) == 1 and "still serving the set synced before" in said[0] and "refused" in said[0]
    edge = AccessControl.from_file(replica.access_file)
    assert "alice" in edge.settings.revoked
    if forged_token is not None:
        with pytest.raises(TokenRejected, match="unknown key id"):
            edge.authorize(forged_token)
    assert not any(entry.name == signature_key(body).split("/")[1] for entry in replica.sets.rglob("*"))


def test_each_new_forgery_is_said_once_and_the_publisher_gets_through_after(
        signed: tuple[Path, Path, Path], keys: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source, destination, access_file = signed
    replica = Replica(FolderOrigin(destination), tmp_path / "cache", keys=[public(keys[0])])
    replica.sync()
    writer = BucketWriter(FolderOrigin(destination))
    with caplog.at_level(logging.INFO, "polymath_host.origin"):
        for name in ("one", "two"):
            writer.put_manifest(writer.add_library(f"{name}.json", (source / "a.json").read_bytes()))
            assert replica.poll() is None and replica.poll() is None
        library_folder(source, c=3)
        publish_now(source, destination, "--sign", str(keys[0]), "--access", str(access_file))
        switched = replica.poll()
    assert switched is not None and (switched / "c.json").exists()
    messages = [record.getMessage() for record in caplog.records]
    assert len([message for message in messages if "sync failed" in message]) == 2
    assert any("in step again" in message for message in messages)


def test_a_key_rotation_with_two_pinned_keys_passes_without_a_refused_poll(
        signed: tuple[Path, Path, Path], keys: tuple[Path, Path], tmp_path: Path) -> None:
    source, destination, access_file = signed
    both = [public(keys[0]), public(keys[1])]
    replica = Replica(FolderOrigin(destination), tmp_path / "cache", keys=both)
    assert replica.sync() is not None
    publish_now(source, destination, "--sign", str(keys[1]), "--access", str(access_file))  # the same set, the new key
    assert replica.poll() is not None
    library_folder(source, b=2)
    publish_now(source, destination, "--sign", str(keys[1]), "--access", str(access_file))
    assert replica.poll() is not None
    assert replica.status.failures == 0 and sum(replica.status.refusals.values()) == 0
    # Replicas restarted pinning the new key only serve their cached set at once; the old key's pin alone does not.
    assert Replica(FolderOrigin(destination), tmp_path / "cache", keys=[public(keys[1])]).current() == replica.current()
    old_only = Replica(FolderOrigin(destination), tmp_path / "cache", keys=[public(keys[0])])
    assert old_only.current() is None and old_only.cache_refused is not None
    assert "which --origin-key does not pin" in old_only.cache_refused


def test_a_replica_without_pinned_keys_serves_whatever_the_bucket_holds(
        signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Today's behaviour, and the reason for pinning: an unsigned forgery is taken."""
    source, destination, _ = signed
    replica = Replica(FolderOrigin(destination), tmp_path / "cache")
    replica.sync()
    writer = BucketWriter(FolderOrigin(destination))
    writer.put_manifest(writer.add_library("injected.json", (source / "a.json").read_bytes()))
    switched = replica.poll()
    assert switched is not None and (switched / "injected.json").exists()


# ---- serve -------------------------------------------------------------------------------------------------


def serve_once(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """A `serve` expected to stop by itself: its exit code and its output."""
    command = [sys.executable, "-m", "host", "serve", "--port", str(free_port()), "--embedder", "none",
               "--cache-dir", str(tmp_path / "cache"), *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=child_environment({"PYTHONPATH": str(PROJECT)}))


@pytest.mark.parametrize("case", ["bad key", "missing file", "private key", "local folder", "access at a url"])
def test_serve_refuses_a_bad_origin_key_in_one_line(signed: tuple[Path, Path, Path], keys: tuple[Path, Path],
                                                    tmp_path: Path, case: str) -> None:
    origin = signed[1].resolve().as_uri()
    arguments = {
        "bad key": ("--libraries", origin, "--origin-key", "ed25519:nope"),
        "missing file": ("--libraries", origin, "--origin-key", "publisher.pub"),
        "private key": ("--libraries", origin, "--origin-key", str(keys[0])),
        "local folder": ("--libraries", str(signed[0]), "--origin-key", public(keys[0]).text),
        "access at a url": ("--libraries", origin, "--origin-key", public(keys[0]).text,
                            "--access", f"{origin}/access.json"),
    }[case]
    done = serve_once(tmp_path, *arguments)
    assert done.returncode == 1
    said = done.stderr.strip()
    assert said.startswith("error: ") and "\n" not in said
    expected = {"bad key": "not an Ed25519 public key", "missing file": "no such file; give the public key",
                "private key": "must never be on a replica", "local folder": "is a local folder, read as it is",
                "access at a url": "not covered by the set's signature"}[case]
    assert expected in said


def test_serve_says_how_it_trusts_its_origin_and_shows_refusals_in_metrics(
        signed: tuple[Path, Path, Path], keys: tuple[Path, Path], tmp_path: Path) -> None:
    source, destination, _ = signed
    origin = destination.resolve().as_uri()
    pinned = start_host(origin, "--origin-key", public(keys[0]).text, "--watch-interval", "0.2",
                        "--cache-dir", str(tmp_path / "pinned"), cwd=tmp_path, ready_path="/readyz")
    trusting = start_host(origin, "--cache-dir", str(tmp_path / "trusting"), cwd=tmp_path, ready_path="/readyz")
    try:
        assert f"origin {origin}: only sets signed by {public(keys[0]).short} are served" in pinned.log()
        assert f"origin {origin}: trusted unsigned (no --origin-key): whoever can write to it" in trusting.log()
        assert 'polymath_origin_signed{source="libraries"} 0' in httpx.get(f"{trusting.url}/metrics").text
        writer = BucketWriter(FolderOrigin(destination))
        writer.put_manifest(writer.add_library("injected.json", (source / "a.json").read_bytes()))
        refused = 'polymath_origin_signature_refusals_total{source="libraries",reason="unsigned"}'

        def counted() -> bool:
            lines = httpx.get(f"{pinned.url}/metrics").text.splitlines()
            return any(line.startswith(refused) and float(line.split()[-1]) >= 2 for line in lines)

        pinned.wait_until(counted, timeout=30, what="count the refused manifest")
        metrics = httpx.get(f"{pinned.url}/metrics").text
        assert 'polymath_origin_signed{source="libraries"} 1' in metrics
        assert 'polymath_origin_in_step{source="libraries"} 0' in metrics
        assert httpx.get(f"{pinned.url}/readyz").status_code == 200
        assert "injected" not in httpx.get(f"{pinned.url}/libraries").text
        said = [line for line in pinned.log().splitlines() if "origin sync failed" in line]
        assert len(said) == 1 and "not signed" in said[0] and "still serving the set synced before" in said[0]
    finally:
        pinned.stop()
        trusting.stop()


def test_a_replica_of_a_web_origin_checks_the_signature_too(
        signed: tuple[Path, Path, Path], keys: tuple[Path, Path], tmp_path: Path) -> None:
    port, log_path = free_port(), tmp_path / "http-server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                   "--directory", str(signed[1])], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, what="python -m http.server", process=server, log_path=log_path)
        origin = open_origin(f"http://127.0.0.1:{port}/")
        assert Replica(origin, tmp_path / "good", keys=[public(keys[0])]).sync() is not None
        stranger = Replica(origin, tmp_path / "stranger", keys=[public(keys[1])])
        assert stranger.poll() is None and stranger.status.refusals[UNPINNED] == 1
    finally:
        server.kill()
        server.wait(timeout=10)
