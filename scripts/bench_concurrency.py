#!/usr/bin/env python3
"""Throughput under load (issue 15): requests/s and p50/p99 of a real `serve` at 1-64 connections.

A real `python -m host serve` (uvicorn, 127.0.0.1) on scripts/bench.py's synthetic library, wrk
as the load generator, every request a different query (1,000 bodies, each an existing bit plus
noise, cycled from a different place by each wrk thread) and the answer cache off
(`--answer-cache-bytes 0`), so every request is ranked. For each search mode (`exact`, and
`auto`: the default search) and each number of connections (1, 4, 16, 64):

  req/s, p50, p99      from wrk (10 s per point by default)
  CPU per request      the server's CPU seconds (all its processes) over the run / requests
  ceiling              cores / CPU per request: what the machine allows if CPU is what binds
  x 1 connection       req/s over the 1-connection run of the same mode (the one-at-a-time floor)

Also, in the same run: the in-process one-query rank() p50 (the floor under HTTP), the HTTP
cost of an answer-cache hit at 1 connection (the same body again, cache on: what HTTP costs
around a ranking), and a check that 16 concurrent callers get byte-identical answers to the same
queries asked one at a time.

Function for a bench step (scripts/benchmarks/ registers it): `measure_concurrency`; `report`.
As a script:

    python scripts/bench_concurrency.py --sizes 100k,1M --json out.json
    python scripts/bench_concurrency.py --sizes 100k --searches exact --connections 1,16 --seconds 5
    python scripts/bench_concurrency.py --sizes 100k --searches auto --workers default   # one worker per core

Needs wrk (`apt-get install -y wrk`) and psutil (the test extra).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Self

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.config import COUNT, SIZES, label  # noqa: E402
from benchmarks.libraries import ensure_library, near_queries, open_index  # noqa: E402
from benchmarks.report import say, table  # noqa: E402

from host.search.engine import rank  # noqa: E402
from host.search.query import SearchPolicy  # noqa: E402
from host.service.harness import free_port  # noqa: E402

CONNECTIONS = (1, 4, 16, 64)
SEARCHES = ("exact", "auto")
BODIES = 1000

WRK_SCRIPT = r"""
-- POST / with one of many query bodies (one per line of the file), each wrk thread starting at
-- its own place, so requests carry different queries.
local bodies = {}
local threads = {}
local position, accept

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do table.insert(bodies, line) end
  position = (id * 389) % #bodies
end

function request()
  position = position % #bodies + 1
  return wrk.format("POST", "/", {["Content-Type"] = "application/json"}, bodies[position])
end

function done(summary, latency, requests)
  io.write(string.format('WRK_RESULT {"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "status_errors": %d, "socket_errors": %d, "timeouts": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write,
    summary.errors.timeout))
end
"""


def body(query: np.ndarray) -> bytes:
    encoded = base64.b64encode(np.asarray(query, dtype="<f4").tobytes()).decode()
    return json.dumps({"query_embedding": encoded, "count": COUNT, "count_type": "token"}).encode()


def post(port: int, payload: bytes, timeout: float = 120) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/", payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class Server:
    """`python -m host serve` in its own process group on 127.0.0.1, with any extra options."""

    def __init__(self, workdir: Path, libraries: Path, *options: str) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "host", "serve", "--libraries", str(libraries), "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning", *options]
        self.log_path = workdir / f"server-{self.port}.log"
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, cwd=workdir, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)

    def wait_ready(self, payload: bytes, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                status, answer = post(self.port, payload)
                if status != 200:
                    raise RuntimeError(f"server answered {status}: {answer[:300]!r}")
                return
            time.sleep(0.05)
        raise RuntimeError(f"no answer within {timeout} s")

    def cpu_seconds(self) -> float:
        """User + system CPU of the server and its children (workers) so far."""
        total = 0.0
        try:
            root = psutil.Process(self.process.pid)
            for process in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    total += times.user + times.system
        except psutil.Error:
            pass
        return total

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)
        self.log.close()
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *problem: object) -> None:
        self.stop()


def scan_counts(port: int) -> tuple[float, float]:
    """The server's scan steps and the queries they scored so far (its /metrics)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    values = dict(line.split() for line in text.splitlines() if line.startswith("polymath_scan"))
    return float(values.get("polymath_scan_steps_total", 0)), float(values.get("polymath_scan_step_queries_total", 0))


def run_wrk(workdir: Path, server: Server, bodies: Path, connections: int, seconds: float) -> dict[str, Any]:
    script = workdir / "bodies.lua"
    script.write_text(WRK_SCRIPT)
    threads = min(connections, 2)
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "60s",
               "-s", str(script), f"http://127.0.0.1:{server.port}/", "--", str(bodies)]
    cpu_before, scans_before = server.cpu_seconds(), scan_counts(server.port)
    finished = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 180, check=False)
    cpu = server.cpu_seconds() - cpu_before
    scans, scanned = (after - before for after, before in zip(scan_counts(server.port), scans_before))
    line = next((line for line in finished.stdout.splitlines() if line.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {finished.stdout[-1000:]} {finished.stderr[-1000:]}")
    raw = json.loads(line.removeprefix("WRK_RESULT "))
    requests = max(1, raw["requests"])
    cpu_per_request = cpu / requests
    return {"connections": connections, "p50": raw["p50_us"] / 1e6, "p90": raw["p90_us"] / 1e6,
            "p99": raw["p99_us"] / 1e6, "max": raw["max_us"] / 1e6, "requests": raw["requests"],
            "requests_per_second": raw["requests"] / (raw["duration_us"] / 1e6),
            "errors": raw["status_errors"] + raw["socket_errors"] + raw["timeouts"],
            "server_cpu_seconds": cpu, "cpu_per_request": cpu_per_request,
            "queries_per_step": scanned / scans if scans else None,
            "ceiling": (os.cpu_count() or 1) / cpu_per_request, "load": os.getloadavg()[0]}


def identical_under_load(server: Server, bodies: list[bytes], callers: int = 16) -> dict[str, Any]:
    """The same queries asked one at a time, then by `callers` threads at once: byte-identical answers?"""
    alone = [post(server.port, payload)[1] for payload in bodies]
    together: list[bytes | None] = [None] * len(bodies)
    start = threading.Barrier(callers)

    def ask(first: int) -> None:
        start.wait()
        for number in range(first, len(bodies), callers):
            together[number] = post(server.port, bodies[number])[1]

    threads = [threading.Thread(target=ask, args=(first,)) for first in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    same = sum(one == other for one, other in zip(alone, together))
    return {"queries": len(bodies), "identical": same, "callers": callers}


def in_process_floor(folder: Path, bits: int, queries: np.ndarray, search: str) -> dict[str, float]:
    """One query at a time in this process, one BLAS thread: rank() as the server runs it."""
    from threadpoolctl import threadpool_limits

    index = open_index(folder, bits)
    policy = SearchPolicy(mode=search).for_bits(bits)
    times, cpus = [], []
    with threadpool_limits(1):
        for query in queries:
            started, cpu = time.perf_counter(), time.thread_time()
            rank(index, query, granted=frozenset(), count=COUNT, count_type="token", search=policy)
            cpus.append(time.thread_time() - cpu)
            times.append(time.perf_counter() - started)
    return {"p50": float(np.median(times[2:])), "cpu_p50": float(np.median(cpus[2:]))}


def measure_concurrency(workdir: Path, bits: int, *, searches: tuple[str, ...] = SEARCHES,
                        connections: tuple[int, ...] = CONNECTIONS, seconds: float = 10.0, workers: int | None = 1,
                        seed: int = 0, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """wrk against a real serve at each number of connections, per search mode, distinct queries
    (`workers` None: serve's own default, one per core)."""
    worker_options = ("--workers", str(workers)) if workers is not None else ()
    folder = ensure_library(workdir, bits, seed)
    index = open_index(folder, bits)
    queries = near_queries(index.libraries[0].embeddings, BODIES, np.random.default_rng(seed + 7))
    del index
    payloads = [body(query) for query in queries]
    bodies = workdir / f"bodies-{label(bits)}.txt"
    bodies.write_bytes(b"\n".join(payloads) + b"\n")
    results: dict[str, Any] = {"bits": bits, "workers": workers or f"default, {os.cpu_count()}",
                               "cores": os.cpu_count(), "searches": {}}
    for search in searches:
        say(f"{label(bits)} {search}: in-process one-query floor")
        measured: dict[str, Any] = {"in_process": in_process_floor(folder, bits, queries[:40], search), "runs": []}
        options = ("--search", search, *worker_options, "--answer-cache-bytes", "0", *extra)
        with Server(workdir, folder, *options) as server:
            server.wait_ready(payloads[0])
            for payload in payloads[1:8]:  # warm: pages of the matrix, the thread pool
                post(server.port, payload)
            for count in connections:
                say(f"{label(bits)} {search}: wrk -c{count} for {seconds:.0f} s (load {os.getloadavg()[0]:.1f})")
                measured["runs"].append(run_wrk(workdir, server, bodies, count, seconds))
            measured["identical"] = identical_under_load(server, payloads[:48])
        if search == "auto":
            with Server(workdir, folder, "--search", search, *worker_options, *extra) as cached:
                cached.wait_ready(payloads[0])
                one = workdir / f"body-one-{label(bits)}.txt"
                one.write_bytes(payloads[0] + b"\n")
                measured["cache_hit"] = run_wrk(workdir, cached, one, 1, min(seconds, 5))
                one.unlink()
        results["searches"][search] = measured
    bodies.unlink()
    return results


def ms(seconds: float) -> str:
    value = seconds * 1000
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def report(results: dict[str, Any]) -> str:
    parts = []
    for size, measured in results.items():
        rows = []
        for search, outcome in measured["searches"].items():
            runs = outcome["runs"]
            single = next((run for run in runs if run["connections"] == 1), runs[0])
            for run in runs:
                rows.append([search, run["connections"], f"{run['requests_per_second']:,.1f}", ms(run["p50"]),
                             ms(run["p99"]), run["errors"], ms(run["cpu_per_request"]),
                             f"{run['ceiling']:,.0f}", f"{run['requests_per_second'] / run['ceiling']:.0%}",
                             f"{run['requests_per_second'] / single['requests_per_second']:.2f}x",
                             "-" if run.get("queries_per_step") is None else f"{run['queries_per_step']:.1f}",
                             f"{run['load']:.1f}"])
        parts.append(table(
            f"{size}: wrk against serve (--workers {measured['workers']}), distinct queries, answer cache off",
            ["search", "connections", "req/s", "p50 ms", "p99 ms", "errors", "CPU ms/req", "ceiling req/s",
             "of ceiling", "x 1 connection", "queries per step", "load"], rows,
            f"ceiling = {measured['cores']} cores / the server's CPU per request in that run. "
            "x 1 connection: requests/s over the same mode's 1-connection run (one query at a time)."))
        notes = []
        for search, outcome in measured["searches"].items():
            floor = outcome["in_process"]
            same = outcome["identical"]
            notes.append(f"- {search}: in-process rank() p50 {ms(floor['p50'])} ms (CPU {ms(floor['cpu_p50'])} ms); "
                         f"{same['identical']}/{same['queries']} answers byte-identical with {same['callers']} "
                         "callers at once and one at a time")
            hit = outcome.get("cache_hit")
            if hit:
                distinct = next(run for run in outcome["runs"] if run["connections"] == 1)
                notes.append(f"- {search}: HTTP answer-cache hit p50 {ms(hit['p50'])} ms at 1 connection; a distinct "
                             f"query {ms(distinct['p50'])} ms: ranking over HTTP minus the cached-answer overhead "
                             f"= {ms(distinct['p50'] - hit['p50'])} ms")
        parts.append("\n".join(notes) + "\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100k")
    parser.add_argument("--searches", default=",".join(SEARCHES))
    parser.add_argument("--connections", default=",".join(map(str, CONNECTIONS)))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", default="1", help="worker processes of serve, or `default` (serve's own: one per core)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "polymath-host-bench")
    parser.add_argument("--serve-option", action="append", default=[], help="passed to serve (repeatable)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = {}
    for size in args.sizes.split(","):
        results[size] = measure_concurrency(
            args.workdir, SIZES[size], searches=tuple(args.searches.split(",")),
            connections=tuple(int(count) for count in args.connections.split(",")), seconds=args.seconds,
            workers=None if args.workers == "default" else int(args.workers), seed=args.seed,
            extra=tuple(args.serve_option))
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
