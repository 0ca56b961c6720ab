"""Faults under load, against a real server with two workers.

- kill -9 of one worker while requests stream in: uvicorn's supervisor starts a new worker, a few
  requests at most fail (those the dead worker held), and service goes on.
- the compiled cache deleted under a running server: it keeps answering from its memory maps, and
  what is published next is compiled afresh.
- SIGTERM finishes a request that is in flight (its body still arriving), then exits 0.
- Workers log like the single process does: JSON access lines on stdout, service logs with times.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import RunningHost, start_host, stop_host
from librarian import TEST_MODEL, b64, make_library, segment_folder, unit_vectors, write_library

VECTORS = unit_vectors(10, dimension=8, seed=21)


def worker_pids(server: RunningHost) -> set[int]:
    """The worker processes (uvicorn's spawned children), not multiprocessing's resource tracker."""
    workers = set()
    for child in psutil.Process(server.process.pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                workers.add(child.pid)
        except psutil.Error:  # gone, or a zombie not yet reaped: not a worker
            continue
    return workers


def query(url: str, row: int) -> httpx.Response:
    """A fresh connection each time, so the kernel spreads the requests over both workers."""
    return httpx.post(f"{url}/", json={"query_embedding": b64(VECTORS[row]), "query_embedding_model": TEST_MODEL,
                                       "count": 2, "count_type": "bit"},
                      timeout=5)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.05)


def right_answer(response: httpx.Response, row: int) -> bool:
    return response.status_code == 200 and response.json()["bits"][0]["info"]["url"] == f"https://example.com/{row}"


@dataclass
class Load:
    """Requests from a few threads until stopped (at most `limit` each), with when each one ended."""

    url: str
    outcomes: list[tuple[float, bool]] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, thread: int, limit: int = 5000) -> None:
        for sent in range(limit):
            if self._stop.is_set():
                return
            row = (thread + sent) % len(VECTORS)
            try:
                response = query(self.url, row)
                ok = right_answer(response, row)
                if not ok:
                    self.failures.append(f"{response.status_code} {response.text[:200]}")
                    if response.status_code == 200:
                        self.wrong.append(response.text[:200])
            except httpx.TransportError as problem:
                ok = False
                self.failures.append(repr(problem))
            with self._lock:
                self.outcomes.append((time.monotonic(), ok))

    def __enter__(self) -> Load:
        self.threads = [threading.Thread(target=self.run, args=(n,)) for n in range(3)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(timeout=15)

    def failed_between(self, start: float, end: float) -> int:
        return sum(1 for at, ok in self.outcomes if start <= at < end and not ok)

    def served_between(self, start: float, end: float) -> int:
        return sum(1 for at, ok in self.outcomes if start <= at < end and ok)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningHost, Path]]:
    folder = tmp_path_factory.mktemp("faults") / "libraries"
    write_library(folder / "ten.json", make_library(VECTORS))
    host = start_host(folder, "--workers", "2", "--watch-interval", "0.2")
    deadline = time.monotonic() + 20
    while len(worker_pids(host)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    yield host, folder
    stop_host(host)


def test_kill_9_of_a_worker_under_load_loses_few_requests_and_service_goes_on(
    two_workers: tuple[RunningHost, Path]
) -> None:
    host, _ = two_workers
    before = worker_pids(host)
    assert len(before) == 2
    victim = min(before)

    # Each phase waits for what it needs (with generous deadlines), never for a fixed time: on a
    # busy machine requests are slower, and the test must then take longer, not fail.
    with Load(host.url) as load:
        wait_for(lambda: load.served_between(0, time.monotonic()) >= 20, "the load getting going")
        killed_at = time.monotonic()
        psutil.Process(victim).kill()  # SIGKILL: no cleanup, no goodbye
        wait_for(lambda: len(worker_pids(host)) == 2 and victim not in worker_pids(host), "a new worker")
        replaced_at = time.monotonic()
        wait_for(lambda: load.served_between(replaced_at + 0.5, time.monotonic()) >= 20, "service resuming")
        ended_at = time.monotonic()

    assert load.wrong == []
    failed = load.failed_between(killed_at, ended_at)
    print(f"kill -9: {load.served_between(0, killed_at)} served before, {failed} failed after, worker replaced in "
          f"{replaced_at - killed_at:.2f} s, {load.served_between(killed_at, ended_at)} served after")
    assert failed <= 6, f"{failed} requests failed around the kill"  # the dead worker's in-flight ones
    assert load.failed_between(replaced_at + 0.5, ended_at) == 0
    assert host.process.poll() is None
    wait_for(lambda: "died" in host.log(), "the supervisor logging the death")


def test_workers_write_the_json_access_log_and_timed_service_logs(two_workers: tuple[RunningHost, Path]) -> None:
    host, folder = two_workers
    for row in range(4):
        assert right_answer(query(host.url, row), row)
    (folder / ".broken.json.tmp").write_text("{")
    (folder / ".broken.json.tmp").rename(folder / "broken.json")  # whole at once: one version, named once
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and host.log().count("broken.json: not valid JSON") < 1:
            time.sleep(0.1)
        time.sleep(1.5)  # both workers have reloaded since: the other one finds it refused already
    finally:
        (folder / "broken.json").unlink()

    lines = host.log().splitlines()
    access = [json.loads(line) for line in lines if line.startswith("{")]
    assert sum(1 for line in access if line["method"] == "POST" and line["status"] == 200) >= 4
    problems = [line for line in lines if "broken.json: not valid JSON" in line]
    assert len(problems) == 1, "a bad file is named once, by the worker that read it"
    assert all(" ERROR polymath_host.reload: " in line for line in problems), problems


def test_the_compiled_cache_deleted_under_load_does_not_stop_service(two_workers: tuple[RunningHost, Path]) -> None:
    host, folder = two_workers
    with Load(host.url) as load:
        time.sleep(0.5)
        shutil.rmtree(folder / ".compiled")
        time.sleep(0.5)
        write_library(folder / "after.json", make_library(unit_vectors(3, dimension=8, seed=99), model="test:other-8"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and httpx.get(f"{host.url}/libraries/after.json").status_code != 200:
            time.sleep(0.1)
        time.sleep(0.3)

    assert load.outcomes and load.failures == []
    assert (segment_folder(folder / ".compiled", "after") / "meta.json").exists()
    # Every worker has it (new connections reach both).
    assert all(httpx.get(f"{host.url}/libraries/after.json").status_code == 200 for _ in range(6))


def test_workers_answer_keep_alive_requests_without_a_delayed_ack_stall(two_workers: tuple[RunningHost, Path]) -> None:
    """uvicorn's workers socket lacks TCP_NODELAY unless serve fixes it: then each answer waits ~40 ms."""
    host, _ = two_workers
    timings = []
    with httpx.Client(timeout=5) as client:  # one keep-alive connection
        for row in range(21):
            started = time.perf_counter()
            assert right_answer(client.post(f"{host.url}/", json={
                "query_embedding": b64(VECTORS[row % 10]), "query_embedding_model": TEST_MODEL,
                "count": 2, "count_type": "bit"}), row % 10)
            timings.append(time.perf_counter() - started)
    # A delayed-ACK stall costs every answer ~40 ms; a busy machine slows some answers, not all of them.
    assert min(timings) < 0.03, f"fastest of 21 keep-alive requests took {min(timings) * 1000:.1f} ms"


# ---- SIGTERM: in-flight requests finish, exit 0 ---------------------------------------------------


def start_slow_request(url: str, body: bytes) -> socket.socket:
    port = int(url.rsplit(":", 1)[1])
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
    return connection


def read_response(connection: socket.socket) -> tuple[bytes, bytes]:
    received = b""
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            break
        received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        if length is not None and len(body) >= length:
            break
    head, _, body = received.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_finishes_in_flight_requests_then_exits_0(
    run_host: Callable[..., RunningHost], tmp_path: Path, workers: str
) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "ten.json", make_library(VECTORS))
    host = run_host(folder, "--workers", workers)
    body = json.dumps({"query_embedding": b64(VECTORS[7]), "count": 2, "count_type": "bit"}).encode()
    in_flight = [start_slow_request(host.url, body) for _ in range(3)]
    time.sleep(0.5)  # the requests are being read

    host.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    for connection in in_flight:
        connection.sendall(body[10:])  # the rest of the bodies arrive after the signal
    answers = [read_response(connection) for connection in in_flight]
    for connection in in_flight:
        connection.close()

    for head, payload in answers:
        assert head.startswith(b"HTTP/1.1 200 "), head
        assert json.loads(payload)["bits"][0]["info"]["url"] == "https://example.com/7"
    try:
        code = host.process.wait(timeout=15)
    except Exception:
        host.process.kill()
        raise
    assert code == 0, host.log()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{host.url}/healthz", timeout=2)
