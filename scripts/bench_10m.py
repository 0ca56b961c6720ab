#!/usr/bin/env python3
"""Ten million bits on one machine (issue 20.3): compile, store size, restart, memory per worker,
latency over HTTP and recall@10 against the exact answer, beside faiss on the same vectors, in one run.

The library: scripts/synthetic_library.py's files (10 x 1M x 384, the built-in embedder's width):

    python scripts/synthetic_library.py /work/data/scale/lib10m --bits 10M --dimension 384 --files 10 --text short
    python scripts/bench_10m.py /work/data/scale/lib10m --cache-dir /work/data/scale/cache10m \\
        --workdir /work/data/scale/bench10m --json 10m.json

Steps (`--steps`, default all, in this order):

  compile  `polymath-host compile` of the folder in a fresh process: wall time, peak RSS; the store's
           size by file. A folder already compiled is only opened (say so: the figure is then an open).
  truth    queries near the data (existing bits plus noise, as scripts/bench_index.py's) and their
           exact top 10, by one pass over every library's floats (float32 products, the best 50
           re-scored in float64, ties in file order as the host breaks them).
  serve    a real `polymath-host serve` (`--workers`, default 2): restart time to /readyz (`--restarts`
           times), memory per worker (anonymous, mapped file pages, and PSS which splits shared pages),
           then one keep-alive connection asking each query twice (`count` 10 bits; no answer
           cache): p50 and p99 of the first asks (the floats a query re-scores may come from disk: the
           store is larger than memory) and of the second (in the page cache, as on a server up a
           while), and recall@10 of the answers against the truth.
  faiss    in this process, on the same vectors: IVF with 8-bit scalar codes (the host's nlist: one
           list per cluster of the host) plus re-ranking of its best 100 from the host's float map, and
           IVFFlat on the first library file alone (10M float32 would need 15.4 GB of memory).
           p50/p99 in-process, one thread, recall@10, each query asked twice as over HTTP; the host's
           own `rank()` timed beside them, its maps populated as a worker's are.

Progress on stderr, Markdown on stdout. Big data stays under --workdir and --cache-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.measure import cpu_seconds  # noqa: E402

from host.service.harness import child_environment, host_command, spawn_host  # noqa: E402

K = 10
QUERY_NOISE = 0.5  # scripts/benchmarks/libraries.py: a query is a bit plus noise of this relative norm
CANDIDATES = 50  # float32 best kept per query in the truth pass, then re-scored in float64
BLOCK = 1 << 16


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentiles(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1000
    return {"p50_ms": float(np.percentile(values, 50)), "p99_ms": float(np.percentile(values, 99)),
            "mean_ms": float(values.mean()), "n": len(values)}


# ---- compile ---------------------------------------------------------------------------------------------


def step_compile(libraries: Path, cache: Path) -> dict[str, Any]:
    say(f"compile {libraries} -> {cache}")
    started = time.perf_counter()
    process = subprocess.Popen([*host_command("compile", str(libraries), "--cache-dir", str(cache))],
                               env=child_environment(), stderr=subprocess.PIPE, text=True)
    _, stderr = process.communicate()
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child so far: this one
    lines = [line for line in stderr.splitlines() if line.startswith(("compiled", "opened", "error"))]
    sizes: dict[str, int] = {}
    for path in cache.rglob("*"):
        if path.is_file():
            sizes[path.name] = sizes.get(path.name, 0) + path.stat().st_size
    vectors = sizes.get("embeddings.npy", 0)
    return {"seconds": wall, "peak_rss_bytes": peak, "compiled": sum(line.startswith("compiled") for line in lines),
            "opened": sum(line.startswith("opened") for line in lines), "errors": [line for line in lines if "error" in line],
            "store_bytes": sum(sizes.values()), "sizes": sizes, "vector_bytes": vectors,
            "json_bytes": sum(path.stat().st_size for path in libraries.glob("*.json")), "load": os.getloadavg()[0]}


# ---- the libraries, as the host opens them -----------------------------------------------------------------


def open_index(libraries: Path, cache: Path) -> Any:
    from host.catalog.generations import load_catalog

    catalog = load_catalog(libraries, cache_dir=cache)
    if catalog.problems:
        raise SystemExit(f"problems: {catalog.problems}")
    return next(iter(catalog.models.values()))


def make_queries(index: Any, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(index.bit_count, count, replace=False))
    queries = np.stack([np.array(index.gather(np.array([row]))[0]) for row in rows]).astype(np.float32)
    queries += rng.standard_normal(queries.shape, dtype=np.float32) * np.float32(QUERY_NOISE / np.sqrt(queries.shape[1]))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return queries[rng.permutation(count)]


def exact_top(index: Any, queries: np.ndarray, libraries: range | None = None) -> np.ndarray:
    """Global rows of the exact top K of each query (over `libraries`, default all): one pass."""
    chosen = range(len(index.libraries)) if libraries is None else libraries
    best_scores = np.full((len(queries), CANDIDATES), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), CANDIDATES), dtype=np.int64)
    columns = np.ascontiguousarray(queries.T)
    for position in chosen:
        library, offset = index.libraries[position], int(index.offsets[position])
        for start in range(0, library.bit_count, BLOCK):
            block = np.asarray(library.embeddings[start : start + BLOCK])
            scores = (block @ columns).T  # (queries, rows)
            merged_scores = np.concatenate([best_scores, scores], axis=1)
            merged_rows = np.concatenate([best_rows, np.broadcast_to(np.arange(start, start + len(block)) + offset,
                                                                     scores.shape)], axis=1)
            keep = np.argpartition(-merged_scores, CANDIDATES - 1, axis=1)[:, :CANDIDATES]
            best_scores = np.take_along_axis(merged_scores, keep, axis=1)
            best_rows = np.take_along_axis(merged_rows, keep, axis=1)
        say(f"truth: library {position + 1} of {len(index.libraries)} scanned")
    tops = []
    for query, rows in zip(queries, best_rows):
        exact = (index.gather(rows).astype(np.float64) @ query.astype(np.float64)).astype(np.float32)
        keys = rows if index.tie_keys is None else index.tie_keys[rows]
        tops.append(rows[np.lexsort((keys, -exact))[:K]])
    return np.array(tops)


def ids_of(index: Any, rows: np.ndarray) -> list[list[str]]:
    found = []
    for query_rows in rows:
        ids = []
        for row in query_rows.tolist():
            library, local = index.locate(row)
            ids.append(library.bit_id(local))
        found.append(ids)
    return found


def step_truth(libraries: Path, cache: Path, workdir: Path, count: int, seed: int) -> dict[str, Any]:
    index = open_index(libraries, cache)
    say(f"truth: {count} queries near the data, exact top {K} over {index.bit_count:,} bits")
    queries = make_queries(index, count, seed)
    started = time.perf_counter()
    truth = exact_top(index, queries)
    subset = exact_top(index, queries, range(1))  # the first library alone, for faiss IVFFlat
    np.save(workdir / "queries.npy", queries)
    (workdir / "truth.json").write_text(json.dumps({"all": ids_of(index, truth), "first": ids_of(index, subset)}))
    return {"queries": count, "seconds": time.perf_counter() - started, "bits": index.bit_count}


def recall(found: list[str], truth: list[str]) -> float:
    return len(set(found) & set(truth)) / len(truth)


# ---- serve -------------------------------------------------------------------------------------------------


def memory_of(pids: list[int]) -> list[dict[str, float]]:
    import psutil

    found = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            status = {line.split(":")[0]: int(line.split()[1]) * 1024
                      for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith(("RssAnon", "RssFile", "RssShmem"))}
            full = process.memory_full_info()
            found.append({"pid": pid, "cmd": " ".join(process.cmdline()[-3:])[:60], "anon_mib": status["RssAnon"] / 2**20,
                          "file_mib": status["RssFile"] / 2**20, "pss_mib": full.pss / 2**20, "uss_mib": full.uss / 2**20})
        except (OSError, psutil.Error):
            continue
    return found


def step_serve(libraries: Path, cache: Path, workdir: Path, workers: int, restarts: int) -> dict[str, Any]:
    import httpx

    queries = np.load(workdir / "queries.npy")
    truth = json.loads((workdir / "truth.json").read_text())["all"]
    # No answer cache: every query is asked twice, and the second ask must search again.
    arguments = ("--cache-dir", str(cache), "--embedder", "none", "--answer-cache-bytes", "0")
    result: dict[str, Any] = {"workers": workers, "restarts": []}
    for number in range(restarts):
        host = spawn_host(libraries, *arguments, workers=workers, log_path=workdir / f"serve-{number}.log",
                          own_session=True)
        ready = host.wait_until_ready("/readyz", timeout=600)
        result["restarts"].append(ready)
        result.setdefault("restart_cpu", []).append(cpu_seconds(host.pids()))
        say(f"serve: ready in {ready:.2f} s, {result['restart_cpu'][-1]:.2f} s of CPU "
            f"(restart {number + 1} of {restarts}, load {os.getloadavg()[0]:.1f})")
        if number < restarts - 1:
            host.stop()
    body = {"count": K, "count_type": "bit", "omit": "embedding"}
    passes: list[list[float]] = [[], []]
    recalls = []
    with httpx.Client(base_url=host.url, timeout=60) as client:
        for query in queries[:20]:  # warm-up: the interpreter, the centroids, the connection
            client.post("/", json={**body, "query_embedding": _b64(query)})
        # First asks: the floats a query re-scores may have to come from disk (a store larger than
        # memory); asked again, they are in the page cache, as on a server that has been up a while.
        for latencies in passes:
            recalls = []
            for query, expected in zip(queries, truth):
                started = time.perf_counter()
                answer = client.post("/", json={**body, "query_embedding": _b64(query)})
                latencies.append(time.perf_counter() - started)
                answer.raise_for_status()
                recalls.append(recall([bit["id"] for bit in answer.json()["bits"]], expected))
    result.update(http_first=percentiles(passes[0]), http=percentiles(passes[1]), recall=float(np.mean(recalls)),
                  worst_recall=float(np.min(recalls)), memory=memory_of(host.pids()), load=os.getloadavg()[0])
    host.stop()
    return result


def _b64(vector: np.ndarray) -> str:
    import base64

    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


# ---- faiss beside the host, in this process -----------------------------------------------------------------


def rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def step_faiss(libraries: Path, cache: Path, workdir: Path, rerank: int) -> dict[str, Any]:
    import faiss  # type: ignore[import-not-found]

    from host.search.engine import rank
    from host.search.query import SearchPolicy
    from host.store.residency import Residency, default_populate_bytes

    index = open_index(libraries, cache)
    queries = np.load(workdir / "queries.npy")
    truths = json.loads((workdir / "truth.json").read_text())
    dimension, nlist = index.dimension, index.clusters.count
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    results: dict[str, Any] = {"nlist": nlist}

    def timed(search: Any, truth: list[list[str]], offset: int = 0) -> dict[str, Any]:
        """Every query twice, as over HTTP: the first ask, then again (what it reads in the page cache)."""
        faiss.omp_set_num_threads(1)
        passes: list[list[float]] = [[], []]
        recalls = []
        for latencies in passes:
            recalls = []
            for query, expected in zip(queries, truth):
                started = time.perf_counter()
                rows = search(query)
                latencies.append(time.perf_counter() - started)
                recalls.append(recall(ids_of(index, np.array([rows]) + offset)[0], expected))
        faiss.omp_set_num_threads(os.cpu_count() or 1)
        first = percentiles(passes[0])
        return {**percentiles(passes[1]), "first_p50_ms": first["p50_ms"], "recall": float(np.mean(recalls))}

    # As a worker serves it: its scanned maps populated within --populate-bytes' default budget.
    Residency(default_populate_bytes()).admit(index.libraries)
    served = SearchPolicy(mode="auto").for_index(index)
    results["ours in-process"] = timed(
        lambda query: rank(index, query, granted=frozenset(), count=K, count_type="bit", search=served).rows,
        truths["all"])
    say(f"faiss: IVF{nlist},SQ8 on {index.bit_count:,} x {dimension}, lists = the host's clusters")
    # faiss's own k-means over 10,000 lists and its assignment of 10M rows would take hours here
    # (77 TFLOP for the assignment alone): its lists are the host's clusters instead, so this
    # compares the two searches over one partition, and faiss's build is its encoding alone.
    before, started = rss_anon(), time.perf_counter()
    quantizer = faiss.IndexFlatIP(dimension)
    quantizer.add(np.ascontiguousarray(index.clusters.centroids, dtype=np.float32))
    sq8 = faiss.IndexIVFScalarQuantizer(quantizer, dimension, nlist, faiss.ScalarQuantizer.QT_8bit,
                                        faiss.METRIC_INNER_PRODUCT, False)  # by_residual False: codes as the host's
    rng = np.random.default_rng(0)
    sample_rows = np.sort(rng.choice(index.bit_count, min(index.bit_count, 200_000), replace=False))
    sq8.train(np.ascontiguousarray(index.gather(sample_rows), dtype=np.float32))
    trained = time.perf_counter()
    table = index.clusters
    for cluster in range(table.count):
        start, stop = int(table.starts[cluster]), int(table.stops[cluster])
        if stop == start:
            continue
        library, local = index.locate(start)
        block = np.ascontiguousarray(library.embeddings[local : local + stop - start], dtype=np.float32)
        codes = np.ascontiguousarray(sq8.sq.compute_codes(block))
        ids = np.arange(start, stop, dtype=np.int64)
        sq8.invlists.add_entries(cluster, stop - start, faiss.swig_ptr(ids), faiss.swig_ptr(codes))
        if cluster % 1000 == 999:
            say(f"faiss: {cluster + 1} of {table.count} lists encoded")
    sq8.ntotal = index.bit_count
    results["sq8_build"] = {"train_seconds": trained - started, "encode_seconds": time.perf_counter() - trained,
                            "train_points": len(sample_rows), "extra_mib": (rss_anon() - before) / 2**20}

    def sq8_then_rerank(nprobe: int) -> Any:
        def search(query: np.ndarray) -> np.ndarray:
            sq8.nprobe = nprobe
            _, rows = sq8.search(query[np.newaxis, :], rerank)
            rows = rows[0][rows[0] >= 0]
            exact = index.gather(rows) @ query
            return rows[np.argsort(-exact, kind="stable")[:K]]
        return search

    for nprobe in (16, 32, 64, 128):
        results[f"faiss IVF{nlist},SQ8 nprobe {nprobe} + re-rank {rerank}"] = timed(sq8_then_rerank(nprobe), truths["all"])
        say(f"faiss: nprobe {nprobe}: {results[f'faiss IVF{nlist},SQ8 nprobe {nprobe} + re-rank {rerank}']}")
    sq8.reset()  # its codes freed before the next index
    first = index.libraries[0]
    say(f"faiss: IVFFlat on the first library alone ({first.bit_count:,} bits)")
    vectors = np.array(first.embeddings, dtype=np.float32)
    flat_nlist = len(first.centroids) if first.centroids is not None else 1000
    flat = faiss.IndexIVFFlat(faiss.IndexFlatIP(dimension), dimension, flat_nlist, faiss.METRIC_INNER_PRODUCT)
    started = time.perf_counter()
    flat.train(vectors)
    flat.add(vectors)
    results["flat_build_first_library"] = {"seconds": time.perf_counter() - started, "nlist": flat_nlist}
    del vectors
    first_index = open_first(libraries, cache)
    served_first = SearchPolicy(mode="auto").for_index(first_index)
    results["ours in-process, first library alone"] = timed(
        lambda query: rank(first_index, query, granted=frozenset(), count=K, count_type="bit", search=served_first).rows,
        truths["first"])
    for nprobe in (4, 8, 16):
        def flat_search(query: np.ndarray, nprobe: int = nprobe) -> np.ndarray:
            flat.nprobe = nprobe
            return flat.search(query[np.newaxis, :], K)[1][0]
        results[f"faiss IVFFlat{flat_nlist} nprobe {nprobe}, first library alone"] = timed(flat_search, truths["first"])
    results["load"] = os.getloadavg()[0]
    return results


def open_first(libraries: Path, cache: Path) -> Any:
    from host.catalog.model_index import ModelIndex

    index = open_index(libraries, cache)
    return ModelIndex.of_segments(index.segments[:1])


# ---- report ------------------------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    lines = []
    compiled = results.get("compile")
    if compiled:
        sizes = ", ".join(f"{name} {size / 1e9:.2f}" for name, size in sorted(compiled["sizes"].items(),
                                                                         key=lambda item: -item[1])[:8])
        lines += [f"**Compile** ({compiled['compiled']} compiled, {compiled['opened']} opened): "
                  f"{compiled['seconds']:.0f} s wall, peak RSS {compiled['peak_rss_bytes'] / 2**30:.2f} GiB "
                  f"({compiled['peak_rss_bytes'] / max(compiled['vector_bytes'], 1):.2f}x the vectors); "
                  f"{compiled['json_bytes'] / 1e9:.1f} GB of JSON; store {compiled['store_bytes'] / 1e9:.1f} GB "
                  f"(GB: {sizes}); load {compiled['load']:.1f}", ""]
    served = results.get("serve")
    if served:
        lines += [f"**Serve** ({served['workers']} workers): ready in "
                  + ", ".join(f"{seconds:.2f}" for seconds in served["restarts"]) + " s (CPU "
                  + ", ".join(f"{seconds:.2f}" for seconds in served.get("restart_cpu", [])) + " s); over HTTP, "
                  f"each query asked a first time: p50 {served['http_first']['p50_ms']:.2f} ms, p99 "
                  f"{served['http_first']['p99_ms']:.2f} ms; asked again (no answer cache): p50 "
                  f"{served['http']['p50_ms']:.2f} ms, p99 {served['http']['p99_ms']:.2f} ms, recall@10 "
                  f"{served['recall']:.4f} (worst {served['worst_recall']:.1f}); load {served['load']:.1f}", "",
                  "| process | anon MiB | file MiB | PSS MiB | USS MiB |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {entry['cmd']} | {entry['anon_mib']:,.0f} | {entry['file_mib']:,.0f} | {entry['pss_mib']:,.0f} | "
                  f"{entry['uss_mib']:,.0f} |" for entry in served["memory"]]
        lines.append("")
    peers = results.get("faiss")
    if peers:
        lines += ["| engine (in-process, one thread) | p50 ms, first ask | p50 ms, again | p99 ms, again | recall@10 |",
                  "|---|---:|---:|---:|---:|"]
        for name, point in peers.items():
            if isinstance(point, dict) and "p50_ms" in point:
                lines.append(f"| {name} | {point['first_p50_ms']:.2f} | {point['p50_ms']:.2f} | {point['p99_ms']:.2f} | "
                             f"{point['recall']:.4f} |")
        lines.append(f"\nfaiss SQ8 build: {json.dumps(peers.get('sq8_build'))}; IVFFlat (first library): "
                     f"{json.dumps(peers.get('flat_build_first_library'))}; load {peers.get('load', 0):.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("libraries", type=Path)
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--steps", default="compile,truth,serve,faiss")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--rerank", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    steps = args.steps.split(",")
    results: dict[str, Any] = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    for step in steps:
        if step == "compile":
            results["compile"] = step_compile(args.libraries, args.cache_dir)
        elif step == "truth":
            results["truth"] = step_truth(args.libraries, args.cache_dir, args.workdir, args.queries, args.seed)
        elif step == "serve":
            results["serve"] = step_serve(args.libraries, args.cache_dir, args.workdir, args.workers, args.restarts)
        elif step == "faiss":
            results["faiss"] = step_faiss(args.libraries, args.cache_dir, args.workdir, args.rerank)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
