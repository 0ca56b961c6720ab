"""deploy/haproxy.cfg with Debian's haproxy in front of real hosts: the file is valid as shipped, its
per-client rate limit answers a JSON 429 with Retry-After, and a host stopped with SIGTERM and
--drain-seconds is drained (its /readyz says 503, HAProxy stops sending it requests, it finishes
and exits 0) while clients see no failed request."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import start_host
from librarian import TEST_MODEL, make_library, unit_vectors, write_library
from origin_support import haproxy, wait_for_port
from replica_cluster import HAPROXY_CONFIG, haproxy_config

from host.service.harness import RunningHost, free_port


def test_the_shipped_config_is_valid_for_debians_haproxy(tmp_path: Path) -> None:
    checked = subprocess.run([haproxy(), "-c", "-f", str(HAPROXY_CONFIG)], capture_output=True, text=True, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def libraries(tmp_path: Path) -> Path:
    write_library(tmp_path / "libraries" / "a.json", make_library(unit_vectors(20), model=TEST_MODEL))
    return tmp_path / "libraries"


@contextlib.contextmanager
def balancer(folder: Path, ports: list[int], rate_limit: int = 200) -> Iterator[str]:
    """HAProxy with the shipped config (its rate limit unless told otherwise) in front of `ports`."""
    listen = free_port()
    (folder / "haproxy.cfg").write_text(haproxy_config(listen, ports, rate_limit))
    log = folder / "haproxy.log"
    with log.open("wb") as output:
        process = subprocess.Popen([haproxy(), "-db", "-f", str(folder / "haproxy.cfg")], stdout=output,
                                   stderr=subprocess.STDOUT, process_group=0)
    try:
        wait_for_port(listen, what="haproxy", process=process, log_path=log)
        time.sleep(2.2)  # its checks see the hosts up (rise 2, inter 1 s)
        yield f"http://127.0.0.1:{listen}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_rate_limit_is_a_json_429_with_retry_after_across_replicas(libraries: Path, tmp_path: Path) -> None:
    hosts = [start_host(libraries, "--cache-dir", str(tmp_path / f"compiled-{n}")) for n in range(2)]
    try:
        with balancer(tmp_path, [host.port for host in hosts]) as url:
            with httpx.Client(base_url=url) as client:
                statuses = [client.get("/libraries").status_code for _ in range(200)]
                refused = client.get("/libraries")
            assert statuses == [200] * 200, "the shipped limit is 200 requests per 10 s per address"
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "10"
            assert refused.headers["content-type"] == "application/json"
            assert "too many requests" in json.loads(refused.content)["error"]
    finally:
        for host in hosts:
            host.stop()


def test_a_host_stopped_with_sigterm_is_drained_without_a_failed_request(libraries: Path, tmp_path: Path) -> None:
    hosts: list[RunningHost] = [start_host(libraries, "--cache-dir", str(tmp_path / f"compiled-{n}"), "--drain-seconds",
                                           "3", "--watch-interval", "0") for n in range(2)]
    failures: list[str] = []
    answered = [0]
    stop = threading.Event()
    body = {"count": 3, "count_type": "bit"}

    def client(url: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as session:
            while not stop.is_set():
                try:
                    response = session.post("/", json=body)
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text[:100]}")
                except httpx.HTTPError as error:
                    failures.append(f"{type(error).__name__}: {error}")
                answered[0] += 1

    try:
        with balancer(tmp_path, [host.port for host in hosts], rate_limit=1_000_000) as url:
            threads = [threading.Thread(target=client, args=(url,)) for _ in range(4)]
            for thread in threads:
                thread.start()
            time.sleep(1)
            draining = hosts[0]
            draining.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            status, readiness = httpx.get(f"{draining.url}/readyz"), httpx.post(f"{draining.url}/", json=body)
            assert status.status_code == 503 and "draining" in status.json()["status"]
            assert readiness.status_code == 200, "a draining host still answers"
            assert draining.process.wait(timeout=30) == 0
            time.sleep(1)
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            assert failures == [] and answered[0] > 50, (answered[0], failures[:5])
            assert "SIGTERM: draining for 3 s" in draining.log()
    finally:
        stop.set()
        for host in hosts:
            host.stop()
