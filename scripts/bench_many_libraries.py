#!/usr/bin/env python3
"""Many publishers on one host (issue 36, item 5): the same bits in one library file and in many, side by side.

Two folders of the same bits (scripts/synthetic_library.py, `--text verses`, 384 dimensions), one
file against many small ones in publisher folders:

    python scripts/synthetic_library.py /work/data/one200k --bits 200k --dimension 384 --text verses
    python scripts/synthetic_library.py /work/data/many1000 --bits 200k --dimension 384 --text verses \\
        --files 1000 --folders 100
    python scripts/bench_many_libraries.py /work/data/one200k /work/data/many1000 --rounds 3

    python scripts/synthetic_library.py /work/data/one1m --bits 1M --dimension 384 --text verses
    python scripts/synthetic_library.py /work/data/many10000 --bits 1M --dimension 384 --text verses \\
        --files 10000 --folders 1000
    python scripts/bench_many_libraries.py /work/data/one1m /work/data/many10000 --rounds 2 --change --replica

Each round starts a real `serve` (two workers, `--embedder none`, no answer cache) on each folder in
turn (one, many, then many, one: A, B, B, A), and measures on each:

  cold start     the compiled cache removed: from the start to /readyz answering 200 (wall, and the
                 CPU seconds of the server's processes);
  queries        over one kept-alive connection, count 10 bits: vector (a random unit vector), keyword
                 (1 to 3 words of the verses) and hybrid (both): p50 and p95 of QUERIES each;
  the worker     its open files and memory maps, and its own memory (USS) and RSS;
  warm restart   stopped and started again on the cache it compiled: to /readyz.

The 1-minute load average is taken before each side; a round taken while it exceeded the core count
is marked, and its ratios are not to be relied on. Then, on the many side alone:

  --change       one library changed at a time (CHANGES times, `--watch-interval 1`): from the file's
                 atomic replacement to the first keyword answer holding its new word;
  choosing       POST / with `libraries` naming one library, against a host serving only that file;
  --replica      the many folder published (`publish --compiled`) to a folder origin, a fresh replica
                 synced from it (to /readyz), one library changed and published again (what it
                 uploads), and the manifest of every library read and checked in process;
  memory         per library beyond its bits: the many worker's USS against the one worker's, over
                 the number of libraries.

Progress on stderr; Markdown on stdout (for docs/performance.md).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.import_rounds import cpu_description  # noqa: E402
from benchmarks.measure import cpu_seconds  # noqa: E402
from benchmarks.memory import smaps_rollup  # noqa: E402

from host.catalog.generations import discover  # noqa: E402
from host.origin.manifest import parse_manifest  # noqa: E402
from host.service.harness import RunningHost, host_command, start_host  # noqa: E402

CORES = os.cpu_count() or 1
QUERIES = 300
WARM_UP = 30
CHANGES = 5
COUNT = 10
WORDS = ("lord", "israel", "king", "house", "people", "land", "god", "son", "children", "day", "hand", "father",
         "city", "david", "jerusalem", "priest", "moses", "egypt", "heart", "glory")
SERVE = ("--embedder", "none", "--answer-cache-bytes", "0")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Side:
    name: str
    folder: Path
    cold: list[float] = field(default_factory=list)
    cold_cpu: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    queries: dict[str, list[float]] = field(default_factory=dict)  # mode -> latencies, every round
    loads: list[float] = field(default_factory=list)
    worker: dict[str, int] = field(default_factory=dict)  # open files, maps, USS and RSS of a worker


class Client:
    """One kept-alive HTTP connection to a host."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {data[:300]!r}")
        answer: dict[str, Any] = json.loads(data)
        return answer

    def close(self) -> None:
        self.connection.close()


def unit_vector(rng: np.random.Generator, dimension: int) -> str:
    import base64

    vector = rng.standard_normal(dimension).astype(np.float32)
    return base64.b64encode((vector / np.linalg.norm(vector)).astype("<f4").tobytes()).decode()


def questions(seed: int, dimension: int) -> dict[str, list[dict[str, Any]]]:
    """The same questions for every side: (QUERIES + WARM_UP) of each mode."""
    rng = np.random.default_rng(seed)
    picker = random.Random(seed)
    asked: dict[str, list[dict[str, Any]]] = {"vector": [], "keyword": [], "hybrid": []}
    for _ in range(QUERIES + WARM_UP):
        words = " ".join(picker.sample(WORDS, picker.randint(1, 3)))
        vector = unit_vector(rng, dimension)
        base = {"count": COUNT, "count_type": "bit", "omit": "embedding"}
        asked["vector"].append({**base, "query_embedding": vector})
        asked["keyword"].append({**base, "query": words, "mode": "keyword"})
        asked["hybrid"].append({**base, "query": words, "query_embedding": vector, "mode": "hybrid"})
    return asked


def timed_queries(host: RunningHost, asked: dict[str, list[dict[str, Any]]], path: str = "/") -> dict[str, list[float]]:
    client = Client(host.port)
    try:
        found = {}
        for mode, bodies in asked.items():
            for body in bodies[:WARM_UP]:
                client.post(path, body)
            times = []
            for body in bodies[WARM_UP:]:
                started = time.perf_counter()
                client.post(path, body)
                times.append(time.perf_counter() - started)
            found[mode] = times
        return found
    finally:
        client.close()


def started(folder: Path, *arguments: str, timeout: float = 3600) -> tuple[RunningHost, float]:
    began = time.perf_counter()
    host = start_host(folder, *SERVE, *arguments, workers=CORES, ready_path="/readyz", timeout=timeout)
    return host, time.perf_counter() - began


def worker_resources(host: RunningHost) -> dict[str, int]:
    """The largest worker's open files, memory maps, USS and RSS."""
    workers = [pid for pid in host.pids() if pid != host.process.pid] or [host.process.pid]
    found = []
    for pid in workers:
        memory = smaps_rollup(pid)
        found.append({"open files": len(os.listdir(f"/proc/{pid}/fd")),
                      "memory maps": len(Path(f"/proc/{pid}/maps").read_text().splitlines()),
                      "USS": memory.get("Private_Clean", 0) + memory.get("Private_Dirty", 0),
                      "RSS": memory.get("Rss", 0)})
    return max(found, key=lambda entry: entry["USS"])


def settle(below: float = 1.0, longest: float = 120) -> None:
    """Wait (up to `longest` seconds) for the load the last side left to fall below `below`."""
    waited = time.monotonic()
    while os.getloadavg()[0] >= below and time.monotonic() - waited < longest:
        time.sleep(5)


def round_of(side: Side, asked: dict[str, list[dict[str, Any]]]) -> None:
    shutil.rmtree(side.folder / ".compiled", ignore_errors=True)
    settle()
    side.loads.append(os.getloadavg()[0])
    say(f"{side.name}: cold start (load {side.loads[-1]:.2f})")
    host, seconds = started(side.folder)
    try:
        side.cold.append(seconds)
        side.cold_cpu.append(cpu_seconds(host.pids()))
        say(f"{side.name}: ready in {seconds:.1f} s; queries")
        for mode, times in timed_queries(host, asked).items():
            side.queries.setdefault(mode, []).extend(times)
        side.worker = worker_resources(host)
    finally:
        host.stop()
    host, seconds = started(side.folder)
    host.stop()
    side.warm.append(seconds)
    say(f"{side.name}: warm restart {seconds:.2f} s")


def ms(values: list[float], quantile: float = 0.5) -> float:
    return float(np.quantile(values, quantile)) * 1000


def change_latency(folder: Path) -> list[float]:
    """Seconds from a library's atomic replacement to the first answer holding its new word."""
    host, _ = started(folder, "--watch-interval", "1")
    client = Client(host.port)
    latencies = []
    files = discover(folder)
    originals: dict[Path, bytes] = {}
    try:
        for number in range(CHANGES):
            entry = files[(number * 7919) % len(files)]
            originals.setdefault(entry.path, entry.path.read_bytes())
            library = json.loads(entry.path.read_text())
            word = f"zebrafinch{number}x{random.randrange(10**9)}"
            library["bits"][0]["text"] += f" {word}"
            staging = entry.path.with_name(f".{entry.path.name}.staging")
            staging.write_text(json.dumps(library))
            body = {"query": word, "mode": "keyword", "count": 1, "count_type": "bit"}
            os.replace(staging, entry.path)
            changed = time.perf_counter()
            while not client.post("/", body)["bits"]:
                if time.perf_counter() - changed > 60:
                    raise RuntimeError(f"{entry.name} not answered from within 60 s")
                time.sleep(0.01)
            latencies.append(time.perf_counter() - changed)
            say(f"change {number + 1}: {entry.name} answered from in {latencies[-1]:.2f} s")
            time.sleep(1.5)
    finally:
        client.close()
        host.stop()
        for path, body in originals.items():  # the folder as it was, for the next run
            path.write_bytes(body)
    return latencies


def choosing(folder: Path, asked: dict[str, list[dict[str, Any]]], rounds: int = 3) -> dict[str, float]:
    """p50 of a vector query naming one library of the many, and of a host serving only that file:
    the two hosts asked in turns (A, B, A, B...), the median of the rounds' p50s (a host's first
    queries after its start, which build what it keeps per grant, are one round's, not the figure)."""
    entry = discover(folder)[len(discover(folder)) // 2]
    chosen = {"vector": [{**body, "libraries": entry.name} for body in asked["vector"]],
              "keyword": [{**body, "libraries": entry.name} for body in asked["keyword"]]}
    with tempfile.TemporaryDirectory() as alone:
        shutil.copy(entry.path, Path(alone) / entry.path.name)
        alone_host, _ = started(Path(alone))
        many_host, _ = started(folder)
        plain = {mode: [{key: value for key, value in body.items() if key != "libraries"} for body in bodies]
                 for mode, bodies in chosen.items()}
        among: dict[str, list[float]] = {mode: [] for mode in chosen}
        only: dict[str, list[float]] = {mode: [] for mode in chosen}
        try:
            for _ in range(rounds):
                for mode, times in timed_queries(many_host, chosen).items():
                    among[mode].append(ms(times))
                for mode, times in timed_queries(alone_host, plain).items():
                    only[mode].append(ms(times))
        finally:
            alone_host.stop()
            many_host.stop()
    return {f"{mode}, among all": statistics.median(among[mode]) for mode in among} | {
        f"{mode}, alone": statistics.median(only[mode]) for mode in only}


def replica(folder: Path) -> list[str]:
    """Publish, sync a fresh replica, change one library, publish again: what each step costs."""
    lines = []
    with tempfile.TemporaryDirectory() as scratch:
        origin, cache = Path(scratch) / "origin", Path(scratch) / "replica"

        def publish() -> tuple[float, str]:
            began = time.perf_counter()
            done = subprocess.run(host_command("publish", str(folder), str(origin), "--compiled", "--quiet"),
                                  capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            line = next(line for line in done.stderr.splitlines() if line.startswith("published "))
            return time.perf_counter() - began, line

        seconds, line = publish()
        lines.append(f"| publish --compiled, first | {seconds:.1f} s | {line} |")
        began = time.perf_counter()
        host = start_host(f"file://{origin}", *SERVE, "--cache-dir", str(cache), workers=CORES, ready_path="/readyz",
                          timeout=3600, cwd=Path(scratch), log_path=Path(scratch) / "replica.log")
        lines.append(f"| a fresh replica ready | {time.perf_counter() - began:.1f} s | "
                     f"{len(list((cache / 'compiled' / 'segments').iterdir()))} segments installed, none compiled: "
                     f"{'yes' if ' none compiled' in host.log() else 'no'} |")
        host.stop()
        entry = discover(folder)[len(discover(folder)) // 3]
        original = entry.path.read_bytes()
        library = json.loads(original)
        library["bits"][0]["text"] += " changed"
        entry.path.write_text(json.dumps(library))
        try:
            seconds, line = publish()
        finally:
            entry.path.write_bytes(original)
        lines.append(f"| one library changed, published again | {seconds:.1f} s | {line} |")
        body = (origin / "manifest.json").read_bytes()
        times = []
        for _ in range(5):
            began = time.perf_counter()
            manifest = parse_manifest(body, "bench")
            times.append(time.perf_counter() - began)
        lines.append(f"| the manifest read and checked ({len(manifest.libraries):,} libraries, {len(body) / 1e6:.1f} MB) "
                     f"| {statistics.median(times) * 1000:.0f} ms | median of 5, in process |")
    return lines


def report(sides: list[Side], extra: dict[str, Any], command: str) -> None:
    one, many = sides
    files = len(discover(many.folder))
    loud = [load for side in sides for load in side.loads if load > CORES]
    print(f"## {files:,} libraries against one, the same bits ({command})\n")
    print(f"CPU: {cpu_description()}. Load before each side: {', '.join(f'{load:.2f}' for side in sides for load in side.loads)}"
          + (f" ({len(loud)} above the {CORES} cores: those rounds' ratios are not to be relied on)" if loud else "") + ".\n")
    print(f"| | {one.name} | {many.name} | ratio |\n|---|---:|---:|---:|")
    rows = [("cold start (best)", min(one.cold), min(many.cold), "s"),
            ("cold start, CPU seconds (best)", min(one.cold_cpu), min(many.cold_cpu), "s"),
            ("warm restart (best)", min(one.warm), min(many.warm), "s")]
    for mode in ("vector", "keyword", "hybrid"):
        rows.append((f"{mode} p50", ms(one.queries[mode]), ms(many.queries[mode]), "ms"))
        rows.append((f"{mode} p95", ms(one.queries[mode], 0.95), ms(many.queries[mode], 0.95), "ms"))
    for what, a, b, unit in rows:
        print(f"| {what} | {a:.2f} {unit} | {b:.2f} {unit} | {b / a:.2f}x |")
    for what in ("open files", "memory maps"):
        print(f"| a worker's {what} | {one.worker[what]:,} | {many.worker[what]:,} | |")
    for what in ("USS", "RSS"):
        print(f"| a worker's {what} | {one.worker[what] / 2**20:,.0f} MiB | {many.worker[what] / 2**20:,.0f} MiB | |")
    per_library = (many.worker["USS"] - one.worker["USS"]) / max(files - 1, 1)
    print(f"\nMemory of a worker per library beyond its bits: {per_library / 1024:.1f} KiB "
          f"((USS many - USS one) / {files - 1:,}).\n")
    print("Rounds, in order (wall s): " + "; ".join(
        f"{side.name} cold {', '.join(f'{value:.1f}' for value in side.cold)}, "
        f"warm {', '.join(f'{value:.2f}' for value in side.warm)}" for side in sides) + ".\n")
    for title, value in extra.items():
        print(f"{title}\n\n{value}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("one", type=Path, help="a folder holding one library file")
    parser.add_argument("many", type=Path, help="a folder holding the same bits in many files")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--change", action="store_true", help="also time changes of one library among them")
    parser.add_argument("--replica", action="store_true", help="also publish and sync a fresh replica")
    parser.add_argument("--only", choices=("choosing", "replica"),
                        help="only choosing one library among all, or only the replica steps (no rounds)")
    args = parser.parse_args()
    if args.only:
        print(f"CPU: {cpu_description()}. Load before: {os.getloadavg()[0]:.2f}.\n")
        if args.only == "replica":
            print("| step | time | what |\n|---|---:|---|\n" + "\n".join(replica(args.many)))
        else:
            print("\n".join(f"| {what} | {value:.2f} ms |"
                            for what, value in choosing(args.many, questions(36, 384)).items()))
        print(f"\nLoad after: {os.getloadavg()[0]:.2f}.")
        return 0
    dimension = 384
    asked = questions(36, dimension)
    sides = [Side("one library", args.one), Side("many", args.many)]
    for number in range(args.rounds):
        for side in sides if number % 2 == 0 else reversed(sides):
            round_of(side, asked)
    extra: dict[str, Any] = {}
    chosen = choosing(args.many, asked)
    extra["### Choosing one library among all, against a host holding only it (median of 3 alternating rounds' p50)"] = "\n".join(
        [f"| {what} | {value:.2f} ms |" for what, value in chosen.items()])
    if args.change:
        latencies = change_latency(args.many)
        extra["### One library changed among all (`--watch-interval 1`): to the first answer from it"] = (
            f"median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s over {len(latencies)} changes: "
            + ", ".join(f"{value:.2f}" for value in latencies))
    if args.replica:
        extra["### Replicas"] = "| step | time | what |\n|---|---:|---|\n" + "\n".join(replica(args.many))
    report(sides, extra, " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
