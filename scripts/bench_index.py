#!/usr/bin/env python3
"""Search at index speed (issue 14): the host next to the engines a user would pick instead.

On one synthetic library (scripts/bench.py's generator: unit float32, 1536 dimensions, 200
clusters) and one set of queries (existing bits plus noise: they have real neighbours), each
engine answers the top 10, one thread per query:

  ours         exact `rank()`, approximate `rank()` by probes, the default search as served
  faiss-flat   IndexFlatIP (its own copy of the vectors)
  faiss-ivf    IndexIVFFlat, nlist 1024 (and the host's own cluster count), nprobe sweep
  faiss-hnsw   IndexHNSWFlat, M 32, efSearch sweep
  usearch      usearch.Index (f32, inner product), expansion_search sweep
  kernels      one full scan of the matrix by several kernels: the floor of exact search

Each peer runs in a fresh process that also opens the host's memory-mapped library and times the
host's approximate search on the same queries, interleaved with its own, so every row of the
tables has a same-process, same-moment comparison. Builds may use every core; searches use one
thread. Recall@10 is against the host's exact top 10. Memory is the process's anonymous RSS
added by the build (the host's vectors are a shared file mapping, so its figure is what the
compiled layout adds).

Functions for bench steps (scripts/benchmarks/ registers them): `measure_peers`,
`measure_kernels`, `measure_compile`, `report`. As a script:

    python scripts/bench_index.py --sizes 100k,1M --json out.json
    python scripts/bench_index.py --sizes 100k --peers faiss-ivf,ours --queries 100

Progress on stderr, Markdown on stdout. Needs `pip install -e '.[bench]'` (faiss-cpu, usearch,
numkong); a peer whose library is missing is skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.config import SIZES, label  # noqa: E402
from benchmarks.libraries import ensure_library, near_queries, open_index, warm  # noqa: E402
from benchmarks.report import say, table  # noqa: E402

from host.search.engine import EXACT, Search, rank  # noqa: E402
from host.search.query import SearchPolicy  # noqa: E402

PEERS = ("ours", "faiss-flat", "faiss-ivf", "faiss-hnsw", "usearch", "kernels")
OUR_PROBES = (1, 2, 3, 4, 6, 8, 12, 16, 32)
IVF_NPROBES = (1, 2, 4, 8, 16, 32, 64)
HNSW_EF = (16, 32, 64, 128, 256)
USEARCH_EXPANSION = (16, 32, 64, 128, 256)
K = 10
NOBODY: frozenset[str] = frozenset()
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# ---- measuring ------------------------------------------------------------------------------------


def rss_anon() -> int:
    """Anonymous resident memory of this process, in bytes (file mappings left out)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def peak_anon() -> Iterator[dict[str, float]]:
    """The highest anonymous RSS seen while the block runs (sampled every 20 ms), and its wall and CPU time."""
    found: dict[str, float] = {"peak": float(rss_anon())}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            found["peak"] = max(found["peak"], rss_anon())

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    started, cpu = time.perf_counter(), time.process_time()
    try:
        yield found
    finally:
        stop.set()
        watcher.join()
        found["peak"] = max(found["peak"], rss_anon())
        found["seconds"] = time.perf_counter() - started
        found["cpu_seconds"] = time.process_time() - cpu


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return len(np.intersect1d(np.asarray(found, dtype=np.int64), truth)) / len(truth)


def percentiles(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples)
    return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99)),
            "min": float(values.min()), "n": len(values)}


def sweep(engines: dict[str, Callable[[np.ndarray], np.ndarray]], queries: np.ndarray, truth: np.ndarray,
          budget: float, rounds: int = 2) -> dict[str, dict[str, float]]:
    """Each engine over all the queries in a row, as a server meets distinct queries: a query's vectors
    are in memory, not in cache (the previous query read others), while what every query reads (the
    centroids, the interpreter) stays warm, as it does under load. Engines take turns in rotating
    order, `rounds` times over, so that a drift of the machine's load touches them alike."""
    names = list(engines)
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    recalls: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm-up, untimed
        engines[name](queries[0])
    share = budget / (rounds * len(names))
    for round_number in range(rounds):
        for name in names[round_number % len(names):] + names[: round_number % len(names)]:
            deadline = time.perf_counter() + share
            for number, (query, expected) in enumerate(zip(queries, truth)):
                started, cpu = time.perf_counter(), time.thread_time()
                found = engines[name](query)
                cpus[name].append(time.thread_time() - cpu)
                walls[name].append(time.perf_counter() - started)
                if round_number == 0:
                    recalls[name].append(recall(found, expected))
                if time.perf_counter() > deadline and number >= 20:
                    break
    return {name: {**percentiles(walls[name]), "cpu_p50": float(np.median(cpus[name])),
                   "recall": float(np.mean(recalls[name])), "worst_recall": float(np.min(recalls[name])),
                   "recall_queries": len(recalls[name])}
            for name in names}


def limit_threads(threads: int) -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)
    with contextlib.suppress(ImportError):
        import faiss  # type: ignore[import-not-found]

        faiss.omp_set_num_threads(threads)


# ---- the host ---------------------------------------------------------------------------------------


def ours_top(index: Any, search: Search) -> Callable[[np.ndarray], np.ndarray]:
    def run(query: np.ndarray) -> np.ndarray:
        return rank(index, query, granted=NOBODY, count=K, count_type="bit", search=search).rows
    return run


def our_engines(index: Any, probes: tuple[int, ...]) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    engines = {f"ours probes={p}": ours_top(index, Search(approximate=True, oversample=0, probes=p)) for p in probes}
    served = SearchPolicy(mode="auto").for_bits(index.bit_count)
    engines[f"ours as served (probes {served.probes}, oversample {served.oversample})"] = ours_top(index, served)
    return engines


def layout_memory(index: Any) -> int:
    """What the clustered layout keeps in memory beside the shared matrix: centroids, offsets, tie keys."""
    total = 0 if index.tie_keys is None else index.tie_keys.nbytes
    for library in index.libraries:
        for array in (library.centroids, library.cluster_offsets, library.source_rows):
            total += 0 if array is None else array.nbytes
    return total


# ---- one peer, in its own process -------------------------------------------------------------------


def run_peer(name: str, folder: Path, bits: int, queries: np.ndarray, truth: np.ndarray, budget: float,
             build_threads: int) -> dict[str, Any]:
    """Build `name` on the library's matrix, then time it next to the host on the same queries."""
    index = open_index(folder, bits)
    matrix = index.libraries[0].embeddings
    warm(matrix)
    limit_threads(build_threads)
    before = rss_anon()
    result: dict[str, Any] = {"peer": name, "bits": bits, "load_before": os.getloadavg()[0]}
    with peak_anon() as build:
        engines = build_peer(name, index, matrix)
    if engines is None:
        return {**result, "skipped": f"{name}: its library is not installed (pip install -e '.[bench]')"}
    gc.collect()
    result.update(build_seconds=build["seconds"], build_cpu_seconds=build["cpu_seconds"],
                  extra_mib=(rss_anon() - before) / 2**20, build_peak_mib=(build["peak"] - before) / 2**20)
    limit_threads(1)
    if name == "ours":
        result["extra_mib"] = layout_memory(index) / 2**20
        engines["ours exact"] = ours_top(index, EXACT)
    if name in ("ours", "faiss-ivf"):  # head to head with faiss's IVF: every setting of ours beside its
        engines.update(our_engines(index, OUR_PROBES))
    else:  # the host's default search, as the same-moment yardstick
        served = SearchPolicy(mode="auto").for_bits(index.bit_count)
        engines[f"ours as served (probes {served.probes}, oversample {served.oversample})"] = ours_top(index, served)
    points = sweep(engines, queries, truth, budget * len(engines))
    result["points"] = points
    result["load_after"] = os.getloadavg()[0]
    return result


def build_peer(name: str, index: Any, matrix: np.ndarray) -> dict[str, Callable[[np.ndarray], np.ndarray]] | None:
    """The peer's search functions by setting (top 10 rows), once built; None if not installed."""
    dimension = matrix.shape[1]
    if name == "ours":
        from host.store.clusters import plan_layout

        plan_layout(matrix, np.ones(len(matrix), dtype=bool))  # the layout's build, timed as the peers' are
        return {}
    if name in ("faiss-flat", "faiss-ivf", "faiss-hnsw"):
        try:
            import faiss
        except ImportError:
            return None
        vectors = np.ascontiguousarray(matrix)
        engines: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
        if name == "faiss-flat":
            flat = faiss.IndexFlatIP(dimension)
            flat.add(vectors)
            engines["faiss Flat"] = lambda query: flat.search(query[np.newaxis, :], K)[1][0]
        elif name == "faiss-ivf":
            ours = index.clusters.count if index.clusters is not None else 1024
            nlists = [1024] if 0.5 < ours / 1024 < 2 else [1024, ours]  # faiss's usual, and the host's own count
            for nlist in nlists:
                ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(dimension), dimension, nlist, faiss.METRIC_INNER_PRODUCT)
                ivf.train(vectors)
                ivf.add(vectors)
                for nprobe in IVF_NPROBES:
                    engines[f"faiss IVFFlat nlist={nlist} nprobe={nprobe}"] = _ivf_search(ivf, nprobe)
                if nlist != nlists[-1]:
                    say(f"faiss-ivf nlist {nlist} built")
        else:
            hnsw = faiss.IndexHNSWFlat(dimension, 32, faiss.METRIC_INNER_PRODUCT)
            hnsw.add(vectors)
            for ef in HNSW_EF:
                engines[f"faiss HNSW M=32 efSearch={ef}"] = _hnsw_search(hnsw, ef)
        del vectors
        return engines
    if name == "usearch":
        try:
            from usearch.index import Index
        except ImportError:
            return None
        usearch_index = Index(ndim=dimension, metric="ip", dtype="f32")
        usearch_index.add(np.arange(len(matrix)), np.ascontiguousarray(matrix), threads=os.cpu_count() or 1)
        engines = {}
        for expansion in USEARCH_EXPANSION:
            engines[f"usearch f32 expansion_search={expansion}"] = _usearch_search(usearch_index, expansion)
        return engines
    raise ValueError(f"unknown peer {name!r}")


def _ivf_search(ivf: Any, nprobe: int) -> Callable[[np.ndarray], np.ndarray]:
    def run(query: np.ndarray) -> np.ndarray:
        ivf.nprobe = nprobe
        rows: np.ndarray = ivf.search(query[np.newaxis, :], K)[1][0]
        return rows
    return run


def _hnsw_search(hnsw: Any, ef: int) -> Callable[[np.ndarray], np.ndarray]:
    def run(query: np.ndarray) -> np.ndarray:
        hnsw.hnsw.efSearch = ef
        rows: np.ndarray = hnsw.search(query[np.newaxis, :], K)[1][0]
        return rows
    return run


def _usearch_search(usearch_index: Any, expansion: int) -> Callable[[np.ndarray], np.ndarray]:
    def run(query: np.ndarray) -> np.ndarray:
        usearch_index.expansion_search = expansion
        return np.asarray(usearch_index.search(query, K, threads=1).keys, dtype=np.int64)
    return run


# ---- kernels: one full scan, the floor of exact search ----------------------------------------------


def run_kernels(folder: Path, bits: int, queries: np.ndarray, budget: float) -> dict[str, Any]:
    """One full matrix-vector product by several kernels, interleaved, one thread: what exact search can cost."""
    index = open_index(folder, bits)
    matrix = index.libraries[0].embeddings
    warm(matrix)
    limit_threads(1)
    out = np.empty(len(matrix), dtype=np.float32)
    kernels: dict[str, Callable[[np.ndarray], Any]] = {
        "numpy E @ q (OpenBLAS sgemv)": lambda q: np.dot(matrix, q, out=out),
        "numpy einsum": lambda q: np.einsum("ij,j->i", matrix, q, out=out),
        "numpy vecdot": lambda q: np.vecdot(matrix, q, out=out),
        "host exact rank()": lambda q: rank(index, q, granted=NOBODY, count=K, count_type="bit"),
    }
    with contextlib.suppress(ImportError):
        import numkong

        kernels["numkong cdist dot"] = lambda q: numkong.cdist(q[np.newaxis, :], matrix, metric="dot",
                                                               out_dtype="float32")
    with contextlib.suppress(ImportError):
        import faiss

        kernels["faiss fvec_inner_products_ny"] = lambda q: faiss.fvec_inner_products_ny(
            faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(matrix), matrix.shape[1], len(matrix))
    names = list(kernels)
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        kernels[name](queries[0])
    deadline = time.perf_counter() + budget
    for number, query in enumerate(queries):
        for name in names[number % len(names):] + names[: number % len(names)]:
            started, cpu = time.perf_counter(), time.thread_time()
            kernels[name](query)
            cpus[name].append(time.thread_time() - cpu)
            walls[name].append(time.perf_counter() - started)
        if time.perf_counter() > deadline and number >= 10:
            break
    gigabytes = matrix.nbytes / 1e9
    return {"bits": bits, "load": os.getloadavg()[0], "kernels": {
        name: {**percentiles(walls[name]), "cpu_p50": float(np.median(cpus[name])), "cpu_min": float(min(cpus[name])),
               "gb_per_s_cpu_min": gigabytes / min(cpus[name])} for name in names}}


# ---- compile ----------------------------------------------------------------------------------------


def run_compile(folder: Path, bits: int, scratch: Path) -> dict[str, Any]:
    """The whole compile of the library from parsed arrays (write_compiled: layout, sign codes, text
    index, records, fsync), in this fresh process: wall and CPU seconds, peak anonymous memory."""
    import msgpack

    from host.library.format import ParsedLibrary
    from host.store.compiled import write_compiled

    index = open_index(folder, bits)
    library = index.libraries[0]
    file_rows = library.rows_in_file_order()
    embeddings = np.load(scratch / "embeddings.npy", mmap_mode="r") if (scratch / "embeddings.npy").exists() else None
    if embeddings is None:  # the library's vectors in file order, as a parsed file would hold them
        copy = np.lib.format.open_memmap(scratch / "embeddings.npy", mode="w+", dtype="<f4",
                                         shape=library.embeddings.shape)
        for start in range(0, bits, 1 << 15):
            copy[start : start + (1 << 15)] = library.embeddings[file_rows[start : start + (1 << 15)]]
        copy.flush()
        del copy
        embeddings = np.load(scratch / "embeddings.npy", mmap_mode="r")
    records = [msgpack.unpackb(library.records[library.record_offsets[row] : library.record_offsets[row + 1]])
               for row in file_rows.tolist()]
    parsed = ParsedLibrary(embedding_model=library.embedding_model, embeddings=embeddings,
                           token_counts=library.token_counts[file_rows].astype(np.int64),
                           ids=[library.bit_id(row) for row in file_rows.tolist()], records=records,
                           access_tags=[None] * bits, details=library.details)
    del index, library
    gc.collect()
    before = rss_anon()
    with peak_anon() as compiled:
        write_compiled(parsed, scratch / "compiled", no_source(), "bench")
    return {"bits": bits, "seconds": compiled["seconds"], "cpu_seconds": compiled["cpu_seconds"],
            "peak_anon_mib": compiled["peak"] / 2**20, "added_anon_mib": (compiled["peak"] - before) / 2**20,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load": os.getloadavg()[0]}


def no_source() -> Any:
    from host.store.compiled import SourceKey

    return SourceKey(size=0, mtime_ns=0, sha256="")


def run_layout(folder: Path, bits: int) -> dict[str, Any]:
    """The clustered layout alone (k-means and assignment) on the library's matrix."""
    from host.store.clusters import plan_layout

    index = open_index(folder, bits)
    matrix = index.libraries[0].embeddings
    warm(matrix)
    with peak_anon() as planned:
        layout = plan_layout(matrix, np.ones(len(matrix), dtype=bool))
    return {"bits": bits, "clusters": layout.clusters, "seconds": planned["seconds"],
            "cpu_seconds": planned["cpu_seconds"], "load": os.getloadavg()[0]}


# ---- the orchestration: one fresh process per measurement ------------------------------------------


def child(task: str, workdir: Path, bits: int, *extra: str, threads: int = 2, timeout: float = 7200) -> dict[str, Any]:
    """Run `task` of this script in a fresh process and return what it printed as JSON."""
    out = workdir / f"child-{task}-{label(bits)}-{os.getpid()}.json"
    command = [sys.executable, __file__, "--child", task, "--workdir", str(workdir), "--sizes", label(bits),
               "--out", str(out), *extra]
    environment = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads))}
    completed = subprocess.run(command, env=environment, timeout=timeout, check=False)
    if completed.returncode != 0 or not out.exists():
        return {"failed": f"{task} exited with {completed.returncode}"}
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def prepare(workdir: Path, bits: int, count: int, seed: int) -> tuple[Path, Path, Path]:
    """The library, its queries and their exact top 10 (by the host's exact rank), saved for the children."""
    folder = ensure_library(workdir, bits, seed)
    queries_path, truth_path = workdir / f"queries-{label(bits)}.npy", workdir / f"truth-{label(bits)}.npy"
    if not queries_path.exists() or len(np.load(queries_path)) != count:
        index = open_index(folder, bits)
        queries = near_queries(index.libraries[0].embeddings, count, np.random.default_rng(seed + 1))
        say(f"{label(bits)}: exact top {K} of {count} queries")
        truth = np.stack([rank(index, query, granted=NOBODY, count=K, count_type="bit").rows for query in queries])
        np.save(queries_path, queries)
        np.save(truth_path, truth)
    return folder, queries_path, truth_path


def measure_peers(workdir: Path, bits: int, *, peers: tuple[str, ...] = PEERS, queries: int = 200,
                  budget: float = 60.0, seed: int = 0, build_threads: int = 2) -> dict[str, Any]:
    """Every peer (and the host) on the same library and queries, each in a fresh process."""
    prepare(workdir, bits, queries, seed)
    results: dict[str, Any] = {"bits": bits, "queries": queries}
    for peer in peers:
        say(f"{label(bits)}: {peer} (load {os.getloadavg()[0]:.1f})")
        if peer == "kernels":
            results[peer] = child("kernels", workdir, bits, "--budget", str(budget), threads=1)
        else:
            results[peer] = child("peer", workdir, bits, "--peer", peer, "--budget", str(budget),
                                  "--build-threads", str(build_threads), threads=build_threads)
    return results


def measure_compile(workdir: Path, bits: int, seed: int = 0) -> dict[str, Any]:
    """The layout alone, and the whole compile from arrays, each in a fresh process (temporary files removed)."""
    ensure_library(workdir, bits, seed)
    layout = child("layout", workdir, bits)
    whole = child("compile", workdir, bits)
    return {"layout": layout, "write_compiled": whole}


# ---- the report -------------------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    value = seconds * 1000
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def report(results: dict[str, Any]) -> str:
    parts = []
    for size, measured in results.get("peers", {}).items():
        rows = []
        for peer, outcome in measured.items():
            if not isinstance(outcome, dict) or peer in ("bits", "queries", "kernels"):
                continue
            if "points" not in outcome:
                rows.append([peer, outcome.get("skipped") or outcome.get("failed", "?"), "", "", "", "", "", "", ""])
                continue
            yardstick = next((point for name, point in outcome["points"].items() if name.startswith("ours as served")),
                             None)
            for name, point in outcome["points"].items():
                rows.append([name, f"{outcome['build_seconds']:.1f}", f"{outcome['extra_mib']:,.0f}",
                             ms(point["p50"]), ms(point["p99"]), ms(point["cpu_p50"]), f"{point['recall']:.4f}",
                             f"{point['worst_recall']:.1f}",
                             f"{point['p50'] / yardstick['p50']:.2f}x" if yardstick else "-"])
        parts.append(table(
            f"{size}: latency and recall@10, one thread, {measured.get('queries')} queries near the data",
            ["engine / setting", "build s", "extra MiB", "p50 ms", "p99 ms", "CPU p50 ms", "recall@10", "worst",
             "p50 / ours as served (same process)"], rows,
            "Build: every core; search: one thread. `extra MiB`: anonymous memory the build added (the host's "
            "vectors are a shared file mapping: its figure is what the layout keeps beside it). The last column "
            "divides by the host's default search timed in the same process at the same moments."))
        kernels = measured.get("kernels", {}).get("kernels")
        if kernels:
            floor = min(point["cpu_min"] for point in kernels.values())
            parts.append(table(f"{size}: one full scan (the floor of exact search), one thread",
                               ["kernel", "wall p50 ms", "CPU p50 ms", "CPU min ms", "GB/s (CPU min)", "/ fastest"],
                               [[name, ms(p["p50"]), ms(p["cpu_p50"]), ms(p["cpu_min"]), f"{p['gb_per_s_cpu_min']:.1f}",
                                 f"{p['cpu_min'] / floor:.2f}x"] for name, p in kernels.items()]))
    for size, compiled in results.get("compile", {}).items():
        layout, whole = compiled.get("layout", {}), compiled.get("write_compiled", {})
        parts.append(table(f"{size}: compiling", ["what", "wall s", "CPU s", "peak anon MiB", "load"], [
            [f"layout alone ({layout.get('clusters', '?')} clusters)", f"{layout.get('seconds', 0):.1f}",
             f"{layout.get('cpu_seconds', 0):.1f}", "-", f"{layout.get('load', 0):.1f}"],
            ["write_compiled (layout, codes, text index, records, fsync)", f"{whole.get('seconds', 0):.1f}",
             f"{whole.get('cpu_seconds', 0):.1f}", f"{whole.get('peak_anon_mib', 0):,.0f}",
             f"{whole.get('load', 0):.1f}"],
        ]))
    return "\n".join(parts)


# ---- the command line -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100k", help="comma-separated: 1k, 10k, 100k, 1M (default 100k)")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {', '.join(PEERS)}")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per engine setting at most")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "polymath-host-bench")
    parser.add_argument("--compile", action="store_true", help="also time compiling (the layout, and write_compiled)")
    parser.add_argument("--json", type=Path, help="raw results to this file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    sizes = [SIZES[size] for size in args.sizes.split(",")]
    if args.child:
        return run_child(args, sizes[0])
    results: dict[str, Any] = {"peers": {}, "compile": {}}
    for bits in sizes:
        results["peers"][label(bits)] = measure_peers(args.workdir, bits, peers=tuple(args.peers.split(",")),
                                                      queries=args.queries, budget=args.budget, seed=args.seed,
                                                      build_threads=args.build_threads)
        if args.compile:
            results["compile"][label(bits)] = measure_compile(args.workdir, bits, args.seed)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    print(report(results))
    return 0


def run_child(args: argparse.Namespace, bits: int) -> int:
    folder = ensure_library(args.workdir, bits, args.seed)
    if args.child in ("peer", "kernels"):
        queries = np.load(args.workdir / f"queries-{label(bits)}.npy")
        truth = np.load(args.workdir / f"truth-{label(bits)}.npy")
    if args.child == "peer":
        result = run_peer(args.peer, folder, bits, queries, truth, args.budget, args.build_threads)
    elif args.child == "kernels":
        result = run_kernels(folder, bits, queries, args.budget)
    elif args.child == "layout":
        result = run_layout(folder, bits)
    elif args.child == "compile":
        with tempfile.TemporaryDirectory(dir=args.workdir, prefix="compile-") as scratch:
            result = run_compile(folder, bits, Path(scratch))
    else:
        raise SystemExit(f"unknown child task {args.child!r}")
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
