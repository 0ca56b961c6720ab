"""Hot publishing against a real server: files added, replaced, deleted, broken, and SIGHUP.

The server polls its libraries folder every 0.2 s. What must hold: a published file becomes
queryable, a replacement swaps the content (and the public generation in /readyz goes up), a deletion
removes it, a malformed or half-written replacement is refused with a log line naming the file
while the previous version keeps serving, SIGHUP reloads at once, a corrupt compiled cache is
rebuilt rather than trusted, the access file is followed without a restart, and no temporary
folder is left behind in .compiled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import PROJECT, RunningHost, start_host, stop_host
from librarian import TEST_MODEL, b64, segment_folder, unit_vectors, write_library

INTERVAL = "0.2"
DIMENSION = 8


def versioned_library(name: str, version: int, bits: int = 3, seed: int | None = None) -> dict[str, Any]:
    """Bits whose text and url carry the library's name and version; vectors fixed by `seed`."""
    vectors = unit_vectors(bits, DIMENSION, seed=seed if seed is not None else sum(map(ord, name)))
    return {
        "version": 1,
        "embedding_model": TEST_MODEL,
        "bits": [
            {"text": f"{name} version {version} bit {row}", "embedding": b64(vector), "token_count": 5,
             "info": {"url": f"https://example.com/{name}/v{version}/{row}"}}
            for row, vector in enumerate(vectors)
        ],
    }


def query_vector_of(name: str, row: int = 0, seed: int | None = None) -> np.ndarray:
    return unit_vectors(row + 1, DIMENSION, seed=seed if seed is not None else sum(map(ord, name)))[row]


def wait_until(check: Callable[[], Any], timeout: float = 10, what: str = "the change") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s")
        time.sleep(0.05)


def generation(url: str) -> int:
    return httpx.get(f"{url}/readyz").json()["public_generation"]


def published(url: str, name: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.get(f"{url}/libraries/{name}.json", headers=headers)


def versions_served(url: str, name: str) -> set[str]:
    """The versions of `name` the static asset holds right now (empty when it is not served)."""
    response = published(url, name)
    if response.status_code == 404:
        return set()
    assert response.status_code == 200, response.text
    return {bit["text"].split(" bit ")[0] for bit in response.json()["bits"]}


def top_bit(url: str, vector: np.ndarray) -> dict[str, Any]:
    response = httpx.post(f"{url}/", json={"query_embedding": b64(vector), "count": 1, "count_type": "bit"})
    assert response.status_code == 200, response.text
    return response.json()["bits"][0]


def leftover_temporary_folders(compiled: Path) -> list[Path]:
    return [path for path in compiled.rglob(".*") if path.is_dir()]


def cli(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "host", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)}, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def publishing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningHost, Path]]:
    """One watching server for the publishing tests; each test uses its own library names."""
    root = tmp_path_factory.mktemp("hot")
    folder = root / "libraries"
    write_library(folder / "base.json", versioned_library("base", 1))
    write_library(folder / "access" / "unpublished" / "secret.json", versioned_library("secret", 1))
    cli("access", "init", "--access", str(root / "access.SECRET.json"), cwd=root)
    host = start_host(folder, "--watch-interval", INTERVAL, "--access", str(root / "access.SECRET.json"))
    yield host, folder
    stop_host(host)
    assert leftover_temporary_folders(folder / ".compiled") == []


def test_a_published_file_becomes_queryable(publishing: tuple[RunningHost, Path]) -> None:
    host, folder = publishing
    before = generation(host.url)

    write_library(folder / "added.json", versioned_library("added", 1))

    wait_until(lambda: versions_served(host.url, "added") == {"added version 1"}, what="publishing added.json")
    assert generation(host.url) > before
    assert top_bit(host.url, query_vector_of("added"))["text"] == "added version 1 bit 0"
    assert "added" in [library["name"] for library in httpx.get(f"{host.url}/libraries").json()["libraries"]]


def test_a_replaced_file_swaps_its_content_and_the_generation_goes_up(publishing: tuple[RunningHost, Path]) -> None:
    host, folder = publishing
    write_library(folder / "swapped.json", versioned_library("swapped", 1))
    wait_until(lambda: versions_served(host.url, "swapped") == {"swapped version 1"})
    before = generation(host.url)

    write_library(folder / "swapped.json", versioned_library("swapped", 2, bits=4))

    wait_until(lambda: versions_served(host.url, "swapped") == {"swapped version 2"}, what="the replacement")
    assert generation(host.url) > before
    assert len(published(host.url, "swapped").json()["bits"]) == 4
    assert top_bit(host.url, query_vector_of("swapped", 3))["text"] == "swapped version 2 bit 3"


def test_a_deleted_file_is_no_longer_served(publishing: tuple[RunningHost, Path]) -> None:
    host, folder = publishing
    write_library(folder / "doomed.json", versioned_library("doomed", 1))
    wait_until(lambda: versions_served(host.url, "doomed"))

    (folder / "doomed.json").unlink()

    wait_until(lambda: published(host.url, "doomed").status_code == 404, what="the deletion")
    assert "doomed" not in [library["name"] for library in httpx.get(f"{host.url}/libraries").json()["libraries"]]
    assert not top_bit(host.url, query_vector_of("doomed"))["text"].startswith("doomed")


def log_lines_naming(host: RunningHost, path: Path) -> list[str]:
    return [line for line in host.log().splitlines() if str(path) in line and "not loaded" in line]


@pytest.mark.parametrize(("broken", "problem"), [
    pytest.param(lambda good: good[: len(good) // 2], "not valid JSON", id="half-written"),
    pytest.param(lambda good: good.replace('"token_count": 5', '"token_count": -5', 1), "token_count",
                 id="malformed-bit"),
    pytest.param(lambda good: good.replace(f'"{TEST_MODEL}"', "7"), "embedding_model", id="malformed-top"),
    pytest.param(lambda good: "", "not valid JSON", id="emptied"),
])
def test_a_bad_replacement_is_refused_and_the_previous_version_keeps_serving(
    publishing: tuple[RunningHost, Path], broken: Callable[[str], str], problem: str, request: pytest.FixtureRequest
) -> None:
    host, folder = publishing
    name = f"kept-{request.node.callspec.id}"
    path = folder / f"{name}.json"
    write_library(path, versioned_library(name, 1))
    wait_until(lambda: versions_served(host.url, name) == {f"{name} version 1"})

    path.write_text(broken(json.dumps(versioned_library(name, 2))))

    lines = wait_until(lambda: log_lines_naming(host, path), what="a log line naming the bad file")
    assert problem in lines[-1] and "still serving its previous version" in lines[-1], lines[-1]
    assert versions_served(host.url, name) == {f"{name} version 1"}
    assert top_bit(host.url, query_vector_of(name))["text"] == f"{name} version 1 bit 0"

    write_library(path, versioned_library(name, 3))  # the publisher fixes it
    wait_until(lambda: versions_served(host.url, name) == {f"{name} version 3"}, what="the fixed file")


def test_a_file_written_slowly_never_serves_a_mix_and_ends_as_the_new_version(
    publishing: tuple[RunningHost, Path]
) -> None:
    host, folder = publishing
    path = folder / "slow.json"
    write_library(path, versioned_library("slow", 1, bits=40))
    wait_until(lambda: versions_served(host.url, "slow") == {"slow version 1"})
    content = json.dumps(versioned_library("slow", 2, bits=40)).encode()
    seen: list[set[str]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set() and len(seen) < 2000:
            seen.append(versions_served(host.url, "slow"))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with path.open("wb") as handle:  # in place, a piece every 20 ms, as a slow copy would
            for start in range(0, len(content), len(content) // 30 + 1):
                handle.write(content[start:start + len(content) // 30 + 1])
                handle.flush()
                time.sleep(0.02)
        wait_until(lambda: versions_served(host.url, "slow") == {"slow version 2"}, what="the slow write")
    finally:
        stop.set()
        watcher.join(timeout=10)

    assert seen and all(versions in ({"slow version 1"}, {"slow version 2"}) for versions in seen), \
        {frozenset(versions) for versions in seen}


def test_the_access_file_is_followed_without_a_restart(publishing: tuple[RunningHost, Path]) -> None:
    host, folder = publishing
    root = folder.parent
    secret = "access/unpublished/secret"
    assert published(host.url, secret).status_code == 404

    token = cli("token", "issue", "reload-tester", "--access", "access.SECRET.json", cwd=root)
    bearer = {"Authorization": f"Bearer {token}"}

    granted = wait_until(lambda: published(host.url, secret, bearer).status_code == 200 or None, timeout=5,
                         what="a token issued after start being accepted")
    assert granted
    assert versions_served(host.url, "base") == {"base version 1"}  # public ones still there

    cli("token", "revoke", "reload-tester", "--access", "access.SECRET.json", cwd=root)

    refused = wait_until(lambda: (response := published(host.url, secret, bearer)).status_code == 401 and response,
                         timeout=5, what="the revocation taking effect")
    assert "revoked" in refused.json()["error"]


def test_reloads_leave_no_temporary_folders_in_the_compiled_cache(publishing: tuple[RunningHost, Path]) -> None:
    host, folder = publishing
    for version in range(2, 6):
        write_library(folder / "churn.json", versioned_library("churn", version))
        wait_until(lambda v=version: versions_served(host.url, "churn") == {f"churn version {v}"})
    assert leftover_temporary_folders(folder / ".compiled") == []
    assert sorted(path.name for path in segment_folder(folder / ".compiled", "churn").iterdir()) == [
        "embeddings.npy", "id_heads.npy", "ids.npy", "meta.json", "record_offsets.npy", "records.bin",
        "sign_codes.npy", "tag_ids.npy", "text_index.bin", "text_index.json", "token_counts.npy"]


def test_a_corrupt_compiled_cache_under_a_running_server_changes_nothing_it_serves(
    publishing: tuple[RunningHost, Path]
) -> None:
    host, folder = publishing
    path = write_library(folder / "cached.json", versioned_library("cached", 1, bits=5))
    wait_until(lambda: versions_served(host.url, "cached") == {"cached version 1"})
    embeddings = segment_folder(folder / ".compiled", "cached") / "embeddings.npy"
    # Corrupt it beside the live file and rename over it, as a disk error might leave it; the
    # running server's memory map keeps the old inode: it serves on, and never opens it again (a
    # worker starting later rebuilds it: the next test).
    damaged = embeddings.with_name("damaged.tmp")
    damaged.write_bytes(embeddings.read_bytes()[:100])
    damaged.rename(embeddings)
    later = time.time_ns() + 2_000_000_000
    os.utime(path, ns=(later, later))  # touched, same content: a reload, the segment kept as it is

    wait_until(lambda: generation(host.url) > 1 and versions_served(host.url, "cached") == {"cached version 1"},
               what="the reload after the touch")
    assert top_bit(host.url, query_vector_of("cached", 4))["text"] == "cached version 1 bit 4"


def test_a_truncated_compiled_cache_is_rebuilt_at_start_not_trusted(
    run_host: Callable[..., RunningHost], tmp_path: Path
) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "cold.json", versioned_library("cold", 1, bits=5))
    first = run_host(folder)
    assert top_bit(first.url, query_vector_of("cold", 2))["text"] == "cold version 1 bit 2"
    stop_host(first)
    embeddings = segment_folder(folder / ".compiled", "cold") / "embeddings.npy"
    with embeddings.open("r+b") as handle:
        handle.truncate(embeddings.stat().st_size // 2)

    second = run_host(folder)

    assert "rebuilding" in second.log() and "compiled cold" in second.log(), second.log()
    assert not embeddings.exists()  # the damaged segment is gone, its library compiled into a new one
    assert np.load(segment_folder(folder / ".compiled", "cold") / "embeddings.npy").shape == (5, DIMENSION)
    for row in range(5):
        assert top_bit(second.url, query_vector_of("cold", row))["text"] == f"cold version 1 bit {row}"


def test_a_server_starting_while_a_file_is_broken_serves_its_last_compiled_version(
    run_host: Callable[..., RunningHost], tmp_path: Path
) -> None:
    # What a worker restarted (or started) mid-publication sees: it must serve what the others serve.
    folder = tmp_path / "libraries"
    path = write_library(folder / "mid.json", versioned_library("mid", 1))
    first = run_host(folder)
    assert versions_served(first.url, "mid") == {"mid version 1"}
    path.write_text(path.read_text()[:50])  # the publisher is half way through writing version 2

    second = run_host(folder)

    assert versions_served(second.url, "mid") == {"mid version 1"}
    assert "mid.json: not valid JSON" in second.log() and "still serving its previous version" in second.log()


def test_files_refused_before_the_start_are_no_change_to_the_watcher(
    run_host: Callable[..., RunningHost], tmp_path: Path
) -> None:
    folder = tmp_path / "libraries"
    good = write_library(folder / "good.json", versioned_library("good", 1))
    (folder / "broken.json").write_text('{"version": 1, "bits": [')
    host = run_host(folder, "--watch-interval", "0.2", "--workers", "1")
    assert "broken.json: not valid JSON" in host.log()
    time.sleep(1)  # some polls: the broken file, unchanged, must not count as a change
    write_library(good, versioned_library("good", 2))
    wait_until(lambda: versions_served(host.url, "good") == {"good version 2"})
    reloads = [line for line in host.log().splitlines() if "libraries reloaded" in line]
    assert len(reloads) == 1, reloads  # the one change, not the start's refused file as well
    assert host.log().count("broken.json: not valid JSON") == 1


def test_sighup_reloads_at_once(run_host: Callable[..., RunningHost], tmp_path: Path) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "hup.json", versioned_library("hup", 1))
    host = run_host(folder, "--watch-interval", "60")  # the poll would not notice for a minute
    before = generation(host.url)
    write_library(folder / "hup.json", versioned_library("hup", 2))
    time.sleep(0.3)
    assert versions_served(host.url, "hup") == {"hup version 1"}

    sent = time.monotonic()
    host.process.send_signal(signal.SIGHUP)

    wait_until(lambda: versions_served(host.url, "hup") == {"hup version 2"}, timeout=5, what="the SIGHUP reload")
    assert time.monotonic() - sent < 2
    assert generation(host.url) == before + 1
    assert host.process.poll() is None


def test_a_file_replaced_while_it_is_hashed_is_never_planned_under_another_versions_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publisher writes while a touched file is hashed; later it rolls back to the first bytes.

    The plan must never pair one version's content with another's size and time: else the new
    version would be taken as unchanged (or the rollback served as the second version).
    """
    from host.catalog import generations
    from host.catalog.generations import load_catalog

    source = write_library(tmp_path / "race.json", versioned_library("race", 1))
    first_bytes = source.read_bytes()
    load_catalog(tmp_path)
    later = time.time_ns() + 2_000_000_000
    os.utime(source, ns=(later, later))  # touched: the next load hashes it
    hash_of = generations.file_sha256

    def hash_then_a_publisher_writes(path: Path) -> str:
        digest = hash_of(path)
        write_library(path, versioned_library("race", 2))  # the same size, another time
        return digest

    monkeypatch.setattr(generations, "file_sha256", hash_then_a_publisher_writes)
    load_catalog(tmp_path)
    monkeypatch.undo()

    assert load_catalog(tmp_path).library("race").record(0)["text"] == "race version 2 bit 0"
    source.write_bytes(first_bytes)  # the rollback: version 1's bytes, a new mtime
    even_later = later + 2_000_000_000
    os.utime(source, ns=(even_later, even_later))
    assert load_catalog(tmp_path).library("race").record(0)["text"] == "race version 1 bit 0"


def test_a_file_published_while_the_server_was_still_loading_is_picked_up(tmp_path: Path) -> None:
    """`serve` loads (a first compile can take minutes), then starts watching: what changed in between counts."""
    from host.catalog.generations import Catalog, load_catalog
    from host.catalog.reloader import LibraryWatcher

    folder = tmp_path / "libraries"
    path = write_library(folder / "early.json", versioned_library("early", 1))
    catalog = load_catalog(folder)
    write_library(path, versioned_library("early", 2, bits=4))  # published before the watcher starts
    later = time.time_ns() + 2_000_000_000
    os.utime(path, ns=(later, later))

    class Host:
        def __init__(self, catalog: Catalog) -> None:
            self.catalog = catalog

        def install(self, catalog: Catalog) -> None:
            self.catalog = catalog

    host = Host(catalog)
    watcher = LibraryWatcher(host, folder, cache_dir=None, max_bytes=1 << 30, interval=0.05)
    watcher.start()
    try:
        wait_until(lambda: host.catalog.generation > 1, timeout=5, what="the watcher noticing the early publication")
    finally:
        watcher.stop()
    assert host.catalog.library("early").bit_count == 4
