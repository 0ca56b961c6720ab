"""The well-behaved load: `POST /` as fast as it goes, every answer checked.

wrk with check.lua when wrk is installed; otherwise a bounded pool of Python threads running the
same check (`check.check_answer`), at about half wrk's request rate on 2 cores. Both return the
same figures: requests, errors (failed or wrong answers, and transport errors), latency percentiles.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from .check import CHECK_LUA, check_answer, lua_settings
from .model import request_set


def run_wrk(url: str, token: str, seconds: int, connections: int, workdir: Path) -> dict[str, Any]:
    failures = workdir / "wrk-failures.txt"
    settings = workdir / "check-settings.lua"
    settings.write_text(lua_settings(request_set(token), failures))
    done = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(CHECK_LUA),
                           f"{url}/", "--", str(settings)], capture_output=True, text=True, timeout=seconds + 60)
    line = next((line for line in done.stdout.splitlines() if line.startswith("SOAK ")), None)
    if done.returncode or line is None:
        raise SystemExit(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    figures: dict[str, Any] = json.loads(line[5:])
    figures["errors"] = (figures["wrong"] + figures["not_200"] + figures["connect"] + figures["read"]
                         + figures["write"] + figures["status"] + figures["timeout"]
                         + max(0, figures["requests"] - figures["checked"]))
    figures["generator"] = f"wrk -t2 -c{connections} with a checking Lua script"
    figures["failures_file"] = str(failures) if failures.exists() else None
    return figures


def run_python_load(url: str, token: str, seconds: int, connections: int, workdir: Path) -> dict[str, Any]:
    """The fallback: a bounded pool of httpx threads running check_answer on every answer."""
    requests = request_set(token)
    latencies: list[float] = []
    problems: list[str] = []
    errors = 0
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(number: int) -> None:
        nonlocal errors
        with httpx.Client(timeout=10) as client:
            for sent in range(10_000_000):
                if time.monotonic() > deadline:
                    return
                request = requests[(number + sent) % len(requests)]
                started = time.perf_counter()
                try:
                    response = client.post(f"{url}/", content=request["body"], headers=request["headers"])
                    problem = check_answer(response.status_code, response.content)
                except httpx.TransportError as failure:
                    problem = repr(failure)
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    if problem:
                        errors += 1
                        if len(problems) < 5:
                            problems.append(problem)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    if problems:
        (workdir / "load-failures.txt").write_text("\n".join(problems))
    ordered = sorted(latencies) or [0.0]
    return {
        "requests": len(latencies), "checked": len(latencies), "errors": errors, "wrong": errors,
        "duration_us": seconds * 1_000_000,
        "p50_us": ordered[len(ordered) // 2] * 1e6, "p90_us": ordered[int(len(ordered) * 0.9)] * 1e6,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6, "max_us": ordered[-1] * 1e6,
        "generator": f"Python httpx, {connections} threads, each checking every answer",
        "failures_file": str(workdir / "load-failures.txt") if problems else None,
    }
