#!/usr/bin/env python3
"""The cost of a query over HTTP beside faiss's IVF (issue 20, part 1), measured in one run.

A fresh `python -m host serve` with default settings on scripts/bench.py's synthetic library (unit
float32, 1536 dimensions, 200 clusters), one keep-alive connection, 20 warm-up queries; then every
query body twice in a row: the first misses the answer cache (a search, the answer built and
rendered), the second is answered from it (what HTTP, the middleware and the body's parsing cost
around a search). The cache-miss extra is the difference of their medians. In the same process
and the same rounds, taking turns with the HTTP queries so that a change of the machine's load
touches all alike:

  faiss IVFFlat   nlist 1024 (faiss's usual), nprobe 1-16, one thread: p50 and recall@10
  ours in-process the host's default search by `rank()` (no HTTP): the floor under the server

Recall@10 is against the exact top 10 (the host's exact `rank()`), for the HTTP answers (by bit
id) and for faiss (by row). The headline: the extra over the p50 of the first faiss setting with
recall@10 >= 0.99, for the host with default settings and for a second host with the fewest
clusters per query (`--probes N --oversample 0`) that reaches recall@10 >= 0.99 on these queries,
as faiss's setting does (the default reads at least 0.5% of the visible bits, 500 rows at 100k).
With `--baseline DIR` (a checkout of another commit, e.g. `git worktree add /tmp/base main`) a
server of that code is measured in the same rounds too.

Function for a bench step (scripts/benchmarks/http_query.py registers it): `measure_http_query`;
`report`.

    python scripts/bench_http_query.py                      # 100k, top 10 bits
    python scripts/bench_http_query.py --count 1500 --count-type token --baseline /tmp/base
    python scripts/bench_http_query.py --serve-option=--workers --serve-option=1

Needs `pip install -e '.[bench]'` (faiss-cpu). Progress on stderr, Markdown on stdout.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.config import SIZES, label  # noqa: E402
from benchmarks.libraries import ensure_library, near_queries, open_index, warm  # noqa: E402
from benchmarks.report import describe_machine, ms, say, table  # noqa: E402

from host.search.engine import Search, rank  # noqa: E402
from host.search.query import SearchPolicy  # noqa: E402
from host.service.harness import RunningHost, spawn_host  # noqa: E402

K = 10
NLIST = 1024
NPROBES = (1, 2, 4, 8, 16)
WARM_UP = 20
SLICE = 25  # queries per turn of each engine
RECALL_GOAL = 0.99
NOBODY: frozenset[str] = frozenset()


class Client:
    """One keep-alive connection to a server: POST / with a JSON body, the status and the answer."""

    def __init__(self, host: RunningHost) -> None:
        self.host = host
        self.connection = http.client.HTTPConnection("127.0.0.1", host.port, timeout=60)

    def post(self, body: bytes) -> tuple[float, bytes]:
        started = time.perf_counter()
        self.connection.request("POST", "/", body, {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        answer = response.read()
        seconds = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"the server answered {response.status}: {answer[:300]!r}")
        return seconds, answer


def start_server(folder: Path, root: Path | None, options: list[str], log: Path) -> RunningHost:
    """`serve` with default settings (and `options`), in its own session like scripts/bench.py's servers;
    from the checkout `root` when given. Returns once it is ready and has gone quiet (the local
    embedder loads in the background at start)."""
    environment = {"PYTHONPATH": str(root)} if root is not None else None
    host = spawn_host(folder, *options, env=environment, log_path=log, own_session=True, workers=None)
    host.wait_until_ready("/readyz", timeout=600)
    settle(host)
    return host


def settle(host: RunningHost, quiet: float = 0.05, timeout: float = 60) -> None:
    """Wait until the server's processes use under `quiet` of a core for half a second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds(host)
        time.sleep(0.5)
        if cpu_seconds(host) - before < quiet * 0.5:
            return


def cpu_seconds(host: RunningHost) -> float:
    """CPU time of the server's processes so far, to the nanosecond (the scheduler's own count of
    every thread's running time: clock ticks are 10 ms, too coarse for a block of requests)."""
    total = 0
    for pid in host.pids():
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, ValueError):
                    total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def body(query: np.ndarray, count: int, count_type: str) -> bytes:
    encoded = base64.b64encode(np.asarray(query, dtype="<f4").tobytes()).decode()
    return json.dumps({"query_embedding": encoded, "count": count, "count_type": count_type}).encode()


def answer_ids(answer: bytes) -> list[str]:
    return [bit["id"] for bit in json.loads(answer)["bits"]]


def build_ivf(matrix: np.ndarray, saved: Path) -> Any:
    """faiss IVFFlat over `matrix`, trained and filled with every core (kept in `saved` for the next run)."""
    import faiss  # type: ignore[import-not-found]

    if saved.exists():
        ivf = faiss.read_index(str(saved))
        if ivf.ntotal == len(matrix) and ivf.nlist == NLIST:
            faiss.omp_set_num_threads(1)
            return ivf
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    vectors = np.ascontiguousarray(matrix)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(matrix.shape[1]), matrix.shape[1], NLIST, faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors)
    ivf.add(vectors)
    faiss.write_index(ivf, str(saved))
    faiss.omp_set_num_threads(1)
    return ivf


def recall(found: list[Any], truth: list[Any]) -> float:
    return len(set(found) & set(truth)) / len(truth)


def matched_probes(index: Any, queries: np.ndarray, truth_rows: list[np.ndarray]) -> int:
    """The fewest clusters the host's cluster scan must read (`--probes N --oversample 0`) for a mean
    recall@10 of at least RECALL_GOAL on these queries: the host's setting beside faiss's."""
    for probes in range(1, 33):
        search = Search(approximate=True, oversample=0, probes=probes)
        found = [rank(index, query, granted=NOBODY, count=K, count_type="bit", search=search).rows.tolist()
                 for query in queries]
        if np.mean([recall(rows, truth.tolist()) for rows, truth in zip(found, truth_rows)]) >= RECALL_GOAL:
            return probes
    return 32


def measure_http_query(workdir: Path, bits: int, *, queries_measured: int = 400, count: int = K,
                       count_type: str = "bit", baseline: Path | None = None, serve_options: tuple[str, ...] = (),
                       seed: int = 0) -> dict[str, Any]:
    """The cache-miss extra of `serve` (default settings, then at the fewest probes reaching recall@10
    >= 0.99, then `baseline`'s code if given) beside faiss IVFFlat, in one run."""
    from threadpoolctl import threadpool_limits

    args = argparse.Namespace(size=label(bits), queries=queries_measured, count=count, count_type=count_type,
                              baseline=baseline, serve_option=list(serve_options), workdir=workdir, seed=seed)
    folder = ensure_library(args.workdir, bits, args.seed)
    index = open_index(folder, bits)
    matrix = index.libraries[0].embeddings
    warm(matrix)
    queries = near_queries(matrix, WARM_UP + args.queries, np.random.default_rng(args.seed + 20))
    say(f"{args.size}: the exact top {K} of {args.queries} queries")
    with threadpool_limits(os.cpu_count() or 1):
        truth_rows = [rank(index, query, granted=NOBODY, count=K, count_type="bit").rows for query in queries]
    truth_ids = [[index.libraries[0].bit_id(int(row)) for row in rows] for rows in truth_rows]
    say(f"{args.size}: faiss IVFFlat nlist {NLIST}: train and add (every core), or the one saved last time")
    started = time.perf_counter()
    ivf = build_ivf(matrix, folder / f"faiss-ivf{NLIST}.index")
    build_seconds = time.perf_counter() - started
    policy = SearchPolicy().for_bits(bits)
    bodies = [body(query, args.count, args.count_type) for query in queries]
    probes = matched_probes(index, queries, truth_rows)
    say(f"{args.size}: the host reaches recall@10 >= {RECALL_GOAL} from --probes {probes} --oversample 0")
    matched = ["--probes", str(probes), "--oversample", "0"]
    runs = [("ours", None, args.serve_option), (f"ours {' '.join(matched)}", None, [*matched, *args.serve_option]),
            *([("baseline", args.baseline, args.serve_option)] if args.baseline else [])]

    servers: dict[str, RunningHost] = {}
    try:
        for number, (name, root, options) in enumerate(runs):
            say(f"{args.size}: starting serve ({name}) {' '.join(options)}")
            servers[name] = start_server(folder, root, options, args.workdir / f"serve-{number}.log")
        clients = {name: Client(host) for name, host in servers.items()}
        for client in clients.values():
            for payload in bodies[:WARM_UP]:
                client.post(payload)
        miss: dict[str, list[float]] = {name: [] for name in clients}
        hit: dict[str, list[float]] = {name: [] for name in clients}
        http_recall: dict[str, list[float]] = {name: [] for name in clients}
        miss_cpu: dict[str, list[float]] = {name: [] for name in clients}  # the server's CPU per request, by slice
        hit_cpu: dict[str, list[float]] = {name: [] for name in clients}
        faiss_cpu: dict[int, list[float]] = {nprobe: [] for nprobe in NPROBES}
        faiss_times: dict[int, list[float]] = {nprobe: [] for nprobe in NPROBES}
        faiss_recall: dict[int, list[float]] = {nprobe: [] for nprobe in NPROBES}
        floor: list[float] = []
        loads = []
        say(f"{args.size}: {args.queries} queries, {SLICE} at a time per engine (load {os.getloadavg()[0]:.1f})")
        with threadpool_limits(1):
            for first in range(WARM_UP, len(queries), SLICE):
                numbers = range(first, min(first + SLICE, len(queries)))
                loads.append(os.getloadavg()[0])
                for name, client in clients.items():
                    answers = {}
                    cpu = cpu_seconds(client.host)
                    for number in numbers:  # each body for the first time: the answer cache misses
                        missed, answers[number] = client.post(bodies[number])
                        miss[name].append(missed)
                        http_recall[name].append(recall(answer_ids(answers[number])[:K], truth_ids[number]))
                    cpu, before = cpu_seconds(client.host), cpu
                    miss_cpu[name].append((cpu - before) / len(numbers))
                    for number in numbers:  # the same bodies again: answered from the cache
                        again, cached = client.post(bodies[number])
                        if cached != answers[number]:
                            raise RuntimeError("the cached answer differs from the computed one")
                        hit[name].append(again)
                    hit_cpu[name].append((cpu_seconds(client.host) - cpu) / len(numbers))
                for nprobe in NPROBES:
                    ivf.nprobe = nprobe
                    for number in numbers:
                        started, cpu = time.perf_counter(), time.thread_time()
                        rows = ivf.search(queries[number][np.newaxis, :], K)[1][0]
                        faiss_times[nprobe].append(time.perf_counter() - started)
                        faiss_cpu[nprobe].append(time.thread_time() - cpu)
                        faiss_recall[nprobe].append(recall(rows.tolist(), truth_rows[number].tolist()))
                for number in numbers:
                    started = time.perf_counter()
                    rank(index, queries[number], granted=NOBODY, count=args.count, count_type=args.count_type,
                         search=policy)
                    floor.append(time.perf_counter() - started)
        logs = {name: host.log() for name, host in servers.items()}
    finally:
        for host in servers.values():
            host.stop()
    results: dict[str, Any] = {
        "bits": bits, "queries": args.queries, "count": args.count, "count_type": args.count_type,
        "serve_options": args.serve_option, "faiss_build_seconds": build_seconds, "load": loads,
        "machine": describe_machine(), "in_process_p50": float(np.median(floor)), "http": {}, "faiss": {},
    }
    for name in clients:
        results["http"][name] = {
            "miss_p50": float(np.median(miss[name])), "hit_p50": float(np.median(hit[name])),
            "miss_p99": float(np.percentile(miss[name], 99)), "hit_p99": float(np.percentile(hit[name], 99)),
            "extra_p50": float(np.median(miss[name]) - np.median(hit[name])),
            "pairwise_extra_p50": float(np.median(np.subtract(miss[name], hit[name]))),
            "recall": float(np.mean(http_recall[name])),
            "miss_cpu": float(np.median(miss_cpu[name])), "hit_cpu": float(np.median(hit_cpu[name])),
            "extra_cpu": float(np.median(miss_cpu[name]) - np.median(hit_cpu[name])),
            "startup_lines": [line for line in logs[name].splitlines()
                              if "populated" in line or "worker processes" in line or " serving: " in line],
        }
    for nprobe in NPROBES:
        results["faiss"][nprobe] = {"p50": float(np.median(faiss_times[nprobe])),
                                    "p99": float(np.percentile(faiss_times[nprobe], 99)),
                                    "cpu_p50": float(np.median(faiss_cpu[nprobe])),
                                    "recall": float(np.mean(faiss_recall[nprobe]))}
    return results


def report(results: dict[str, Any]) -> str:
    reached = [nprobe for nprobe, point in results["faiss"].items() if point["recall"] >= RECALL_GOAL]
    peer = results["faiss"][reached[0]] if reached else None
    rows = []
    for name, point in results["http"].items():
        rows.append([f"{name} over HTTP: miss", ms(point["miss_p50"]), ms(point["miss_p99"]), ms(point["miss_cpu"]),
                     f"{point['recall']:.4f}", ""])
        rows.append([f"{name} over HTTP: hit (the same body again)", ms(point["hit_p50"]), ms(point["hit_p99"]),
                     ms(point["hit_cpu"]), "", ""])
        rows.append([f"**{name}: cache-miss extra** (miss - hit)", f"**{ms(point['extra_p50'])}**", "",
                     f"**{ms(point['extra_cpu'])}**", "",
                     f"{point['extra_p50'] / peer['p50']:.2f}x ({point['extra_cpu'] / peer['cpu_p50']:.2f}x CPU)"
                     if peer else ""])
    rows.append(["ours in-process, rank() as served (no HTTP)", ms(results["in_process_p50"]), "", "", "", ""])
    for nprobe, point in results["faiss"].items():
        rows.append([f"faiss IVFFlat nlist {NLIST} nprobe {nprobe}", ms(point["p50"]), ms(point["p99"]),
                     ms(point["cpu_p50"]), f"{point['recall']:.4f}", "(the peer)" if point is peer else ""])
    budget = f"{results['count']} {results['count_type']}{'s' if results['count'] != 1 else ''}"
    options = " ".join(results["serve_options"]) or "default settings"
    loads = results["load"]
    headlines = []
    for name, ours in results["http"].items():
        if peer and name.startswith("ours"):
            headlines.append(
                f"**{name}: cache-miss extra {ms(ours['extra_p50'])} ms against faiss IVF's {ms(peer['p50'])} ms "
                f"(nprobe {reached[0]}, the first with recall@10 >= {RECALL_GOAL}): {ours['extra_p50'] / peer['p50']:.2f}x** "
                f"(in CPU time {ms(ours['extra_cpu'])} against {ms(peer['cpu_p50'])} ms: "
                f"{ours['extra_cpu'] / peer['cpu_p50']:.2f}x), at recall@10 {ours['recall']:.4f} over HTTP.")
    notes = [*headlines, "CPU ms: the server's CPU time per request (all its threads and processes, from the "
             "scheduler's counts over each slice of requests), median over slices; faiss's thread CPU time.",
             f"Load {min(loads):.1f}-{max(loads):.1f}; commit {results['machine'].get('commit', '?')}; "
             f"faiss train + add (or read) {results['faiss_build_seconds']:.1f} s."]
    for name, point in results["http"].items():
        notes += [f"{name} at start: {line.split(': ', 1)[-1]}" for line in point["startup_lines"][:4]]
    return table(f"{label(results['bits'])}: a query over HTTP ({options}; one keep-alive connection; {budget}) "
                 f"beside faiss, {results['queries']} queries, one run",
                 ["what", "p50 ms", "p99 ms", "CPU ms", "recall@10", "extra / faiss"], rows,
                 "\n".join(note for note in notes if note))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100k", choices=list(SIZES))
    parser.add_argument("--queries", type=int, default=400, help="distinct queries measured (default %(default)s)")
    parser.add_argument("--count", type=int, default=K)
    parser.add_argument("--count-type", default="bit", choices=["bit", "token"])
    parser.add_argument("--baseline", type=Path, help="also serve this checkout of the host, in the same rounds")
    parser.add_argument("--serve-option", action="append", default=[], help="passed to serve (repeatable)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "polymath-host-bench")
    parser.add_argument("--seed", type=int, default=0, help="of the library (scripts/bench_index.py's default)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = measure_http_query(args.workdir, SIZES[args.size], queries_measured=args.queries, count=args.count,
                                 count_type=args.count_type, baseline=args.baseline,
                                 serve_options=tuple(args.serve_option), seed=args.seed)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
