"""A replica's sync (host/catalog/replica.py) against real origins: a published folder, and a real
HTTP server that fails on demand (5xx, stalls, cut transfers).

What must hold: a sync lays out the published set whole and names it current only then; an
unchanged manifest changes nothing; a corrupt, cut or missing blob, a vanished or unsafe manifest,
an unreachable or failing origin each leave the last good set serving (and nothing of the new set
in use), are counted, said once in the log, and pass by themselves when the origin is right again.
"""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from librarian import TEST_MODEL, make_library, unit_vectors, write_library

from host.catalog import replica as replica_module
from host.catalog.generations import load_catalog
from host.catalog.replica import AccessFollower, Replica
from host.cli import main
from host.origin import ObjectMissing, OriginUnreachable, open_origin
from host.origin import web as web_origin
from host.origin.local import FolderOrigin
from host.origin.manifest import ManifestError, parse_manifest


def library_folder(root: Path, versions: dict[str, int]) -> Path:
    """Libraries named by `versions`, each's vectors seeded by its version (a new version: new bytes)."""
    for name, version in versions.items():
        write_library(root / f"{name}.json", make_library(unit_vectors(3, seed=version), model=TEST_MODEL))
    return root


def publish_now(source: Path, destination: Path | str, *options: str) -> None:
    assert main(["publish", str(source), str(destination), "--quiet", *options]) == 0


def blob_of(destination: Path, path: str) -> Path:
    manifest = parse_manifest((destination / "manifest.json").read_bytes(), "test")
    library = manifest.library(path)
    assert library is not None
    return destination / library.blob.key


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path]:
    source = library_folder(tmp_path / "source", {"a": 1, "b": 2})
    destination = tmp_path / "published"
    publish_now(source, destination, "--compiled")
    return source, destination


def test_a_first_sync_lays_out_the_set_installs_its_compiled_stores_and_names_it_current(
        published: tuple[Path, Path], tmp_path: Path) -> None:
    source, destination = published
    replica = Replica(FolderOrigin(destination), tmp_path / "cache")
    assert replica.current() is None
    folder = replica.sync()
    assert folder is not None and replica.current() == folder
    assert (tmp_path / "cache" / "current").read_text() == folder.name
    for name in ("a.json", "b.json"):
        assert (folder / name).read_bytes() == (source / name).read_bytes()
    messages: list[str] = []
    catalog = load_catalog(folder, cache_dir=replica.compiled, progress=messages.append)
    assert sorted(library.name for library in catalog.libraries) == ["a", "b"]
    assert messages == ["2 libraries in 1 segment, none compiled"]  # the published segment, not compiled here


def test_a_replica_of_another_store_format_downloads_no_compiled_store_and_compiles_itself(
        published: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_module, "STORE_FORMAT", -1)  # as a replica of another version would be
    replica = Replica(FolderOrigin(published[1]), tmp_path / "cache")
    folder = replica.sync()
    assert folder is not None
    manifest = parse_manifest((published[1] / "manifest.json").read_bytes(), "test")
    assert {entry.name for entry in replica.blobs.folder.iterdir()} == {library.blob.sha256 for library in manifest.libraries}
    messages: list[str] = []
    load_catalog(folder, cache_dir=replica.compiled, progress=messages.append)
    assert messages[0] == "compiled 2 libraries together (a, b): 6 bits, test:unit-8"


def test_an_unchanged_manifest_changes_nothing(published: tuple[Path, Path], tmp_path: Path) -> None:
    replica = Replica(FolderOrigin(published[1]), tmp_path / "cache")
    first = replica.sync()
    assert replica.sync() is None
    assert replica.current() == first


def test_a_new_publish_switches_to_a_whole_new_set_and_old_sets_are_cleared(
        published: tuple[Path, Path], tmp_path: Path) -> None:
    source, destination = published
    replica = Replica(FolderOrigin(destination), tmp_path / "cache")
    replica.sync()
    for version in (3, 4, 5):
        library_folder(source, {"b": version, f"new{version}": version})
        publish_now(source, destination)
        folder = replica.sync()
        assert folder is not None and (folder / f"new{version}.json").exists()
    sets = [entry.name for entry in replica.sets.iterdir() if not entry.name.startswith(".")]
    assert len(sets) == 2  # the set in force and the one before it
    wanted = set()
    for name in sets:
        manifest = parse_manifest((replica.sets / name / ".manifest.json").read_bytes(), name)
        wanted |= {blob.sha256 for blob in manifest.blobs()}
    assert {entry.name for entry in replica.blobs.folder.iterdir()} == wanted


@pytest.mark.parametrize("fault", ["corrupt", "cut", "padded", "missing"])
def test_a_bad_blob_leaves_the_last_good_set_serving_until_the_origin_is_right(
        published: tuple[Path, Path], tmp_path: Path, fault: str, caplog: pytest.LogCaptureFixture) -> None:
    source, destination = published
    replica = Replica(FolderOrigin(destination), tmp_path / "cache")
    good = replica.sync()
    library_folder(source, {"b": 9})
    publish_now(source, destination)
    blob = blob_of(destination, "b.json")
    right = blob.read_bytes()
    if fault == "corrupt":
        blob.write_bytes(bytes(byte ^ 1 for byte in right[:10]) + right[10:])
    elif fault == "cut":
        blob.write_bytes(right[: len(right) // 2])
    elif fault == "padded":
        blob.write_bytes(right + b" " * (1 << 21))
    else:
        blob.unlink()
    with caplog.at_level(logging.INFO, "polymath_host.origin"):
        assert replica.poll() is None and replica.poll() is None
        assert replica.current() == good
        assert replica.status.failures == 2 and replica.status.problem is not None
        new_b = parse_manifest((destination / "manifest.json").read_bytes(), "m").libraries[1].blob
        assert not replica.blobs.path(new_b).exists()
        blob.write_bytes(right)
        switched = replica.poll()
    assert switched is not None and switched != good and (switched / "b.json").read_bytes() == right
    assert replica.status.problem is None
    failures = [record for record in caplog.records if "sync failed" in record.getMessage()]
    assert len(failures) == 1, "an outage is said once"
    assert "still serving the set synced before" in failures[0].getMessage()
    assert any("in step again" in record.getMessage() for record in caplog.records)


def test_a_vanished_manifest_is_a_fault_not_an_empty_set(published: tuple[Path, Path], tmp_path: Path) -> None:
    replica = Replica(FolderOrigin(published[1]), tmp_path / "cache")
    good = replica.sync()
    (published[1] / "manifest.json").unlink()
    with pytest.raises(ObjectMissing, match="nothing is published there"):
        replica.sync()
    assert replica.poll() is None and replica.current() == good


@pytest.mark.parametrize(("path", "message"), [
    ("../outside.json", "is not a relative path"), ("/etc/x.json", "is not a relative path"),
    (".hidden/x.json", "is not a relative path"), ("a/./b.json", "is not a relative path"),
    ("notes.txt", "is not a relative path of a .json file"),
])
def test_a_manifest_naming_an_unsafe_path_is_refused(path: str, message: str) -> None:
    manifest = {"format": "polymath-host/published-2", "libraries": [
        {"path": path, "sha256": "0" * 64, "size": 1, "mtime_ns": 1}]}
    with pytest.raises(ManifestError, match=message):
        parse_manifest(json.dumps(manifest).encode(), "origin/manifest.json")


def test_a_malformed_manifest_keeps_the_last_set(published: tuple[Path, Path], tmp_path: Path) -> None:
    replica = Replica(FolderOrigin(published[1]), tmp_path / "cache")
    good = replica.sync()
    (published[1] / "manifest.json").write_text('{"format": "polymath-host/published-2", "libraries": [')
    assert replica.poll() is None and replica.current() == good
    assert replica.status.problem is not None and "not a JSON manifest" in replica.status.problem


class FailingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder, or fails as the server's `mode` says: 500, a stall, or a cut transfer."""

    def do_GET(self) -> None:
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "500":
            self.send_error(500)
        elif mode == "stall":
            time.sleep(3)
            self.send_error(504)
        elif mode == "cut" and "/objects/" in self.path:
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"x" * 10)
        else:
            super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def web_server(published: tuple[Path, Path]) -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: FailingHandler(*a, directory=str(published[1])))  # type: ignore[misc]
    server.mode = "ok"  # type: ignore[attr-defined]
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # type: ignore[method-assign]  # a client gone after a stall
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("mode", ["500", "stall", "cut"])
def test_a_failing_web_origin_costs_one_poll_each_time_and_is_left_when_it_recovers(
        published: tuple[Path, Path], tmp_path: Path, web_server: http.server.ThreadingHTTPServer, mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_origin, "TIMEOUT", 0.5)  # a stall of 3 s outlasts it
    source, destination = published
    replica = Replica(open_origin(f"http://127.0.0.1:{web_server.server_address[1]}/"), tmp_path / "cache")
    good = replica.sync()
    library_folder(source, {"a": 7})
    publish_now(source, destination)
    web_server.mode = mode  # type: ignore[attr-defined]
    if mode == "cut":  # the manifest comes through, its new blob does not
        with pytest.raises(OriginUnreachable):
            replica.sync()
    started = time.monotonic()
    assert replica.poll() is None
    assert time.monotonic() - started < 3, "a stall costs the timeout, not the stall"
    assert replica.current() == good and replica.status.problem
    web_server.mode = "ok"  # type: ignore[attr-defined]
    switched = replica.poll()
    assert switched is not None and (switched / "a.json").read_bytes() == (source / "a.json").read_bytes()


def test_an_unreachable_origin_is_one_line_and_nothing_changes(tmp_path: Path) -> None:
    replica = Replica(open_origin("http://127.0.0.1:9/published"), tmp_path / "cache")
    with pytest.raises(OriginUnreachable, match=r"^http://127.0.0.1:9/published/manifest.json: cannot connect"):
        replica.sync()
    assert replica.poll() is None and replica.current() is None


def test_an_access_file_that_fails_its_checks_never_replaces_a_good_one(tmp_path: Path) -> None:
    origin_folder = tmp_path / "origin"
    origin_folder.mkdir()
    (origin_folder / "access.json").write_text(json.dumps({"issuer": "edge", "revoked": ["alice"]}))
    follower = AccessFollower(FolderOrigin(origin_folder), "access.json", tmp_path / "cache" / "access.json")
    assert follower.poll() is True
    assert follower.poll() is False
    good = follower.target.read_bytes()
    (origin_folder / "access.json").write_text(json.dumps({"issuer": "edge", "revokd": ["alice"]}))
    assert follower.poll() is False
    assert follower.target.read_bytes() == good
    assert follower.status.problem is not None and "revokd" in follower.status.problem
    assert follower.target.stat().st_mode & 0o077 == 0
