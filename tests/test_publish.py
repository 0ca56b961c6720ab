"""`polymath-host publish SRC DEST` to a folder: validation first, content addressing, the dry run,
the manifest last, and the access file's edge edition (public keys only) that replicas verify with."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from components import admin
from librarian import TEST_MODEL, make_library, segment_folder, unit_vectors, write_library

from access import AccessControl, TokenRejected
from host.catalog.generations import compiled_as_they_are
from host.catalog.replica import Replica
from host.cli import main
from host.origin.local import FolderOrigin
from host.origin.manifest import MANIFEST_KEY, parse_manifest


def folder_of_libraries(root: Path, **versions: int) -> Path:
    for name, version in versions.items():
        write_library(root / f"{name}.json", make_library(unit_vectors(3, seed=version), model=TEST_MODEL))
    return root


def stored_keys(destination: Path) -> set[str]:
    return {path.relative_to(destination).as_posix() for path in destination.rglob("*") if path.is_file()}


def test_a_bad_file_means_nothing_is_uploaded_and_every_problem_is_listed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = folder_of_libraries(tmp_path / "source", good=1)
    (source / "broken.json").write_text('{"version": 1, "bits": [')
    write_library(source / "access" / "team" / "negative.json",
                  {**make_library(unit_vectors(1), model=TEST_MODEL), "embedding_model": 5})
    destination = tmp_path / "published"
    assert main(["publish", str(source), str(destination), "--compiled"]) == 1
    said = capsys.readouterr().err
    assert f"{source / 'broken.json'}: not valid JSON" in said
    assert f"{source / 'access' / 'team' / 'negative.json'}: embedding_model" in said
    assert "2 problem(s); nothing was published" in said
    assert "Traceback" not in said
    assert not destination.exists()


def test_objects_are_named_by_their_content_and_uploaded_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = folder_of_libraries(tmp_path / "source", a=1, b=2)
    destination = tmp_path / "published"
    assert main(["publish", str(source), str(destination)]) == 0
    first = stored_keys(destination)
    for name in ("a", "b"):
        digest = hashlib.sha256((source / f"{name}.json").read_bytes()).hexdigest()
        assert f"objects/sha256/{digest}" in first
    folder_of_libraries(source, b=3)
    capsys.readouterr()
    assert main(["publish", str(source), str(destination)]) == 0
    said = capsys.readouterr().err
    assert "~ b.json" in said and "a.json" not in said
    assert "1 objects" in said  # only the new b
    second = stored_keys(destination)
    new_objects = {key for key in second - first if key.startswith("objects/")}
    assert len(new_objects) == 1 and first - {MANIFEST_KEY} <= second  # old objects stay: replicas may still read them
    assert len([key for key in second if key.startswith("manifests/")]) == 2  # each manifest under its history name
    assert main(["publish", str(source), str(destination)]) == 0
    assert "already holds this set" in capsys.readouterr().err


def test_publishing_again_reads_only_files_changed_since_they_were_compiled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = folder_of_libraries(tmp_path / "source", a=1, b=2)
    destination = tmp_path / "published"
    assert main(["publish", str(source), str(destination), "--compiled", "--quiet"]) == 0
    assert compiled_as_they_are(source) == {source / "a.json", source / "b.json"}
    (source / "b.json").write_text('{"version": 1, "bits": [')  # gone bad since it was compiled
    assert compiled_as_they_are(source) == {source / "a.json"}
    capsys.readouterr()
    assert main(["publish", str(source), str(destination), "--compiled", "--quiet"]) == 1
    said = capsys.readouterr().err
    assert f"{source / 'b.json'}: not valid JSON" in said and "nothing was published" in said
    folder_of_libraries(source, b=3)
    assert main(["publish", str(source), str(destination), "--compiled", "--quiet"]) == 0
    assert "~ b.json" in capsys.readouterr().err


def test_a_dry_run_lists_what_would_change_and_uploads_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = folder_of_libraries(tmp_path / "source", a=1, b=2)
    destination = tmp_path / "published"
    assert main(["publish", str(source), str(destination)]) == 0
    before = {key: (destination / key).read_bytes() for key in stored_keys(destination)}
    folder_of_libraries(source, c=4)
    (source / "a.json").unlink()
    capsys.readouterr()
    assert main(["publish", str(source), str(destination), "--dry-run", "--compiled"]) == 0
    said = capsys.readouterr().err
    assert "+ c.json" in said and "- a.json" in said and "~ b.json (its compiled segment)" in said
    assert "dry run: would upload" in said
    assert {key: (destination / key).read_bytes() for key in stored_keys(destination)} == before


def test_compiled_segments_are_published_whole_with_their_store_format(tmp_path: Path) -> None:
    source = folder_of_libraries(tmp_path / "source", a=1)
    destination = tmp_path / "published"
    assert main(["publish", str(source), str(destination), "--compiled", "--quiet"]) == 0
    manifest = parse_manifest((destination / MANIFEST_KEY).read_bytes(), "test")
    (library,) = manifest.libraries
    (segment,) = manifest.segments
    compiled = segment_folder(source / ".compiled", "a")
    assert (library.segment, library.member) == (segment.name, 0) and segment.name == compiled.name
    assert segment.store_format == json.loads((compiled / "meta.json").read_text())["store_format"]
    assert {file.name for file in segment.files} == {path.name for path in compiled.iterdir()}
    for file in segment.files:
        assert (destination / file.blob.key).read_bytes() == (compiled / file.name).read_bytes()
    assert library.mtime_ns == (source / "a.json").stat().st_mtime_ns


def test_the_manifest_is_written_after_every_object_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []
    upload, put = FolderOrigin.upload, FolderOrigin.put
    monkeypatch.setattr(FolderOrigin, "upload", lambda self, key, *rest: (written.append(key), upload(self, key, *rest)))
    monkeypatch.setattr(FolderOrigin, "put", lambda self, key, body: (written.append(key), put(self, key, body)))
    source = folder_of_libraries(tmp_path / "source", a=1, b=2)
    assert main(["publish", str(source), str(tmp_path / "published"), "--compiled"]) == 0
    assert written[-1] == MANIFEST_KEY and written.count(MANIFEST_KEY) == 1
    assert len(written) > 10


def test_a_destination_that_cannot_be_written_is_one_line_and_nothing_is_published(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = folder_of_libraries(tmp_path / "source", a=1)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["publish", str(source), str(blocker / "published")]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 2 and "Not a directory" in said and "nothing was published" in said


def test_the_published_access_file_holds_only_what_verifies_and_replicas_honour_revocations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    admin_file = tmp_path / "access.SECRET.json"
    admin("access", "init", "--alg", "EdDSA", "--access", str(admin_file), cwd=tmp_path)
    admin("access", "rotate", "--alg", "HS256", "--access", str(admin_file), cwd=tmp_path)
    admin("access", "rotate", "--alg", "ES256", "--access", str(admin_file), cwd=tmp_path)
    kept = admin("token", "issue", "bob", "--tag", "team", "--access", str(admin_file), cwd=tmp_path)
    revoked = admin("token", "issue", "alice", "--tag", "team", "--access", str(admin_file), cwd=tmp_path)
    source = folder_of_libraries(tmp_path / "source", a=1)
    destination = tmp_path / "published"
    assert main(["publish", str(source), str(destination), "--access", str(admin_file)]) == 0
    assert "left out HS256 key" in capsys.readouterr().err

    def edge_file() -> Path:
        manifest = parse_manifest((destination / MANIFEST_KEY).read_bytes(), "test")
        assert manifest.access is not None
        copy = tmp_path / "edge.json"
        copy.write_bytes((destination / manifest.access.key).read_bytes())
        return copy

    edge = json.loads(edge_file().read_text())
    assert [key["alg"] for key in edge["keys"]] == ["EdDSA", "ES256"]
    assert all(set(key) == {"kid", "alg", "public_key"} for key in edge["keys"])
    assert "PRIVATE" not in edge_file().read_text() and "secret" not in edge_file().read_text()
    assert AccessControl.from_file(edge_file()).authorize(revoked).access_tags == frozenset({"team"})

    admin("token", "revoke", "alice", "--access", str(admin_file), cwd=tmp_path)
    assert main(["publish", str(source), str(destination), "--access", str(admin_file), "--quiet"]) == 0
    replica_view = AccessControl.from_file(edge_file())
    with pytest.raises(TokenRejected, match="revoked"):
        replica_view.authorize(revoked)
    assert replica_view.authorize(kept).subject == "bob"
    assert replica_view.settings.newest_key is not None and replica_view.settings.newest_key.sign_key is None

    folder_of_libraries(source, b=2)  # a publish without --access keeps the access file published before
    assert main(["publish", str(source), str(destination), "--quiet"]) == 0
    assert parse_manifest((destination / MANIFEST_KEY).read_bytes(), "test").access is not None
    assert main(["publish", str(source), str(destination), "--no-access", "--quiet"]) == 0
    assert parse_manifest((destination / MANIFEST_KEY).read_bytes(), "test").access is None


def test_each_publisher_folders_access_file_travels_with_the_set_as_its_edge_edition(tmp_path: Path) -> None:
    source = folder_of_libraries(tmp_path / "source", a=1)
    folder_of_libraries(source / "writers" / "ada", notes=2)
    file = source / "writers" / "ada" / "access.SECRET.json"
    assert main(["access", "init", "--access", str(file), "--issuer", "https://example.org/ada", "--alg", "EdDSA"]) == 0
    destination = tmp_path / "published"
    assert main(["publish", str(source), str(destination), "--quiet"]) == 0
    manifest = parse_manifest((destination / MANIFEST_KEY).read_bytes(), "test")
    (publisher,) = manifest.publishers
    published = json.loads((destination / publisher.blob.key).read_text())
    assert publisher.folder == "writers/ada" and published["issuer"] == "https://example.org/ada"
    assert all("private_key" not in key for key in published["keys"]) and published["keys"]  # verifies, never signs
    replica = Replica(FolderOrigin(destination), tmp_path / "cache")
    folder = replica.sync()
    assert folder is not None
    assert json.loads((folder / "writers" / "ada" / "access.SECRET.json").read_text()) == published
