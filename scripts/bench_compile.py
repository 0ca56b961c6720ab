#!/usr/bin/env python3
"""Compiling a library file against building the index it replaces (issue 20.2), in one run.

For one library JSON file: the host's compile (`compile_library`: stream, check, cluster, write,
text index, fsync) and faiss IndexIVFFlat train + add with the same nlist (the host's cluster
count), each in a fresh process, taking turns `--rounds` times so that a drift of the machine's
load touches both. faiss gets the vectors already in memory (its input is an array, ours a JSON
file); both may use every core. CPU seconds count both processes of our compile (it hands the text
index to a second one: host/store/text_process.py), user and system time. Peak memory is the
largest resident set (anonymous and mapped file pages) of the compile's processes together,
sampled every 50 ms (and `ru_maxrss`), next to the size of the vectors.

    python scripts/synthetic_library.py /work/data/scale/lib100k --bits 100k
    python scripts/bench_compile.py /work/data/scale/lib100k/part-00.json --rounds 2 --json compile-100k.json

Progress on stderr, a Markdown table on stdout. Needs `pip install -e '.[bench]'` for faiss.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def resident(pid: str) -> int:
    """RssAnon + RssFile of a process (0 once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    return sum(int(line.split()[1]) * 1024 for line in lines if line.startswith(("RssAnon:", "RssFile:")))


def children() -> list[str]:
    found: list[str] = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            found += (task / "children").read_text().split()
    return found


def peak_sampler() -> tuple[dict[str, float], threading.Event]:
    """The largest RssAnon + RssFile seen (every 50 ms) of this process and its children (the
    compile's text index process) together, and of the children alone."""
    found = {"rss": 0.0, "children": 0.0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            theirs = sum(resident(pid) for pid in children())
            found["rss"] = max(found["rss"], resident("self") + theirs)
            found["children"] = max(found["children"], theirs)

    threading.Thread(target=sample, daemon=True).start()
    return found, stop


def child_ours(source: Path, out: Path) -> dict[str, Any]:
    from host.store.compiled import compile_library, open_segment

    phases: dict[str, float] = {}

    class Phases:
        """Records when each step starts (the compile's own progress hooks)."""

        def read(self, done_bytes: int) -> None:
            phases.setdefault("reading", time.perf_counter())

        def step(self, what: str, fraction: float) -> None:
            phases.setdefault(what.split()[0], time.perf_counter())

    shutil.rmtree(out, ignore_errors=True)
    peak, stop = peak_sampler()
    started, cpu = time.perf_counter(), cpu_seconds()
    phases["reading"] = started
    compile_library(source, out, name="bench", progress=Phases())  # type: ignore[arg-type]
    wall = time.perf_counter() - started
    stop.set()
    library = open_segment(out)
    names = list(phases)
    times = [phases[name] for name in names] + [started + wall]
    return {"seconds": wall, "cpu_seconds": cpu_seconds() - cpu,
            "phases": {name: times[i + 1] - times[i] for i, name in enumerate(names)},
            "children_cpu_seconds": sum(getattr(resource.getrusage(resource.RUSAGE_CHILDREN), field)
                                        for field in ("ru_utime", "ru_stime")),
            "children_peak_rss_bytes": peak["children"],
            "peak_rss_bytes": max(peak["rss"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
            "bits": library.bit_count, "dimension": library.dimension,
            "clusters": 0 if library.centroids is None else len(library.centroids),
            "vector_bytes": library.bit_count * library.dimension * 4, "json_bytes": source.stat().st_size,
            "load": os.getloadavg()[0]}


def cpu_seconds() -> float:
    """CPU time of this process and of the children it has waited for (the text index process)."""
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


def child_faiss(compiled: Path, nlist: int) -> dict[str, Any]:
    import faiss  # type: ignore[import-not-found]
    import numpy as np

    faiss.omp_set_num_threads(os.cpu_count() or 1)
    vectors = np.array(np.load(compiled / "embeddings.npy", mmap_mode="r"))  # in memory before the clock starts
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(vectors.shape[1]), vectors.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    started, cpu = time.perf_counter(), cpu_seconds()
    index.train(vectors)
    trained = time.perf_counter()
    index.add(vectors)
    done = time.perf_counter()
    return {"seconds": done - started, "train_seconds": trained - started, "add_seconds": done - trained,
            "cpu_seconds": cpu_seconds() - cpu, "nlist": nlist, "niter": index.cp.niter,
            "max_points_per_centroid": index.cp.max_points_per_centroid,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "load": os.getloadavg()[0]}


def run_child(*arguments: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = Path(handle.name)
    command = [sys.executable, __file__, "--child", *arguments, "--out", str(out)]
    completed = subprocess.run(command, check=False, cwd=ROOT)
    try:
        if completed.returncode:
            return {"failed": f"{arguments[0]} exited with {completed.returncode}"}
        result: dict[str, Any] = json.loads(out.read_text())
        return result
    finally:
        out.unlink(missing_ok=True)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def report(source: Path, runs: list[dict[str, Any]]) -> str:
    ours = [run for run in runs if run["engine"] == "ours" and "failed" not in run]
    peers = [run for run in runs if run["engine"] == "faiss" and "failed" not in run]
    lines = [f"Compiling {source.name} ({ours[0]['bits']:,} bits x {ours[0]['dimension']}, "
             f"{ours[0]['json_bytes'] / 1e9:.2f} GB of JSON, {ours[0]['vector_bytes'] / 1e9:.2f} GB of vectors)", "",
             "| round | what | wall s | CPU s | peak RSS / vectors | load |", "|---|---|---:|---:|---:|---:|"]
    for run in runs:
        if "failed" in run:
            lines.append(f"| {run['round']} | {run['engine']} | {run['failed']} | | | |")
            continue
        if run["engine"] == "ours":
            what = f"ours: compile from JSON ({run['clusters']} clusters)"
            detail = ", ".join(f"{name} {seconds:.1f}" for name, seconds in run["phases"].items())
            what += f" [{detail}]"
            if run.get("children_cpu_seconds"):
                what += (f" (of which the text index process: {run['children_cpu_seconds']:.1f} s of CPU, "
                         f"{run['children_peak_rss_bytes'] / 1e9:.2f} GB at most)")
        else:
            what = (f"faiss IVFFlat nlist {run['nlist']}: train {run['train_seconds']:.1f} + add {run['add_seconds']:.1f} "
                    f"(niter {run['niter']}, <= {run['max_points_per_centroid']} points per centroid)")
        vectors = ours[0]["vector_bytes"]
        lines.append(f"| {run['round']} | {what} | {run['seconds']:.1f} | {run['cpu_seconds']:.1f} | "
                     f"{run['peak_rss_bytes'] / vectors:.2f} | {run['load']:.1f} |")
    if ours and peers:
        best_ours, best_peer = min(run["seconds"] for run in ours), min(run["seconds"] for run in peers)
        lines += ["", f"Best of each: ours {best_ours:.1f} s, faiss train + add {best_peer:.1f} s: "
                  f"**{best_ours / best_peer:.2f}x**; our peak RSS at most "
                  f"{max(run['peak_rss_bytes'] for run in ours) / ours[0]['vector_bytes']:.2f}x the vectors."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, nargs="?", help="a library JSON file")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "polymath-compile-bench")
    parser.add_argument("--json", type=Path, help="raw results to this file")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        task, *rest = args.child
        result = child_ours(Path(rest[0]), Path(rest[1])) if task == "ours" else child_faiss(Path(rest[0]), int(rest[1]))
        args.out.write_text(json.dumps(result))
        return 0
    if args.source is None:
        parser.error("a library file is needed")
    compiled = args.workdir / "compiled"
    runs: list[dict[str, Any]] = []
    nlist = 0
    for number in range(1, args.rounds + 1):
        say(f"round {number}: ours (load {os.getloadavg()[0]:.1f})")
        ours = run_child("ours", str(args.source), str(compiled))
        runs.append({"engine": "ours", "round": number, **ours})
        nlist = nlist or ours.get("clusters", 0)
        if not nlist:
            say("no clusters (a library under 10,000 bits?): nothing to compare with")
            break
        say(f"round {number}: faiss IVFFlat nlist {nlist} (load {os.getloadavg()[0]:.1f})")
        runs.append({"engine": "faiss", "round": number, **run_child("faiss", str(compiled), str(nlist))})
    shutil.rmtree(args.workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"source": str(args.source), "runs": runs}, indent=1))
    print(report(args.source, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
