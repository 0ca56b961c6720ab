"""Hostile clients and careless publishers, against a real `serve`: each costs them, not the host.

Every test here reproduces one class of attack or mistake that once took the host down or let it
say more than it should, then checks the outcome: a clean refusal, bounded memory, and service
that goes on for everyone else.
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
from components import unavailable
from conftest import PROJECT, RunningHost
from librarian import TEST_MODEL, b64, make_library, unit_vectors, write_library

from access import ANONYMOUS
from host.catalog.generations import load_catalog
from host.library.omit import parse_omit
from host.results.answers import build_result
from host.search.query import Query, SearchPolicy, run_query
from host.web.responses import render_json
from host.web.server import DESCRIPTORS_KEPT_FREE, OpenFileLimit, connection_budget
from host.web.state import ByteBoundedCache

DIMENSION = 384
VECTORS = unit_vectors(600, DIMENSION, seed=61)
LONG_TEXT = " ".join(f"word{n}" for n in range(300))  # ~2.4 KB a bit


def wait_until(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        time.sleep(0.05)
    return result


def big_library() -> dict[str, Any]:
    """600 bits of 384 dimensions and ~2.4 KB of text: every answer with embeddings is large."""
    library = make_library(VECTORS)
    for row, bit in enumerate(library["bits"]):
        bit["text"] = f"bit {row} {LONG_TEXT}"
    return library


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("big") / "libraries"
    write_library(folder / "big.json", big_library())
    return folder


def ask(url: str, **fields: Any) -> httpx.Response:
    body = {"query_embedding": b64(VECTORS[0]), "count": 10, "count_type": "bit", **fields}
    return httpx.post(f"{url}/", json=body, timeout=30)


def rss(host: RunningHost) -> int:
    return int(psutil.Process(host.process.pid).memory_info().rss)


def server_connections(host: RunningHost, ports: set[int]) -> int:
    """How many of the server's TCP connections lead to these client ports."""
    return sum(1 for connection in psutil.Process(host.process.pid).net_connections("tcp")
               if connection.raddr and connection.raddr.port in ports)


def open_socket(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


# ---- answers: bounded in bytes, cached by bytes, never pinned by a client that does not read ----------


def test_an_answer_over_the_byte_limit_is_a_400_that_says_to_ask_for_less(run_host, big_folder: Path) -> None:
    host = run_host(big_folder, "--max-answer-bytes", "1000000")

    everything = ask(host.url, count=100_000, omit="")
    smaller = ask(host.url, count=100, omit="embedding")

    assert everything.status_code == 400
    assert everything.json()["error"].endswith(
        "over this host's 1,000,000-byte limit: ask for a smaller count, or omit embedding")
    assert smaller.status_code == 200 and len(smaller.content) < 1_000_000
    assert ask(host.url).status_code == 200


def test_many_distinct_large_answers_leave_memory_where_it_was(run_host, big_folder: Path) -> None:
    # Each answer is ~0.8 MB; the old cache kept 2,048 of them whatever their size.
    host = run_host(big_folder, "--answer-cache-bytes", "4000000")
    ask(host.url, count=200, omit="").raise_for_status()
    before = rss(host)

    for row in range(120):
        response = ask(host.url, query_embedding=b64(VECTORS[row]), count=200, omit="")
        assert response.status_code == 200 and len(response.content) > 700_000

    grown = rss(host) - before
    assert grown < 40_000_000, f"memory grew by {grown:,} bytes over 120 answers of ~0.8 MB"


def test_distinct_large_answers_at_once_leave_memory_within_the_cache_limit_with_the_embedder(
        run_host, big_folder: Path) -> None:
    # With the `embed` extra the local model (~160 MB) once loaded after /healthz answered, and
    # threads rendering answers at once each kept a malloc arena of freed pages: 16 clients took a
    # worker 55-160 MB past where it was, whatever the answer cache's limit.
    for module in ("onnxruntime", "tokenizers", "mcp"):
        if importlib.util.find_spec(module) is None:
            unavailable(f"this test runs with the embed and mcp extras; {module} is not installed")
    cache_bytes = 8 << 20
    host = run_host(big_folder, "--answer-cache-bytes", str(cache_bytes), embedder=True)
    assert "text queries for sentence-transformers:all-MiniLM-L6-v2" in host.log()
    ask(host.url, count=200, omit="").raise_for_status()
    before = rss(host)

    def distinct_large_answer(row: int) -> int:  # ~0.9 MB, rendered whole and cached; or ~2.7 MB, streamed
        response = ask(host.url, query_embedding=b64(VECTORS[row]), count=(200, 600)[row % 2], omit="")
        assert response.status_code == 200 and len(response.content) > 800_000
        return len(response.content)

    with ThreadPoolExecutor(16) as clients:
        sent = sum(clients.map(distinct_large_answer, range(64)))

    grown = rss(host) - before
    assert grown <= cache_bytes + 50_000_000, f"memory grew by {grown:,} bytes over 64 answers ({sent:,} bytes)"


def test_the_answer_cache_counts_what_its_entries_cost_not_only_their_bodies() -> None:
    # A 384-dimension query's key holds 1.5 KB of vector beside a ~300-byte answer: counting the
    # bodies alone let distinct small answers hold seven times the cache's limit.
    cache = ByteBoundedCache(2 << 20)
    vectors = unit_vectors(20_000, DIMENSION, seed=63)
    omit = parse_omit("embedding")
    tracemalloc.start()
    try:
        for vector in vectors:
            key = (1, "sentence-transformers:all-MiniLM-L6-v2", vector.tobytes(), 1, "bit", omit, None, None, None,
                   frozenset(), "json", False, None)  # as host/web/query_endpoint.py makes them
            cache.put(key, b"x" * 300)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held <= cache.max_bytes, f"a cache of {cache.max_bytes:,} bytes holds {held:,}"


def test_clients_that_never_read_their_answers_are_dropped_and_others_are_served(run_host, big_folder: Path) -> None:
    host = run_host(big_folder, "--write-timeout", "1")
    body = json.dumps({"query_embedding": b64(VECTORS[1]), "count": 600, "count_type": "bit", "omit": ""}).encode()
    request = (f"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               .encode() + body)
    readers = []
    for _ in range(8):
        reader = open_socket(host.url)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes ~2.5 MB answers a few KB at a time
        reader.sendall(request)
        readers.append(reader)
    ports = {reader.getsockname()[1] for reader in readers}
    try:
        wait_until(lambda: server_connections(host, ports) == 8, "the slow readers connecting")
        assert ask(host.url).status_code == 200  # served while they stall
        wait_until(lambda: server_connections(host, ports) == 0, "the server dropping the stalled readers")
        assert ask(host.url).status_code == 200
    finally:
        for reader in readers:
            reader.close()


def test_a_large_answer_is_streamed_as_it_is_rendered_byte_for_byte(run_host, big_folder: Path) -> None:
    # Over 1 MiB, an answer is rendered a few bits at a time as it is sent: a client that reads
    # slowly holds those bits, not the whole answer (the soak's abuse phase measures the memory).
    host = run_host(big_folder)
    fields = {"query_embedding": b64(VECTORS[2]), "count": 600, "count_type": "bit", "omit": ""}

    streamed = httpx.post(f"{host.url}/", json=fields, timeout=60)

    index = load_catalog(big_folder).models[TEST_MODEL]
    selection = run_query(index, Query(VECTORS[2], 600, "bit"), ANONYMOUS, SearchPolicy())
    assert streamed.status_code == 200 and streamed.headers.get("transfer-encoding") == "chunked"
    assert len(streamed.content) > 1 << 20
    assert streamed.content == render_json(build_result(index, selection, parse_omit("")))


def larger_library(folder: Path) -> np.ndarray:
    """1,500 bits of ~4.5 KB: answers of ~7 MB, more than the kernel's buffers take at once."""
    vectors = unit_vectors(1500, DIMENSION, seed=62)
    library = make_library(vectors)
    for row, bit in enumerate(library["bits"]):
        bit["text"] = f"bit {row} {LONG_TEXT}"
    write_library(folder / "larger.json", library)
    return vectors


def test_a_streamed_answer_is_neither_cut_nor_left_hanging_by_the_body_read_timer(run_host, tmp_path: Path) -> None:
    # The body-read timer once also timed the wait for a disconnect while an answer streamed: past
    # --body-read-timeout the stream stopped, and a client that did not read was never dropped.
    vectors = larger_library(tmp_path / "libraries")
    host = run_host(tmp_path / "libraries", "--body-read-timeout", "1", "--write-timeout", "2")
    fields = {"query_embedding": b64(vectors[4]), "count": 1500, "count_type": "bit", "omit": ""}
    body = json.dumps(fields).encode()
    request = (f"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               .encode() + body)
    stalled = open_socket(host.url)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(request)
    try:
        received = b""
        with httpx.stream("POST", f"{host.url}/", json={**fields, "query_embedding": b64(vectors[5])},
                          timeout=60) as response:
            for piece in response.iter_raw(1 << 16):
                received += piece
                time.sleep(0.02)  # slower than the body-read timer: ~2 s in all
        wait_until(lambda: server_connections(host, {stalled.getsockname()[1]}) == 0,
                   "the server dropping the reader that never reads")
    finally:
        stalled.close()
    assert len(received) > 6 << 20 and json.loads(received)["details"]["counts"]["bits"] == 1500


def kernel_sockets(host: RunningHost, ports: set[int]) -> list[str]:
    """The server side of connections to these client ports still known to the kernel, whoever holds them."""
    return [f"{connection.status} (pid {connection.pid})" for connection in psutil.net_connections("tcp")
            if connection.laddr and connection.laddr.port == host.port
            and connection.raddr and connection.raddr.port in ports]


def test_a_dropped_reader_leaves_no_unsent_answer_behind_in_the_kernel(run_host, big_folder: Path) -> None:
    # ~2.5 MB answers fit in the kernel's send buffer (up to 4 MiB): the server writes them whole and
    # the connection goes idle. A plain close would leave each socket to the kernel, still holding its
    # unsent answer and probing a client that answers but never reads, for as long as that client likes.
    host = run_host(big_folder, "--header-timeout", "1", "--write-timeout", "1")
    body = json.dumps({"query_embedding": b64(VECTORS[2]), "count": 600, "count_type": "bit", "omit": ""}).encode()
    request = (f"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               .encode() + body)
    readers = []
    for _ in range(4):
        reader = open_socket(host.url)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.sendall(request)
        readers.append(reader)
    ports = {reader.getsockname()[1] for reader in readers}
    try:
        wait_until(lambda: kernel_sockets(host, ports), "the readers connecting")
        wait_until(lambda: server_connections(host, ports) == 0, "the server dropping the readers")
        time.sleep(0.5)

        assert kernel_sockets(host, ports) == []
        assert ask(host.url).status_code == 200
    finally:
        for reader in readers:
            reader.close()


# ---- connections: idle and half-open ones are closed, a cap refuses cleanly -------------------------------


def test_idle_and_half_open_connections_are_closed(run_host, big_folder: Path) -> None:
    host = run_host(big_folder, "--header-timeout", "1")
    idle = [open_socket(host.url) for _ in range(30)]
    half = [open_socket(host.url) for _ in range(30)]
    for connection in half:
        connection.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: applica")
    ports = {connection.getsockname()[1] for connection in idle + half}
    try:
        wait_until(lambda: server_connections(host, ports) == 0, "the server closing idle and half-open connections")
        assert ask(host.url).status_code == 200
        assert all(connection.recv(1024) == b"" for connection in idle + half)
    finally:
        for connection in idle + half:
            connection.close()


def half_sent_body(url: str) -> socket.socket:
    """A connection busy with a request: its headers are in, its body is still coming."""
    connection = open_socket(url)
    connection.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000"
                       b"\r\n\r\n{\"count\": ")
    return connection


def test_past_the_cap_the_longest_idle_make_room_and_only_busy_connections_meet_a_503(run_host, big_folder: Path) -> None:
    host = run_host(big_folder, "--max-connections", "40", "--body-read-timeout", "120")
    idle = [open_socket(host.url) for _ in range(30)]
    half = [open_socket(host.url) for _ in range(30)]
    for connection in half:
        connection.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: applica")
    newest = {connection.getsockname()[1] for connection in (idle + half)[20:]}
    busy: list[socket.socket] = []
    try:
        wait_until(lambda: server_connections(host, newest) == 40, "the newest 40 connections being held")
        assert ask(host.url).status_code == 200  # past the cap: the longest idle made room
        idle[0].settimeout(10)
        assert idle[0].recv(1024) == b""

        for connection in idle + half:
            connection.close()
        busy = [half_sent_body(host.url) for _ in range(40)]
        ports = {connection.getsockname()[1] for connection in busy}
        wait_until(lambda: server_connections(host, ports) == 40, "the busy connections being held")
        refused = ask(host.url)
        assert refused.status_code == 503  # no idle connection to close: a clean refusal, not a hang
        assert refused.json() == {"error": "this host holds as many connections as it allows: try again in a moment"}
        assert refused.headers["retry-after"] == "1"
        assert server_connections(host, ports) == 40  # a busy connection is never closed to make room
    finally:
        for connection in idle + half + busy:
            connection.close()


def test_idle_connections_past_what_descriptors_allow_make_room_for_one_that_asks(run_host, big_folder: Path) -> None:
    # Under an open-file limit of 256 that serve cannot raise (soft = hard), the default cap of 1,000
    # connections would outgrow the descriptors: 300 idle clients would leave none for a real one,
    # which then waited unanswered in the listen queue. The cap is derived from the limit instead,
    # and past it the oldest idle connection is closed, so one that sends a request is served.
    host = run_host(big_folder, "--header-timeout", "600", open_files=(256, 256))
    idle: list[socket.socket] = []
    try:
        for _ in range(300):
            idle.append(open_socket(host.url))
        newest = {idle[-1].getsockname()[1]}
        wait_until(lambda: server_connections(host, newest) == 1, "the newest idle connection being held")

        answered = ask(host.url)

        assert answered.status_code == 200
        idle[0].settimeout(10)
        assert idle[0].recv(1) == b"", "the oldest idle connection is closed first"
        assert server_connections(host, newest) == 1, "the newest idle connection is kept"
        cap = int(re.search(r"up to ([\d,]+) connections per worker", host.log()).group(1).replace(",", ""))
        held = server_connections(host, {connection.getsockname()[1] for connection in idle})
        assert held == cap - 1 and 64 <= cap < 256 - 12  # headroom for the libraries, the embedder and logs
    finally:
        for connection in idle:
            connection.close()


def test_serve_raises_its_open_file_limit_before_it_opens_its_libraries(run_host, tmp_path: Path) -> None:
    # 40 libraries map 4 files each: more than a soft limit of 64 allows. Raised only after loading,
    # as it once was, the limit let the libraries past the 64th descriptor fail to load.
    folder = tmp_path / "libraries"
    for number in range(40):
        write_library(folder / f"library-{number}.json", make_library(unit_vectors(2, 8, seed=number)))

    host = run_host(folder, open_files=(64, 4096))

    assert psutil.Process(host.process.pid).rlimit(psutil.RLIMIT_NOFILE) == (4096, 4096)
    assert len(httpx.get(f"{host.url}/libraries").json()["libraries"]) == 40
    assert "the open-file limit of 4,096 (raised from 64)" in host.log()


def test_the_connection_cap_keeps_the_open_descriptors_twice_over_and_says_so() -> None:
    limit = OpenFileLimit(found=1024, soft=1024, hard=1024)

    assert connection_budget(1000, limit, in_use=10)[0] == 1024 - 2 * 10 - DESCRIPTORS_KEPT_FREE
    assert connection_budget(500, limit, in_use=10) == (500, "up to 500 connections per worker (--max-connections; "
                                                             "the open-file limit of 1,024 (the hard limit) affords 940)")
    cap, why = connection_budget(1000, limit, in_use=600)
    assert cap == 1 and "raise the hard limit" in why


def test_made_up_method_names_add_no_metrics_series(run_host, big_folder: Path) -> None:
    host = run_host(big_folder)
    with httpx.Client() as client:
        for n in range(300):
            client.request(f"MADEUP{n}", f"{host.url}/")
    metrics = httpx.get(f"{host.url}/metrics").text

    series = [line for line in metrics.splitlines() if line.startswith("polymath_requests_total{")]
    assert not any("MADEUP" in line for line in series)
    assert any('method="other"' in line for line in series)
    assert len(series) < 20


# ---- publishers' mistakes: one bad file is one refused file --------------------------------------------


def library_text_with(bit_field: str, raw_value: str) -> str:
    """A one-bit library file whose bit carries a raw JSON value (numbers json.dumps would not write)."""
    bit = {"text": "bad", "embedding": b64(unit_vectors(1, 8)[0]), "token_count": 1, "info": {"url": "https://x/"}}
    bit[bit_field] = "@@VALUE@@"
    return json.dumps({"version": 1, "embedding_model": TEST_MODEL, "bits": [bit]}).replace('"@@VALUE@@"', raw_value)


BAD_FILES = {
    "token-count-2-63.json": (library_text_with("token_count", str(2**63)), "token_count: must be an integer from 0"),
    "token-count-3e9.json": (library_text_with("token_count", "3000000000"), "token_count: must be an integer from 0"),
    "deep.json": ('{"version": 1, "details": ' + "[" * 5000 + "]" * 5000 + "}", "not valid JSON: nested too deeply"),
    "digits.json": (library_text_with("token_count", "7" * 4400), "not valid JSON: a number has more than 4300 digits"),
    "huge-values.json": (json.dumps(make_library(np.full((1, 8), 3e38, dtype=np.float32))),
                         "embedding: has a value of magnitude 3e+38"),
}


def test_bad_files_are_refused_one_by_one_while_everything_else_serves_and_publishes(run_host, tmp_path: Path) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "good.json", make_library(unit_vectors(4, 8, seed=1)))
    for name, (text, _) in BAD_FILES.items():
        (folder / name).write_text(text)

    host = run_host(folder, "--watch-interval", "0.2")
    listed = [library["name"] for library in httpx.get(f"{host.url}/libraries").json()["libraries"]]
    write_library(folder / "later.json", make_library(unit_vectors(2, 8, seed=2)))
    wait_until(lambda: "later" in httpx.get(f"{host.url}/libraries").text, "the next publication being served")
    validated = subprocess.run([sys.executable, "-m", "host", "validate", str(folder)], capture_output=True, text=True,
                               cwd=PROJECT, timeout=60)

    assert listed == ["good"]
    for name, (_, message) in BAD_FILES.items():
        assert any(name in line and message in line for line in host.log().splitlines()), (name, host.log())
        assert any(name in line and message in line for line in validated.stdout.splitlines()), name
    assert validated.returncode == 1


# ---- the access file created after serve started ---------------------------------------------------------


def test_an_access_file_created_after_serve_started_is_followed(run_host, tmp_path: Path) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "public.json", make_library(unit_vectors(2, 8, seed=3)))
    write_library(folder / "access" / "unpublished" / "drafts.json", make_library(unit_vectors(2, 8, seed=4)))
    host = run_host(folder, cwd=tmp_path)  # no access file yet: the README's own order

    def admin(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "host", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env={"PYTHONPATH": str(PROJECT), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    admin("access", "init")
    token = admin("token", "issue", "alice@example.com", "--tag", "unpublished")
    bearer = {"Authorization": f"Bearer {token}"}

    listed = wait_until(lambda: (response := httpx.get(f"{host.url}/libraries", headers=bearer)).status_code == 200
                        and response.json()["libraries"], "the new access file being followed")
    assert [library["name"] for library in listed] == ["access/unpublished/drafts", "public"]


# ---- quieter leaks --------------------------------------------------------------------------------------


def public_view(url: str) -> tuple[Any, list[str]]:
    metrics = [line for line in httpx.get(f"{url}/metrics").text.splitlines()
               if line.startswith(("polymath_public", "polymath_library_problems"))]
    return httpx.get(f"{url}/readyz").json(), metrics


def test_readyz_and_metrics_do_not_move_when_only_private_libraries_change(run_host, tmp_path: Path) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "public.json", make_library(unit_vectors(3, 8, seed=5)))
    private = write_library(folder / "access" / "team" / "plans.json", make_library(unit_vectors(2, 8, seed=6)))
    host = run_host(folder, "--watch-interval", "0.2")
    before = public_view(host.url)

    write_library(private, make_library(unit_vectors(5, 8, seed=7)))  # republished
    (folder / "access" / "team" / "broken.json").write_text("{")  # and a broken private file
    wait_until(lambda: host.log().count("broken.json") >= 1, "the reload noticing the private changes")
    after_private = public_view(host.url)
    write_library(folder / "public.json", make_library(unit_vectors(4, 8, seed=8)))
    wait_until(lambda: public_view(host.url)[0]["public_generation"] > before[0]["public_generation"],
               "the public change being noticed")

    assert after_private == before


def test_a_host_of_private_libraries_only_looks_like_an_empty_one(run_host, tmp_path: Path) -> None:
    private = tmp_path / "private" / "libraries"
    write_library(private / "access" / "team" / "plans.json", make_library(unit_vectors(2, 8, seed=9)))
    empty = tmp_path / "empty" / "libraries"
    empty.mkdir(parents=True)

    assert public_view(run_host(private).url) == public_view(run_host(empty).url)


def test_a_private_librarys_name_costs_no_more_to_refuse_than_an_unknown_one(tmp_path: Path) -> None:
    # What a 404 costs must not depend on the rows of a library the caller may not see: counting
    # what is visible takes no pass over them (measured as memory, which timing noise cannot blur).
    folder = tmp_path / "libraries"
    write_library(folder / "access" / "team" / "plans.json", make_library(unit_vectors(50_000, 8, seed=10)))
    library = load_catalog(folder).library("access/team/plans")
    assert library is not None
    library.visible_bit_count(frozenset())  # its per-tag counts, made once

    tracemalloc.start()
    try:
        visible = library.visible_bit_count(frozenset())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert visible == 0 and peak < 4096


def test_library_urls_are_percent_encoded_and_work(run_host, tmp_path: Path) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "my notes #1?.json", make_library(unit_vectors(2, 8, seed=11)))
    host = run_host(folder)

    (listed,) = httpx.get(f"{host.url}/libraries").json()["libraries"]
    page = httpx.get(f"{host.url}/").text

    assert listed["url"] == "/libraries/my%20notes%20%231%3F.json"
    assert f'href="{listed["url"]}"' in page
    assert httpx.get(f"{host.url}{listed['url']}").json()["details"]["counts"]["bits"] == 2
