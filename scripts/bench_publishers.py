#!/usr/bin/env python3
"""Listing and choosing among many publishers' libraries over HTTP (issue 36, items 2 and 4), in one run.

Two hosts, each a real uvicorn server in a process of its own, built in memory from one compiled
library copied under many names (each copy with bit ids of its own; the copies share the original's
memory maps, so 10,000 of them open no more files than one: how many libraries the storage can hold
is item 1 of the issue, measured elsewhere):

  many   --libraries libraries (10,000), --per-publisher (20) to a publisher: pub0000/lib00 ...
  few    100 libraries, 5 publishers of 20: the peer, where there is almost nothing to list

Every tenth publisher's libraries are private (tag `members`): the anonymous caller neither sees
nor counts them. Then, over one keep-alive connection to each, taking turns (many, few, few, many,
...) for --rounds rounds, the p50 and p95 of each request below, the ratio of the two hosts' p50,
the CPU seconds each server spent, the load average before and after, and the CPU:

  GET /libraries                     every library, the answer of old (10,000 entries at "many")
  GET /libraries?limit=100           the first page of 100
  GET /libraries?limit=100&cursor=   a page from the middle (a cursor of this host's)
  GET /libraries?prefix=pubNNNN/     one publisher's libraries
  GET /p/pubNNNN/libraries           the same, under its prefix
  GET / (JSON)                       the whole host's page: its publishers
  GET /p/pubNNNN/ (JSON)             one publisher's page (its libraries, a sample of its bits)
  POST /p/pubNNNN/libNN/             a vector query of one library, top 10 bits

The goal of item 4: every /libraries answer "well under 100 ms" at 10,000 libraries. The last line
is item 2's "selecting one library among 10,000 costs no more than a host that holds only it":
shown for the record, the query core's narrowing is being rebuilt with the storage (item 1).

    python scripts/bench_publishers.py                          # 10,000 libraries, 30 rounds
    python scripts/bench_publishers.py --libraries 1000 --rounds 5   # a quick check

Progress on stderr, Markdown on stdout. A ratio taken while the 1-minute load exceeds the core
count is marked as not to be relied on.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import http.client
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from host.web.library_endpoints import encode_cursor  # noqa: E402
from scripts.benchmarks.import_rounds import cpu_description  # noqa: E402
from scripts.benchmarks.measure import cpu_seconds  # noqa: E402

DIMENSION = 384
BITS_EACH = 10
PRIVATE_EVERY = 10  # every tenth publisher is private


def write_template(folder: Path) -> Path:
    """One library file of BITS_EACH random unit vectors: what every library of a host is a copy of."""
    vectors = np.random.default_rng(36).standard_normal((BITS_EACH, DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    bits = [{"text": f"passage {row} of a publisher's library", "token_count": 8,
             "embedding": base64.b64encode(vector.tobytes()).decode(),
             "info": {"url": f"https://example.com/{row}", "title": f"Passage {row}"}} for row, vector in enumerate(vectors)]
    path = folder / "template.json"
    path.write_text(json.dumps({"version": 1, "embedding_model": "bench:384", "bits": bits}))
    return path


def library_name(number: int, per_publisher: int) -> str:
    return f"pub{number // per_publisher:04d}/lib{number % per_publisher:02d}"


def build_catalog(root: Path, libraries: int, per_publisher: int) -> Any:
    """A catalog of `libraries` copies of the template (bit ids of their own, every tenth publisher private)."""
    from host.catalog.generations import Catalog, group_by_model, load_catalog

    template = load_catalog(root / "template.json", cache_dir=root / "compiled").libraries[0]
    copies = []
    for number in range(libraries):
        name = library_name(number, per_publisher)
        private = (number // per_publisher) % PRIVATE_EVERY == PRIVATE_EVERY - 1
        ids = np.array([hashlib.sha256(f"{name}/{row}".encode()).digest() for row in range(BITS_EACH)], dtype="S32")
        copies.append(dataclasses.replace(
            template, name=name, ids=ids, id_heads=None,
            tags=("", "members") if private else template.tags,
            tag_ids=np.ones(BITS_EACH, np.uint16) if private else template.tag_ids))
    models, kept, problems = group_by_model(copies)
    assert not problems, problems
    return Catalog(1, tuple(kept), models)


def serve(folder: str, libraries: int, per_publisher: int, port: int) -> None:
    """The child: the catalog of `build_catalog`, served by uvicorn on `port`."""
    import uvicorn

    from host.embedders.service import Embedders
    from host.service.settings import Settings
    from host.web.app import create_app

    root = Path(folder)
    settings = Settings(libraries=root / "template.json", cache_dir=root / "compiled", watch_interval=0)
    app = create_app(settings, catalog=build_catalog(root, libraries, per_publisher), embedders=Embedders([]))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


class Host:
    """A serving child process and one keep-alive connection to it."""

    def __init__(self, label: str, folder: Path, libraries: int, per_publisher: int) -> None:
        from host.service.harness import free_port

        self.label, self.libraries, self.per_publisher = label, libraries, per_publisher
        self.port = free_port()
        context = multiprocessing.get_context("spawn")
        self.process = context.Process(target=serve, args=(str(folder), libraries, per_publisher, self.port),
                                       daemon=True)
        self.process.start()
        deadline = time.monotonic() + 600
        while True:
            try:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                self.request("GET", "/healthz")
                break
            except OSError:
                if time.monotonic() > deadline or not self.process.is_alive():
                    raise SystemExit(f"the {label} host did not start") from None
                time.sleep(0.2)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        self.connection.request(method, path, body=body, headers=headers or {})
        response = self.connection.getresponse()
        return response.status, response.read()

    def settle(self, seconds: float = 120) -> None:
        """Wait until the server is idle: its start keeps a core busy for a few seconds after /healthz
        answers (0.8 CPU seconds in the 3 s after it, measured), which a peer started later would
        otherwise pay inside the timed rounds."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            before = self.cpu()
            time.sleep(1)
            if self.cpu() - before < 0.02:
                return

    def cpu(self) -> float:
        assert self.process.pid is not None
        return cpu_seconds([self.process.pid])

    def stop(self) -> None:
        self.connection.close()
        self.process.terminate()
        self.process.join(10)


Asked = tuple[str, str, bytes | None, dict[str, str]]


def query_bodies(rounds: int) -> list[bytes]:
    """A new random vector each time: no answer comes from the answer cache."""
    vectors = np.random.default_rng(7).standard_normal((rounds, DIMENSION)).astype(np.float32)
    return [json.dumps({"query_embedding": base64.b64encode(vector.tobytes()).decode(), "count": 10,
                        "count_type": "bit"}).encode() for vector in vectors]


def requests(host: Host, body: bytes) -> dict[str, Asked]:
    """What is asked of a host: (method, path, body, headers) by label; its publisher is in the middle."""
    publisher = f"pub{host.libraries // host.per_publisher // 2:04d}"  # public: every tenth from pub0009 is private
    middle = library_name(host.libraries // 2, host.per_publisher)
    cursor = encode_cursor(middle)  # what a page ending at the middle library gives
    as_json = {"Accept": "application/json"}
    return {
        "GET /libraries (every one, kept rendered)": ("GET", "/libraries", None, {}),
        "GET /libraries?limit=100": ("GET", "/libraries?limit=100", None, {}),
        "GET /libraries?limit=100&cursor= (middle)": ("GET", f"/libraries?limit=100&cursor={cursor}", None, {}),
        "GET /libraries?prefix=<publisher>/": ("GET", f"/libraries?prefix={publisher}/", None, {}),
        "GET /p/<publisher>/libraries": ("GET", f"/p/{publisher}/libraries", None, {}),
        "GET / (JSON: the publishers, their list kept)": ("GET", "/?seed=1", None, as_json),
        "GET /p/<publisher>/ (JSON)": ("GET", f"/p/{publisher}/?seed=1", None, as_json),
        "POST /p/<library>/ (vector, 10 bits)": ("POST", f"/p/{quote(middle)}/", body,
                                                  {"Content-Type": "application/json"}),
    }


def measure(hosts: list[Host], rounds: int) -> dict[str, dict[str, list[float]]]:
    bodies = query_bodies(rounds + 1)
    asked = [{host.label: requests(host, body) for host in hosts} for body in bodies]
    labels = list(asked[0][hosts[0].label])
    times: dict[str, dict[str, list[float]]] = {label: {host.label: [] for host in hosts} for label in labels}
    for host in hosts:  # warm-up, untimed: every request once
        for method, path, body, headers in asked[-1][host.label].values():
            status, _ = host.request(method, path, body, headers)
            assert status == 200, (host.label, path, status)
    for round_number in range(rounds):
        order = hosts if round_number % 2 == 0 else hosts[::-1]
        for label in labels:
            for host in order:
                method, path, body, headers = asked[round_number][host.label][label]
                started = time.perf_counter()
                status, _ = host.request(method, path, body, headers)
                times[label][host.label].append(time.perf_counter() - started)
                assert status == 200, (host.label, path, status)
        print(f"round {round_number + 1}/{rounds}", file=sys.stderr)
    return times


def measure_in_process(folder: Path, sizes: dict[str, int], per_publisher: int,
                       rounds: int) -> dict[str, dict[str, list[float]]]:
    """What the two caches above hide, in this process, taking turns: the whole list of /libraries
    rendered, and the whole host's page's list (publishers) made, each as on a cache miss."""
    from access import ANONYMOUS
    from host.web.library_endpoints import visible_libraries
    from host.web.page.data import PageInputs, _listing
    from host.web.page.request import PageRequest
    from host.web.responses import render_json

    catalogs = {label: build_catalog(folder, size, per_publisher) for label, size in sizes.items()}
    work = {
        "/libraries' whole list, rendered (not kept)": lambda catalog: render_json(
            {"libraries": list(visible_libraries(catalog, frozenset()))}),
        "the whole host's page's list of publishers (not kept)": lambda catalog: _listing(
            PageInputs(catalog=catalog, request=PageRequest(), grant=ANONYMOUS, policy=None, seed=1)),  # type: ignore[arg-type]
    }
    times: dict[str, dict[str, list[float]]] = {label: {host: [] for host in catalogs} for label in work}
    for round_number in range(rounds + 1):
        order = list(catalogs) if round_number % 2 == 0 else list(catalogs)[::-1]
        for label, function in work.items():
            for host in order:
                started = time.perf_counter()
                function(catalogs[host])
                if round_number:  # the first is a warm-up
                    times[label][host].append(time.perf_counter() - started)
    return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libraries", type=int, default=10_000, help="libraries of the many host (default 10,000)")
    parser.add_argument("--per-publisher", type=int, default=20, help="libraries to a publisher (default 20)")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds of every request (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-publishers-") as folder:
        write_template(Path(folder))
        print(f"starting a host of {args.libraries:,} libraries and one of 100 ...", file=sys.stderr)
        hosts = [Host("many", Path(folder), args.libraries, args.per_publisher),
                 Host("few", Path(folder), 100, args.per_publisher)]
        try:
            for host in hosts:
                host.settle()
            load_before = os.getloadavg()[0]
            cpu_before = [host.cpu() for host in hosts]
            started = time.perf_counter()
            times = measure(hosts, args.rounds)
            wall = time.perf_counter() - started
            process_before = time.process_time()
            times.update(measure_in_process(Path(folder), {"many": args.libraries, "few": 100}, args.per_publisher,
                                            args.rounds))
            process_cpu = time.process_time() - process_before
            cpu = [host.cpu() - before for host, before in zip(hosts, cpu_before, strict=True)]
            load_after = os.getloadavg()[0]
        finally:
            for host in hosts:
                host.stop()
    cores = os.cpu_count() or 1
    quiet = max(load_before, load_after) <= cores
    print(f"## Publishers over HTTP: {args.libraries:,} libraries against 100\n")
    print(f"CPU: {cpu_description()['model']}, {cores} cores. 1-minute load {load_before:.2f} before, "
          f"{load_after:.2f} after{'' if quiet else ' (over the core count: the ratios are not to be relied on)'}. "
          f"{args.rounds} rounds in {wall:.1f} s; server CPU seconds: many {cpu[0]:.2f}, few {cpu[1]:.2f}; "
          f"the last two lines in this process: {process_cpu:.2f} CPU seconds.\n")
    print("| request | many p50 (ms) | many p95 | few p50 (ms) | few p95 | many / few |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, by_host in times.items():
        many, few = by_host["many"], by_host["few"]
        ratio = statistics.median(many) / statistics.median(few)
        print(f"| {label} | {statistics.median(many) * 1000:.2f} | {percentile(many, 0.95) * 1000:.2f} | "
              f"{statistics.median(few) * 1000:.2f} | {percentile(few, 0.95) * 1000:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
