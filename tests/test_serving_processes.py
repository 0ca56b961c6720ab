"""Serving processes (issue 20): one worker per core by default, each saying the memory it costs;
the libraries' memory maps populated at load while they fit within --populate-bytes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from librarian import b64, make_library, segment_folder, unit_vectors, write_library

from host.catalog.generations import load_catalog
from host.service.harness import RunningHost
from host.service.process import cores
from host.store.residency import Residency, mapped_arrays, mapped_bytes

BITS, DIMENSION = 2048, 128  # 1 MiB of vectors: 256 pages
SERVING_LINE = re.compile(r"process (\d+) serving: ([\d,]+) MiB of memory of its own")


def resident(pid: int | str, path: Path) -> tuple[int, int]:
    """(bytes mapped, bytes resident) of every mapping of `path` in process `pid` (/proc/PID/smaps)."""
    size = rss = 0
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = len(fields) >= 6 and fields[5] == str(path)
        elif inside and fields[0] == "Size:":
            size += int(fields[1]) * 1024
        elif inside and fields[0] == "Rss:":
            rss += int(fields[1]) * 1024
    return size, rss


def two_libraries(folder: Path) -> Path:
    """Two libraries in two segments: b published after a was compiled (files published together share one)."""
    write_library(folder / "a.json", make_library(unit_vectors(BITS, DIMENSION, seed=1)))
    load_catalog(folder)
    write_library(folder / "b.json", make_library(unit_vectors(BITS, DIMENSION, seed=2)))
    load_catalog(folder)
    return folder


def vectors_file(folder: Path, name: str) -> Path:
    return segment_folder(folder / ".compiled", name) / "embeddings.npy"


def serving_lines(host: RunningHost) -> list[tuple[int, int]]:
    return [(int(pid), int(mib.replace(",", ""))) for pid, mib in SERVING_LINE.findall(host.log())]


def answers(host: RunningHost, queries: int = 6) -> list[bytes]:
    """The same queries, each on a new connection (so that several workers answer some)."""
    vectors = unit_vectors(queries, DIMENSION, seed=9)
    return [httpx.post(f"{host.url}/", json={"query_embedding": b64(vector), "count": 5, "count_type": "bit"}).content
            for vector in vectors]


def test_a_library_s_maps_are_populated_at_load_so_no_query_faults_them_in(
        run_host: Callable[..., RunningHost], tmp_path: Path) -> None:
    folder = two_libraries(tmp_path / "libraries")

    host = run_host(folder)

    for name in ("a", "b"):
        size, rss = resident(host.process.pid, vectors_file(folder, name))
        assert size >= BITS * DIMENSION * 4 and rss == size, (name, size, rss)
    assert "populated the memory maps of 2 segments" in host.log()


def test_libraries_over_populate_bytes_are_left_to_fault_in_as_queries_touch_them(
        run_host: Callable[..., RunningHost], tmp_path: Path) -> None:
    folder = two_libraries(tmp_path / "libraries")
    one_library = mapped_bytes(load_catalog(folder).library("a").segment)  # type: ignore[union-attr]

    host = run_host(folder, "--populate-bytes", str(one_library + one_library // 2))

    first, second = (resident(host.process.pid, vectors_file(folder, name)) for name in ("a", "b"))
    assert first[1] == first[0], "the first library fits: populated"
    assert second[1] < second[0] // 4, "the second would go over: only what loading read is resident"
    assert "populated the memory maps of 1 segment (" in host.log()
    assert "; 1 segment (" in host.log() and "read as queries touch them: over --populate-bytes" in host.log()


def test_populate_bytes_0_populates_nothing_and_answers_the_same(
        run_host: Callable[..., RunningHost], tmp_path: Path) -> None:
    folder = two_libraries(tmp_path / "libraries")
    populated = run_host(folder)
    untouched = run_host(folder, "--populate-bytes", "0")

    size, rss = resident(untouched.process.pid, vectors_file(folder, "a"))
    assert rss < size // 4
    assert "populated the memory maps" not in untouched.log()
    assert answers(untouched) == answers(populated)


def test_residency_populates_while_the_budget_allows_and_forgets_libraries_no_longer_served(tmp_path: Path) -> None:
    catalog = load_catalog(two_libraries(tmp_path / "libraries"))
    first, second = (library.segment for library in catalog.libraries)
    residency = Residency(budget=mapped_bytes(first) + mapped_bytes(second) // 2)

    done = residency.admit(catalog.segments)

    assert (done.segments, done.left) == (1, 1)
    assert residency.is_populated(first) and not residency.is_populated(second)
    assert [array.nbytes for array in mapped_arrays(first)] == [
        first.embeddings.nbytes, first.records.nbytes, first.sign_codes.nbytes]  # no clusters: sign codes too
    assert residency.admit(catalog.segments).segments == 0, "nothing populated twice"
    # A generation without the first library: its bytes no longer count, the second now fits.
    assert residency.admit((second,)).segments == 1 and residency.is_populated(second)
    assert "over --populate-bytes" in done.describe(residency.budget)


def test_serve_starts_one_worker_per_core_by_default_and_each_says_the_memory_it_costs(
        run_host: Callable[..., RunningHost], tmp_path: Path) -> None:
    folder = two_libraries(tmp_path / "libraries")

    host = run_host(folder, workers=None)  # serve's own default

    host.wait_until(lambda: len(serving_lines(host)) == cores(), timeout=60, what="say each worker's memory")
    pids = {pid for pid, _ in serving_lines(host)}
    assert len(pids) == cores() and all(mib > 0 for _, mib in serving_lines(host))
    if cores() > 1:
        assert host.process.pid not in pids, "the workers serve; the first process supervises"
        assert f"{cores()} worker processes (one per core)" in host.log()


def test_workers_1_serves_from_one_process(run_host: Callable[..., RunningHost], tmp_path: Path) -> None:
    host = run_host(two_libraries(tmp_path / "libraries"), "--workers", "1")

    host.wait_until(lambda: bool(serving_lines(host)), timeout=60, what="say its memory")
    assert [pid for pid, _ in serving_lines(host)] == [host.process.pid]
    assert "worker processes" not in host.log()


def test_workers_n_start_n_workers_that_give_the_same_answers(run_host: Callable[..., RunningHost], tmp_path: Path) -> None:
    folder = two_libraries(tmp_path / "libraries")
    alone = run_host(folder, "--workers", "1")

    host = run_host(folder, "--workers", "3")

    host.wait_until(lambda: len(serving_lines(host)) == 3, timeout=60, what="say each worker's memory")
    assert len({pid for pid, _ in serving_lines(host)}) == 3
    assert answers(host, 12) == answers(alone, 12)


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_fewer_than_one_worker_is_refused_with_a_clear_error(tmp_path: Path, workers: str) -> None:
    import subprocess

    from host.service.harness import child_environment, host_command

    folder = two_libraries(tmp_path / "libraries")
    finished = subprocess.run(host_command("serve", "--libraries", str(folder), "--workers", workers,
                                           "--embedder", "none"),
                              capture_output=True, text=True, env=child_environment(), timeout=120, check=False)
    assert finished.returncode == 1
    assert f"--workers must be at least 1, got {workers}" in finished.stderr
