"""`polymath-host serve | build | validate`, run as a user runs them: a real process in a folder.

Each test works in its own tmp_path, the way a publisher works in a folder holding `libraries/`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from librarian import TEST_MODEL, b64, brute_force_ranking, make_library, segment_folder, unit_vectors, write_library

PROJECT = Path(__file__).resolve().parents[1]
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(PROJECT)}


def polymath_host(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "host", *args], cwd=cwd, env=ENVIRONMENT,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def libraries(tmp_path: Path) -> Path:
    """tmp_path/libraries with two small good libraries."""
    root = tmp_path / "libraries"
    write_library(root / "essays.json", make_library(unit_vectors(3)))
    write_library(root / "access" / "staff" / "plans.json", make_library(unit_vectors(2, seed=1), [4, 4]))
    return root


def broken_library(path: Path) -> Path:
    library = make_library(unit_vectors(2))
    del library["bits"][1]["text"]
    return write_library(path, library)


# ---- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "compile", "build", "validate"])
def test_each_command_has_help(tmp_path, command):
    result = polymath_host(command, "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: polymath-host {command}")


def test_serve_help_explains_the_defaults(tmp_path):
    help_text = " ".join(polymath_host("serve", "--help", cwd=tmp_path).stdout.split())
    for default in ["default: libraries/", "default 127.0.0.1", "0.0.0.0", "default 8080", "access.SECRET.json"]:
        assert default in help_text


def test_top_level_help_lists_the_commands(tmp_path):
    result = polymath_host("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in ["serve", "compile", "build", "validate", "import", "access", "token"]:
        assert f"    {command} " in result.stdout


def test_version_names_the_installed_version(tmp_path):
    result = polymath_host("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("polymath-host ")


def test_no_command_prints_help_and_fails(tmp_path):
    result = polymath_host(cwd=tmp_path)
    assert result.returncode == 2 and "usage: polymath-host" in result.stdout


# ---- validate -----------------------------------------------------------------------------------


def test_validate_accepts_good_files_and_says_what_they_hold(tmp_path, libraries):
    result = polymath_host("validate", "libraries", cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"{Path('libraries/access/staff/plans.json')}: ok, 2 bits, {TEST_MODEL}, dimension 8",
        f"{Path('libraries/essays.json')}: ok, 3 bits, {TEST_MODEL}, dimension 8",
    ]


def test_validate_reports_duplicate_bits_it_dropped(tmp_path):
    library = make_library(unit_vectors(2))
    library["bits"].append(library["bits"][0])
    write_library(tmp_path / "dupes.json", library)

    result = polymath_host("validate", "dupes.json", cwd=tmp_path)

    assert result.returncode == 0
    assert result.stdout.strip() == f"dupes.json: ok, 2 bits, {TEST_MODEL}, dimension 8, 1 duplicate bits dropped"


def test_validate_prints_one_line_per_problem_naming_the_file_and_exits_1(tmp_path, libraries):
    broken_library(libraries / "broken.json")
    (libraries / "stray.json").write_text("{oops")

    result = polymath_host("validate", "libraries", "missing.json", cwd=tmp_path)

    assert result.returncode == 1
    lines = result.stdout.splitlines()
    problems = [line for line in lines if ": ok, " not in line]
    assert len(problems) == 3
    assert problems[0] == f"{Path('libraries/broken.json')}: bits[1].text: must be a string, got None"
    assert problems[1].startswith(f"{Path('libraries/stray.json')}: not valid JSON: ")
    assert problems[2] == "missing.json: does not exist"
    assert len(lines) == 2 + len(problems)  # the two good files still get their "ok"


def test_validate_respects_the_size_limit(tmp_path, libraries):
    result = polymath_host("validate", "libraries/essays.json", "--max-library-bytes", "100", cwd=tmp_path)
    assert result.returncode == 1
    assert "over the 100-byte limit" in result.stdout


# ---- build -------------------------------------------------------------------------------------


def test_build_compiles_and_a_second_build_only_opens(tmp_path, libraries):
    first = polymath_host("build", "libraries", cwd=tmp_path)

    assert first.returncode == 0, first.stderr
    assert f"compiled 2 libraries together (access/staff/plans, essays): 5 bits, {TEST_MODEL}" in first.stderr
    assert "2 libraries in 1 segment, 2 compiled now" in first.stderr
    assert "libraries: 2 libraries, 5 bits ready" in first.stderr
    assert (segment_folder(libraries / ".compiled", "essays") / "meta.json").exists()

    second = polymath_host("build", "libraries", cwd=tmp_path)

    assert second.returncode == 0
    assert "2 libraries in 1 segment, none compiled" in second.stderr
    assert "compiled " not in second.stderr.replace("none compiled", "")


def test_build_reports_bad_files_and_still_compiles_the_rest(tmp_path, libraries):
    broken = broken_library(libraries / "broken.json")

    result = polymath_host("build", "libraries", cwd=tmp_path)

    assert result.returncode == 1
    assert f"error: {Path('libraries') / broken.name}: bits[1].text: must be a string" in result.stderr
    assert (segment_folder(libraries / ".compiled", "essays") / "meta.json").exists()


def test_build_of_a_missing_path_fails_clearly(tmp_path):
    result = polymath_host("build", "nowhere", cwd=tmp_path)
    assert result.returncode == 1 and "error: nowhere does not exist" in result.stderr


def test_build_writes_to_the_given_cache_dir(tmp_path, libraries):
    result = polymath_host("build", "libraries", "--cache-dir", "cache", cwd=tmp_path)
    assert result.returncode == 0
    assert (segment_folder(tmp_path / "cache", "essays") / "meta.json").exists()


# ---- serve -------------------------------------------------------------------------------------


def test_serve_without_a_libraries_folder_exits_1_saying_what_to_do(tmp_path):
    result = polymath_host("serve", cwd=tmp_path)  # no libraries/ here
    assert result.returncode == 1
    assert "error: libraries does not exist; pass --libraries PATH" in result.stderr


def test_serve_with_a_missing_libraries_path_exits_1_naming_it(tmp_path):
    result = polymath_host("serve", "--libraries", "nowhere", cwd=tmp_path)
    assert result.returncode == 1
    assert "error: nowhere does not exist" in result.stderr


def test_serve_with_a_missing_access_file_exits_1_saying_how_to_create_it(tmp_path, libraries):
    result = polymath_host("serve", "--access", "keys.SECRET.json", cwd=tmp_path)
    assert result.returncode == 1
    assert "access file keys.SECRET.json does not exist" in result.stderr
    assert "polymath-host access init" in result.stderr


def test_serve_answers_queries_with_the_most_similar_public_bits(tmp_path, run_host):
    vectors = unit_vectors(6, seed=3)
    write_library(tmp_path / "libraries" / "essays.json", make_library(vectors))
    query = vectors[4] + 0.1 * vectors[1]

    host = run_host(tmp_path / "libraries")
    answer = httpx.post(f"{host.url}/", json={"query_embedding": b64(query), "count": 3, "count_type": "bit"})

    assert answer.status_code == 200, answer.text
    urls = [bit["info"]["url"] for bit in answer.json()["bits"]]
    assert urls == [f"https://example.com/{row}" for row in brute_force_ranking(vectors, query)[:3]]
    assert "compiled essays: 6 bits" in host.log()


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def serve_here(tmp_path: Path) -> Iterator:
    """Run `polymath-host serve ARGS...` in tmp_path until it answers /healthz; stop it after."""
    processes: list[subprocess.Popen] = []

    def serve(*args: str, port: int) -> str:
        with (tmp_path / "serve.log").open("w") as log:
            process = subprocess.Popen([sys.executable, "-m", "host", "serve", *args], cwd=tmp_path,
                                       env=ENVIRONMENT, stdout=log, stderr=subprocess.STDOUT)
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"serve exited with {process.returncode}:\n{(tmp_path / 'serve.log').read_text()}")
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                return url
            except httpx.TransportError:
                time.sleep(0.1)
        pytest.fail(f"serve did not answer within 30 s:\n{(tmp_path / 'serve.log').read_text()}")

    yield serve
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_serve_with_no_arguments_serves_the_libraries_folder_it_finds(tmp_path, libraries, serve_here):
    port = unused_port()
    url = serve_here("--port", str(port), port=port)  # --libraries, --access and --host left to their defaults

    listed = httpx.get(f"{url}/libraries").json()["libraries"]
    answer = httpx.post(f"{url}/", data={"count": "2", "count_type": "bit"})

    assert [library["name"] for library in listed] == ["essays"]  # access/staff/plans needs a token
    assert answer.status_code == 200 and len(answer.json()["bits"]) == 2
    log = (tmp_path / "serve.log").read_text()
    assert "(public bits only until access.SECRET.json is created: polymath-host access init)" in log


def test_serve_reuses_what_build_compiled(tmp_path, libraries, serve_here):
    assert polymath_host("build", "libraries", cwd=tmp_path).returncode == 0
    port = unused_port()

    serve_here("--port", str(port), port=port)

    log = (tmp_path / "serve.log").read_text()
    assert "2 libraries in 1 segment, none compiled" in log
    assert "compiled " not in log.replace("none compiled", "")


def test_serve_limits_each_querys_matrix_product_to_one_blas_thread_by_default():
    probe = (
        "import numpy, threadpoolctl\n"
        "from host.service.process import limit_blas_threads\n"
        "from host.service.settings import Settings\n"
        "limit_blas_threads(Settings().blas_threads)\n"
        "print(sorted({pool['num_threads'] for pool in threadpoolctl.threadpool_info() if pool['user_api'] == 'blas'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=PROJECT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1]"
