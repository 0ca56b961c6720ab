"""Step `http`: wrk against a real uvicorn process at 10k and 100k bits: p50/p99 and requests/s, JSON and msgpack.

wrk runs post.lua (beside this file): POST / with a 1500-token query; in `vary` mode every
request changes the lowest mantissa byte of four floats, so that it misses the answer cache.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from .config import Config, label
from .report import ms, say, table
from .servers import first_answer, query_body, spawn_server
from .step import SERVER, Numbers, Results, Size, Step

WRK_SCRIPT = Path(__file__).with_name("post.lua")
WRK_RUNS = iter(range(1, 1 << 20))  # each run's vectors start at its own offset: no cross-run cache hits
ORIGINAL_HOST_HTTP_P50 = {1_000: 0.108, 10_000: 1.15, 100_000: 13.0, 1_000_000: 130.0}  # PERFORMANCE-NOTES
HTTP_CONFIGS = {  # name: (--search, extra environment)
    "auto": (None, {}),
    "auto, 1 BLAS thread": (None, {"OPENBLAS_NUM_THREADS": "1"}),
    "exact": ("exact", {}),
    "exact, 1 BLAS thread": ("exact", {"OPENBLAS_NUM_THREADS": "1"}),
}


def check_vary_mode(query: np.ndarray) -> None:
    """The Lua edit must change only low mantissa bits (never NaN or a different vector in effect)."""
    encoded = base64.b64encode(np.asarray(query, dtype="<f4").tobytes()).decode()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    changed = list(encoded)
    for position in (16, 32, 48, 64):
        changed[position] = alphabet[(alphabet.index(changed[position]) + 37) % 64]
    vector = np.frombuffer(base64.b64decode("".join(changed)), dtype="<f4")
    difference = np.abs(vector - query)
    assert np.isfinite(vector).all() and np.count_nonzero(difference) <= 4 and difference.max() < 1e-4, difference.max()


def run_wrk(workdir: Path, port: int, body: bytes, accept: str, mode: str, seconds: float,
            connections: int = 2) -> dict[str, Any]:
    body_file = workdir / f"body-{port}.json"
    offset = next(WRK_RUNS) * 2_000_000
    body_file.write_bytes(body)
    command = ["wrk", f"-t{connections}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s",
               "-s", str(WRK_SCRIPT), f"http://127.0.0.1:{port}/", "--", str(body_file), accept, mode, str(offset)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, check=False)
    line = next((line for line in finished.stdout.splitlines() if line.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {finished.stdout[-1000:]} {finished.stderr[-1000:]}")
    raw = json.loads(line.removeprefix("WRK_RESULT "))
    return {"p50": raw["p50_us"] / 1e6, "p90": raw["p90_us"] / 1e6, "p99": raw["p99_us"] / 1e6,
            "requests": raw["requests"], "requests_per_second": raw["requests"] / (raw["duration_us"] / 1e6),
            "errors": raw["status_errors"] + raw["socket_errors"] + raw["timeouts"],
            "bytes_per_response": raw["bytes"] / max(1, raw["requests"])}


def measure(size: Size) -> Numbers | None:
    """wrk runs: the first configuration in JSON (new and repeated queries) and msgpack, the others
    in JSON; in a full run (not --quick), every configuration once more with one connection."""
    if size.bits not in (10_000, 100_000):
        return None
    config, bits = size.config, size.bits
    configs = ["auto", "auto, 1 BLAS thread"]
    if bits >= 100_000:
        configs += ["exact"] if config.quick else ["exact", "exact, 1 BLAS thread"]
    single_connection = not config.quick
    query, seconds = size.queries[-1], config.http_seconds
    check_vary_mode(query)
    body = query_body(query)
    result = {}
    for position, name in enumerate(configs):
        search, environment = HTTP_CONFIGS[name]
        runs = [("json", "vary", 2), ("json", "fixed", 2), ("msgpack", "vary", 2)] if position == 0 else [("json", "vary", 2)]
        if single_connection or position == 0:
            runs.append(("json", "vary", 1))
        with spawn_server(config.workdir, size.folder, search=search, environment=environment) as server:
            first_answer(server, body, timeout=300)
            for kind, mode, connections in runs:
                run = f"{name} / {kind} / {mode}" + (" / 1 connection" if connections == 1 else "")
                say(f"http {label(bits)}: wrk {run} for {seconds:.0f} s")
                result[run] = run_wrk(config.workdir, server.port, body, f"application/{kind}", mode, seconds, connections)
    return result


def report(results: Results, config: Config) -> list[str]:
    rows = []
    for bits, entry in results["sizes"].items():
        for name, run in (entry.get("http") or {}).items():
            original = ORIGINAL_HOST_HTTP_P50.get(bits)
            rows.append([label(bits), name, ms(run["p50"]), ms(run["p99"]), f"{run['requests_per_second']:.1f}", run["requests"],
                         run["errors"], f"{run['bytes_per_response'] / 1024:.1f}",
                         f"{original / run['p50']:,.0f}x" if original else "-"])
    if not rows:
        return []
    return [table(f"HTTP: wrk -t2 -c2 -d{config.http_seconds:.0f}s (-t1 -c1 where marked), POST / with a 1500-token query, "
                  "one uvicorn worker",
                  ["bits", "search / format / query", "p50 ms", "p99 ms", "req/s", "requests", "errors", "KiB/answer",
                   "faster than original"], rows, left=2,
                  note="`auto` is exact below 10k bits and approximate from 10k (the default settings); "
                  "`1 BLAS thread`: the server run with OPENBLAS_NUM_THREADS=1. "
                  "`vary`: each request changes the lowest mantissa byte of 4 floats, so every request misses the answer "
                  "cache and is ranked; `fixed`: the same body every time (answer-cache hits after the first). "
                  "Original host p50 (PERFORMANCE-NOTES): 108 ms at 1k, 1.15 s at 10k, 13 s at 100k. "
                  "wrk shares the 2 cores with the server.")]


def wrk_missing() -> str | None:
    if shutil.which("wrk") is None:
        return "wrk is not installed: the http step is skipped. Install it with: apt-get update && apt-get install -y wrk"
    return None


STEP = Step("http", "wrk against a real uvicorn process: p50/p99 and requests/s, JSON and msgpack", SERVER,
            measure, report, unavailable=wrk_missing)
