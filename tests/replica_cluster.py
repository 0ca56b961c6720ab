"""Replicas behind HAProxy under load, for the end-to-end tests of origins (S3 and a plain web server).

`Cluster` runs three `serve --libraries <origin URL>` replicas on fixed ports (a replica killed
with -9 comes back on its port, with its cache) and HAProxy with the shipped deploy/haproxy.cfg,
where only what names this machine changes: the listening port, the replicas' addresses, the
Debian daemon lines (log socket, chroot, user, stats socket), and the rate limit, raised because
every test client shares one address. `Load` is 16 clients asking known queries through HAProxy
and comparing every answer, byte for byte, with a single local host's answer to the same query.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
import numpy as np
from components import PROJECT
from librarian import b64, unit_vectors, write_library
from origin_support import haproxy, wait_for_port

from host.cli import main
from host.service.harness import RunningHost, free_port, spawn_host

HAPROXY_CONFIG = PROJECT / "deploy" / "haproxy.cfg"
SAMPLE = PROJECT / "libraries"
SYNTHETIC_MODEL = "test:synthetic-32"
FRESH_MODEL = "test:fresh-16"
CLIENTS = 16
INTERVAL = 1.0  # --watch-interval of the replicas
BOUND = INTERVAL + 2.0  # a revocation or a new library reaches every replica within this, after a publish


def synthetic_library(bits: int, dimension: int, model: str, seed: int) -> dict[str, object]:
    vectors = unit_vectors(bits, dimension, seed=seed)
    return {"version": 1, "embedding_model": model, "bits": [
        {"text": f"synthetic bit {row} of {bits}", "embedding": b64(vector), "token_count": 3 + row % 50,
         "info": {"url": f"https://example.com/synthetic/{row}", "title": f"Synthetic {row}"}}
        for row, vector in enumerate(vectors)]}


def source_folder(root: Path) -> Path:
    """The sample library (public and private) and a 20,000-bit synthetic one."""
    for path in (SAMPLE / "sample.json", SAMPLE / "access" / "unpublished" / "drafts.json"):
        target = root / path.relative_to(SAMPLE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    write_library(root / "synthetic.json", synthetic_library(20_000, 32, SYNTHETIC_MODEL, seed=19))
    return root


def add_fresh_library(root: Path) -> None:
    """A library of a model no query names: answers to the others stay the same."""
    write_library(root / "fresh.json", synthetic_library(5, 16, FRESH_MODEL, seed=5))


@dataclass(frozen=True)
class Admin:
    """An admin's access file with a public-key signing key, and tokens issued from it."""

    folder: Path
    file: Path
    reader: str  # keeps its grant all along
    leaver: str  # revoked mid-load

    @classmethod
    def create(cls, folder: Path) -> Admin:
        file = folder / "access.SECRET.json"
        access_command("access", "init", "--alg", "EdDSA", "--access", str(file))
        reader = access_command("token", "issue", "reader", "--tag", "unpublished", "--access", str(file))
        leaver = access_command("token", "issue", "leaver", "--tag", "unpublished", "--access", str(file))
        return cls(folder, file, reader, leaver)

    def revoke_leaver(self) -> None:
        access_command("token", "revoke", "leaver", "--access", str(self.file))


def access_command(*argv: str) -> str:
    """The admin's `access`/`token` command, run here (as `polymath-host ARGV...` runs it): its stdout."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        assert main(list(argv)) == 0
    return printed.getvalue().strip()


def queries(reader: str) -> list[tuple[dict[str, object], dict[str, str]]]:
    """Known queries: vectors near sample and synthetic bits, bit and token budgets, anonymous and with a token."""
    sample = json.loads((SAMPLE / "sample.json").read_text())
    model = sample["embedding_model"]
    asked: list[tuple[dict[str, object], dict[str, str]]] = []
    for index in range(6):
        vector = sample["bits"][index * 37]["embedding"]
        for count, count_type in ((5, "bit"), (600, "token")):
            body = {"query_embedding": vector, "query_embedding_model": model, "count": count, "count_type": count_type}
            asked.append((body, {}))
            asked.append((body, {"Authorization": f"Bearer {reader}"}))
    synthetic = unit_vectors(8, 32, seed=77)
    for vector in synthetic:
        body = {"query_embedding": base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode(),
                "query_embedding_model": SYNTHETIC_MODEL, "count": 8, "count_type": "bit"}
        asked.append((body, {}))
    return asked


def answers_of(url: str, asked: list[tuple[dict[str, object], dict[str, str]]]) -> list[bytes]:
    with httpx.Client(base_url=url, timeout=30) as client:
        answers = []
        for body, headers in asked:
            response = client.post("/", json=body, headers=headers)
            assert response.status_code == 200, response.text
            answers.append(response.content)
        return answers


def haproxy_config(listen: int, replicas: list[int], rate_limit: int) -> str:
    """The shipped config, pointed at this machine's replicas and run in the foreground as this user."""
    text = HAPROXY_CONFIG.read_text()
    daemon_lines = re.compile(r"^\s*(log /dev/log|chroot|stats socket|stats timeout|user|group|daemon)\b.*\n", re.M)
    text = daemon_lines.sub("", text)
    text = text.replace("    bind :80\n", f"    bind 127.0.0.1:{listen}\n")
    text = re.sub(r"gt 200 \}", f"gt {rate_limit} }}", text)
    servers = "".join(f"    server replica{n} 127.0.0.1:{port}\n" for n, port in enumerate(replicas, 1))
    text = re.sub(r"(    server replica\d .*\n)+", servers, text)
    assert text.count("127.0.0.1:") == 1 + len(replicas)
    return text


@dataclass
class Cluster:
    folder: Path
    origin_url: str
    env: Mapping[str, str]
    ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(3)])
    replicas: list[RunningHost] = field(default_factory=list)
    balancer: subprocess.Popen[bytes] | None = None
    listen: int = field(default_factory=free_port)
    arguments: tuple[str, ...] = ()  # more `serve` options for every replica (--origin-key ...)

    def replica_arguments(self, index: int) -> tuple[str, ...]:
        return ("--cache-dir", str(self.folder / f"cache-{index}"), "--watch-interval", str(INTERVAL),
                "--embedder", "none", "--drain-seconds", "1", *self.arguments)

    def start_replica(self, index: int) -> RunningHost:
        host = spawn_host(self.origin_url, *self.replica_arguments(index), cwd=self.folder, env=self.env,
                          port=self.ports[index], log_path=self.folder / f"replica-{index}-{time.monotonic_ns()}.log")
        if index < len(self.replicas):
            self.replicas[index] = host
        else:
            self.replicas.append(host)
        return host

    def spawn_replicas(self) -> None:
        """Start the three replicas; `start_balancer` waits for them."""
        for index in range(3):
            self.start_replica(index)

    def start_balancer(self, rate_limit: int = 1_000_000) -> None:
        """Once every replica is ready: HAProxy, until its checks see them all up."""
        for host in self.replicas:
            host.wait_until_ready("/readyz", timeout=90)
        config = self.folder / "haproxy.cfg"
        config.write_text(haproxy_config(self.listen, self.ports, rate_limit))
        log = self.folder / "haproxy.log"
        with log.open("wb") as output:
            self.balancer = subprocess.Popen([haproxy(), "-db", "-f", str(config)], stdout=output,
                                             stderr=subprocess.STDOUT, process_group=0)
        wait_for_port(self.listen, what="haproxy", process=self.balancer, log_path=log)
        self.wait_all_up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listen}"

    def wait_all_up(self, timeout: float = 30) -> None:
        """Until HAProxy's checks have seen every replica ready (rise 2 x inter 1 s)."""
        time.sleep(2.5)
        deadline = time.monotonic() + timeout
        while any(httpx.get(f"http://127.0.0.1:{port}/readyz").status_code != 200 for port in self.ports):
            assert time.monotonic() < deadline, "the replicas did not all become ready"
            time.sleep(0.2)

    def kill(self, index: int) -> None:
        self.replicas[index].kill()

    def stop(self) -> None:
        for host in self.replicas:
            host.stop()
        if self.balancer is not None:
            self.balancer.terminate()
            try:
                self.balancer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.balancer.kill()

    def reflects(self, index: int, leaver: str) -> bool:
        """Replica `index` lists the fresh library and refuses the revoked token."""
        port = self.ports[index]
        listed = httpx.get(f"http://127.0.0.1:{port}/libraries", timeout=5).json()
        fresh = any(library["name"] == "fresh" for library in listed["libraries"])
        refused = httpx.post(f"http://127.0.0.1:{port}/", json={"count": 1, "count_type": "bit",
                                                                 "query_embedding_model": FRESH_MODEL},
                             headers={"Authorization": f"Bearer {leaver}"}, timeout=5).status_code == 401
        return fresh and refused

    def time_to_reflect(self, since: float, leaver: str, timeout: float = 30) -> list[float]:
        """Seconds from `since` until each replica reflected the publish and the revocation."""
        seen: dict[int, float] = {}
        deadline = since + timeout
        while len(seen) < len(self.ports) and time.monotonic() < deadline:
            for index in range(len(self.ports)):
                if index not in seen:
                    with contextlib.suppress(httpx.HTTPError):
                        if self.reflects(index, leaver):
                            seen[index] = time.monotonic() - since
            time.sleep(0.05)
        return [seen.get(index, float("inf")) for index in range(len(self.ports))]

    def wait_in_step(self, in_step: bool = True, timeout: float = 30) -> bool:
        """Until every replica's last poll of its origin succeeded (or, `in_step` false, failed)."""
        deadline = time.monotonic() + timeout
        line = f'polymath_origin_in_step{{source="libraries"}} {int(in_step)}'
        while time.monotonic() < deadline:
            if all(line in self.metrics(index) for index in range(3)):
                return True
            time.sleep(0.2)
        return False

    def metrics(self, index: int) -> str:
        return httpx.get(f"http://127.0.0.1:{self.ports[index]}/metrics", timeout=5).text


@dataclass
class Load:
    """CLIENTS threads asking `asked` through `url` until stopped; every answer compared with `expected`."""

    url: str
    asked: list[tuple[dict[str, object], dict[str, str]]]
    expected: list[bytes]
    pause: float = 0.0  # seconds a client waits after an answer before its next question
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _client(self, number: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            turn = number
            while not self._stop.is_set():
                index = turn % len(self.asked)
                turn += 1
                body, headers = self.asked[index]
                try:
                    response = client.post("/", json=body, headers=headers)
                    problem = None if response.status_code == 200 and response.content == self.expected[index] else (
                        f"query {index}: {response.status_code} {response.text[:200]}")
                except httpx.HTTPError as error:
                    problem = f"query {index}: {type(error).__name__}: {error}"
                with self._lock:
                    self.answered += 1
                    if problem:
                        self.failures.append(f"{time.strftime('%H:%M:%S')} {problem}")
                self._stop.wait(self.pause)

    @contextlib.contextmanager
    def running(self) -> Iterator[Load]:
        threads = [threading.Thread(target=self._client, args=(number,), daemon=True) for number in range(CLIENTS)]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in threads:
                thread.join(timeout=60)


def at(started: float, second: float) -> None:
    """Sleep until `second` seconds after `started` (the script of events under load)."""
    time.sleep(max(0.0, started + second - time.monotonic()))


Step = Callable[[], None]


class OriginUnderTest(Protocol):
    """What the scenario needs of an origin: its URL and environment, publishing to it, stopping and restarting it."""

    url: str
    environment: Mapping[str, str]

    def publish(self, source: Path, access_file: Path) -> None: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...


def phase(started: float, what: str) -> None:
    """A line in the test's output (shown when it fails): where the time went."""
    print(f"{time.monotonic() - started:6.1f} s {what}", flush=True)


def run_scenario(folder: Path, origin: OriginUnderTest, *, load_seconds: float, pause: float = 0.01) -> None:
    """The end-to-end scenario of issue 19 against `origin`; fails on any failed or differing answer."""
    began = time.monotonic()
    source = source_folder(folder / "source")
    keys = Admin.create(folder)
    origin.publish(source, keys.file)
    phase(began, "published")
    asked = queries(keys.reader)
    cluster = Cluster(folder, origin.url, origin.environment)
    try:
        cluster.spawn_replicas()
        local = spawn_host(source, "--access", str(keys.file), "--embedder", "none", cwd=folder)
        try:
            local.wait_until_ready("/readyz", timeout=90)
            expected = answers_of(local.url, asked)
        finally:
            local.stop()
        cluster.start_balancer()
        phase(began, "replicas behind haproxy")
        assert answers_of(cluster.url, asked) == expected
        load = Load(cluster.url, asked, expected, pause=pause)
        started = time.monotonic()
        with load.running():
            at(started, 4)
            cluster.kill(1)
            at(started, 8)
            cluster.start_replica(1).wait_until_ready("/readyz", timeout=60)
            at(started, 10)
            origin.stop()  # every replica goes on serving its last good set
            at(started, 13)
            assert cluster.wait_in_step(False), "a replica did not notice its origin was down"
            origin.restart()
            add_fresh_library(source)  # and with it, a revocation
            keys.revoke_leaver()
            origin.publish(source, keys.file)
            published = time.monotonic()
            phase(began, "published again")
            reached = cluster.time_to_reflect(published, keys.leaver)
            phase(began, "each replica had the publish and the revocation after " + ", ".join(f"{t:.2f} s" for t in reached))
            at(started, load_seconds)
        phase(began, f"load done: {load.answered} answers, {len(load.failures)} failed")
        assert load.failures == [], f"{len(load.failures)} of {load.answered} requests failed: {load.failures[:10]}"
        assert load.answered > 1000
        assert max(reached) <= BOUND, f"seconds for each replica to reflect the publish and the revocation: {reached}"
        assert cluster.wait_in_step(), "the replicas did not get in step again after the origin came back"
        for index in range(3):
            failures = next(line for line in cluster.metrics(index).splitlines()
                            if line.startswith('polymath_origin_sync_failures_total{source="libraries"}'))
            assert float(failures.split()[-1]) >= 1
        for host in cluster.replicas:
            said = [line for line in host.log().splitlines() if "origin sync failed" in line]
            assert len(said) <= 1, said  # an outage is said once (a replica killed before it says nothing)
            assert "Traceback" not in host.log()
    finally:
        cluster.stop()
