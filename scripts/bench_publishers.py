#!/usr/bin/env python3
"""Listing many publishers' libraries over HTTP (issue 36, item 4 and the page), in one run.

Two folders of real library files, each served by a real `serve` (one worker, `--embedder none`):

  many   --libraries files (10,000), --per-publisher (20) to a publisher folder: pub0000/lib00.json ...
  few    100 files, 5 publishers of 20: the peer, where there is almost nothing to list

Each file holds BITS_EACH bits of random DIMENSION-dimension vectors; every tenth publisher's bits are
private (tag `members`): the anonymous caller neither sees nor counts them. Once both servers are
idle, over one keep-alive connection to each, taking turns (many, few, few, many, ...) for --rounds
rounds, the p50 and p95 of each request below and the ratio of the two hosts' p50, with the CPU
seconds each server spent, the load average before and after, and the CPU:

  GET /libraries                     every library, the answer of old (10,000 entries at "many"),
                                     kept rendered per generation and grant after the first
  GET /libraries?limit=100           the first page of 100
  GET /libraries?limit=100&cursor=   a page from the middle (a cursor as the host gives it)
  GET /libraries?prefix=pubNNNN/     one publisher's libraries
  GET /p/pubNNNN/libraries           the same, under its prefix
  GET / (JSON)                       the whole host's page: its publishers (their list kept)
  GET /p/pubNNNN/ (JSON)             one publisher's page (its libraries, a sample of its bits)

Then, in this process on the same folders, what those two caches hide, taking turns likewise: the
whole list of /libraries built and rendered, and the whole host's page's list of publishers made.
The goal of item 4: every /libraries answer "well under 100 ms" at 10,000 libraries. (Choosing one
library among 10,000 is scripts/bench_many_libraries.py's.)

    python scripts/bench_publishers.py                               # 10,000 libraries, 30 rounds
    python scripts/bench_publishers.py --libraries 1000 --rounds 5   # a quick check

Progress on stderr, Markdown on stdout. A ratio taken while the 1-minute load exceeds the core count
is marked as not to be relied on.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from host.service.harness import RunningHost, start_host  # noqa: E402
from host.web.library_endpoints import encode_cursor  # noqa: E402
from scripts.benchmarks.import_rounds import cpu_description  # noqa: E402
from scripts.benchmarks.measure import cpu_seconds  # noqa: E402

DIMENSION = 64  # what a listing costs does not depend on it
BITS_EACH = 10
PRIVATE_EVERY = 10  # every tenth publisher is private


def library_name(number: int, per_publisher: int) -> str:
    return f"pub{number // per_publisher:04d}/lib{number % per_publisher:02d}"


def write_libraries(folder: Path, libraries: int, per_publisher: int) -> None:
    """`libraries` files of BITS_EACH bits; every PRIVATE_EVERY-th publisher's bits tagged `members`."""
    rng = np.random.default_rng(36)
    for number in range(libraries):
        name = library_name(number, per_publisher)
        private = (number // per_publisher) % PRIVATE_EVERY == PRIVATE_EVERY - 1
        vectors = rng.standard_normal((BITS_EACH, DIMENSION)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        bits = [{"text": f"passage {row} of {name}", "token_count": 5,
                 "embedding": base64.b64encode(vector.tobytes()).decode(),
                 "info": {"url": f"https://example.com/{name}/{row}"},
                 **({"access_tag": "members"} if private else {})} for row, vector in enumerate(vectors)]
        path = folder / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": 1, "embedding_model": f"bench:{DIMENSION}", "bits": bits}))
        if number % 1000 == 999:
            print(f"  {number + 1:,} files written", file=sys.stderr)


class Host:
    """A real `serve` on a folder and one keep-alive connection to it."""

    def __init__(self, label: str, folder: Path, libraries: int, per_publisher: int) -> None:
        self.label, self.folder, self.libraries, self.per_publisher = label, folder, libraries, per_publisher
        self.server: RunningHost = start_host(folder, "--embedder", "none", timeout=1800)
        host, port = self.server.url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=60)

    def request(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        self.connection.request("GET", path, headers=headers or {})
        response = self.connection.getresponse()
        return response.status, response.read()

    def cpu(self) -> float:
        return cpu_seconds(self.server.pids())

    def settle(self, seconds: float = 120) -> None:
        """Wait until the server is idle: its start keeps a core busy for a few seconds after it
        answers, which a peer started later would otherwise pay inside the timed rounds."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            before = self.cpu()
            time.sleep(1)
            if self.cpu() - before < 0.02:
                return

    def stop(self) -> None:
        self.connection.close()
        self.server.stop()


def requests(host: Host) -> dict[str, tuple[str, dict[str, str]]]:
    """What is asked of a host, (path, headers) by label; its publisher is in the middle, and public."""
    publisher = f"pub{host.libraries // host.per_publisher // 2:04d}"
    cursor = encode_cursor(library_name(host.libraries // 2, host.per_publisher))  # as a page ending there gives
    as_json = {"Accept": "application/json"}
    return {
        "GET /libraries (every one, kept rendered)": ("/libraries", {}),
        "GET /libraries?limit=100": ("/libraries?limit=100", {}),
        "GET /libraries?limit=100&cursor= (middle)": (f"/libraries?limit=100&cursor={cursor}", {}),
        "GET /libraries?prefix=<publisher>/": (f"/libraries?prefix={publisher}/", {}),
        "GET /p/<publisher>/libraries": (f"/p/{publisher}/libraries", {}),
        "GET / (JSON: the publishers, their list kept)": ("/?seed=1", as_json),
        "GET /p/<publisher>/ (JSON)": (f"/p/{publisher}/?seed=1", as_json),
    }


Times = dict[str, dict[str, list[float]]]


def measure(hosts: list[Host], rounds: int) -> Times:
    asked = {host.label: requests(host) for host in hosts}
    labels = list(asked[hosts[0].label])
    times: Times = {label: {host.label: [] for host in hosts} for label in labels}
    for host in hosts:  # warm-up, untimed: every request once
        for path, headers in asked[host.label].values():
            status, _ = host.request(path, headers)
            assert status == 200, (host.label, path, status)
    for round_number in range(rounds):
        order = hosts if round_number % 2 == 0 else hosts[::-1]
        for label in labels:
            for host in order:
                path, headers = asked[host.label][label]
                started = time.perf_counter()
                status, _ = host.request(path, headers)
                times[label][host.label].append(time.perf_counter() - started)
                assert status == 200, (host.label, path, status)
    return times


def measure_in_process(folders: dict[str, Path], rounds: int) -> Times:
    """What the two caches hide, on cache misses in this process, taking turns: the whole list of
    /libraries built and rendered, and the whole host's page's list of publishers made."""
    from access import ANONYMOUS
    from host.catalog.generations import load_catalog
    from host.search.query import SearchPolicy
    from host.web.library_endpoints import visible_libraries
    from host.web.page.data import PageInputs, _listing
    from host.web.page.request import PageRequest
    from host.web.responses import render_json

    catalogs = {label: load_catalog(folder) for label, folder in folders.items()}
    work: dict[str, Callable[[Any], object]] = {
        "/libraries' whole list, built and rendered (not kept, in process)": lambda catalog: render_json(
            {"libraries": list(visible_libraries(catalog, frozenset()))}),
        "the whole host's page's list of publishers (not kept, in process)": lambda catalog: _listing(
            PageInputs(catalog=catalog, request=PageRequest(), grant=ANONYMOUS, policy=SearchPolicy(), seed=1)),
    }
    times: Times = {label: {host: [] for host in catalogs} for label in work}
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libraries", type=int, default=10_000, help="library files of the many host (default 10,000)")
    parser.add_argument("--per-publisher", type=int, default=20, help="libraries to a publisher (default 20)")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds of every request (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-publishers-") as scratch:
        folders = {"many": Path(scratch) / "many", "few": Path(scratch) / "few"}
        sizes = {"many": args.libraries, "few": 100}
        for label, folder in folders.items():
            print(f"writing {sizes[label]:,} library files ...", file=sys.stderr)
            write_libraries(folder, sizes[label], args.per_publisher)
        print("starting both servers (compiling the libraries) ...", file=sys.stderr)
        hosts = [Host(label, folder, sizes[label], args.per_publisher) for label, folder in folders.items()]
        try:
            for host in hosts:
                host.settle()
            load_before = os.getloadavg()[0]
            cpu_before = [host.cpu() for host in hosts]
            started = time.perf_counter()
            times = measure(hosts, args.rounds)
            wall = time.perf_counter() - started
            cpu = [host.cpu() - before for host, before in zip(hosts, cpu_before, strict=True)]
        finally:
            for host in hosts:
                host.stop()
        process_before = time.process_time()
        times.update(measure_in_process(folders, args.rounds))
        process_cpu = time.process_time() - process_before
        load_after = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    quiet = max(load_before, load_after) <= cores
    print(f"## Publishers over HTTP: {args.libraries:,} libraries against 100\n")
    print(f"CPU: {cpu_description()['model']}, {cores} cores. 1-minute load {load_before:.2f} before, "
          f"{load_after:.2f} after{'' if quiet else ' (over the core count: the ratios are not to be relied on)'}. "
          f"{args.rounds} rounds over HTTP in {wall:.1f} s; server CPU seconds: many {cpu[0]:.2f}, "
          f"few {cpu[1]:.2f}; the last two lines, in this process: {process_cpu:.2f} CPU seconds.\n")
    print("| request | many p50 (ms) | many p95 | few p50 (ms) | few p95 | many / few |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, by_host in times.items():
        many, few = by_host["many"], by_host["few"]
        ratio = statistics.median(many) / statistics.median(few)
        print(f"| {label} | {statistics.median(many) * 1000:.2f} | {percentile(many, 0.95) * 1000:.2f} | "
              f"{statistics.median(few) * 1000:.2f} | {percentile(few, 0.95) * 1000:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
