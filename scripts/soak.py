#!/usr/bin/env python3
"""Soak: load while publishing. Every answer is checked; exits 1 if any failed or was wrong.

A real `python -m host serve --workers 2` (127.0.0.1 only) serves a synthetic library set in a
temporary folder while, for --duration seconds:

- a load generator hammers `POST /`: wrk with scripts/soak/check.lua, which checks every response
  body (if wrk is installed; else a bounded pool of Python threads running the same check,
  `check_answer` below, at about half wrk's request rate on 2 cores);
- a publisher thread replaces (atomically or in place), deletes, re-adds and breaks library
  files (invalid JSON, half-written files, bad fields), always fixing what it broke;
- an admin thread issues and revokes tokens with the CLI, and checks that the running server
  grants and then refuses each one;
- a sampler records the RSS and PSS of the server and its workers.

Each published version is checkable from its answer alone. Against the query e0 (or -e0), bit i
of library L in version V has similarity s = 0.9 - 0.02 i - 0.002 L - 0.0001 (V mod 10), and its
text says "soak L=<L> V=<V> i=<i> T=<pub|priv>"; version V has 12 + V mod 5 bits. So a response
is right only if: it is 200; every similarity is +-s of the bit its text names (embeddings and
records of one version); each library's bits come from a single version; the bits are exactly
the top of the ranking over the libraries present (no gap, no skipping ahead, descending); the
budget holds; against e0, library 0 (never deleted) is present and so is the private library for
the token holder; private bits never reach anonymous callers. At the end, every library must be served in the last good version
published, and deleted ones not at all.

Run: .venv/bin/python scripts/soak.py [--duration 150] [--connections 8]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from host.harness import HostFailed, RunningHost, child_environment, host_command, start_host

MODEL = "soak:32"
DIMENSION = 32
PUBLIC_LIBRARIES = (0, 1, 2, 3)  # library 0 is replaced and broken, never deleted
PRIVATE = 4  # libraries/access/unpublished/private.json
TEXT = re.compile(r"^soak L=(\d+) V=(\d+) i=(\d+) T=(pub|priv)\b")
# What the number of bits in an answer says about the request (see REQUESTS).
CHECK_LUA = Path(__file__).with_name("soak") / "check.lua"  # the check for wrk
KINDS = {12: ("anonymous", "bit", 12), 6: ("anonymous", "token", 65),
         13: ("token", "bit", 13), 7: ("token", "token", 75)}


def bits_in_version(version: int) -> int:
    return 12 + version % 5


def similarity(library: int, version: int, row: int) -> float:
    return 0.9 - 0.02 * row - 0.002 * library - 0.0001 * (version % 10)


def b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


E0 = np.eye(DIMENSION, dtype=np.float32)[0]


def library_file(library: int, version: int) -> dict[str, Any]:
    bits = []
    for row in range(bits_in_version(version)):
        s = similarity(library, version, row)
        vector = np.zeros(DIMENSION, dtype=np.float64)
        vector[0], vector[1 + library] = s, np.sqrt(1 - s * s)
        kind = "priv" if library == PRIVATE else "pub"
        bits.append({
            "text": f"soak L={library} V={version} i={row} T={kind} " + " ".join(f"w{n}" for n in range(8)),
            "embedding": b64(vector),
            "token_count": 10,
            "info": {"url": f"https://soak.example/{library}/{version}/{row}", "title": f"L{library} V{version}"},
        })
    return {"version": 1, "embedding_model": MODEL, "bits": bits}


def library_path(root: Path, library: int) -> Path:
    if library == PRIVATE:
        return root / "access" / "unpublished" / "private.json"
    return root / f"lib{library}.json"


# ---- the check (scripts/soak/check.lua is the same, for wrk) --------------------------------------


def check_answer(status: int, body: bytes) -> str | None:
    """None if the answer is right, else what is wrong with it."""
    if status != 200:
        return f"status {status}: {body[:200]!r}"
    result = json.loads(body)
    bits = result["bits"]
    if result["details"]["counts"]["bits"] != len(bits):
        return "details.counts.bits disagrees with the bits"
    if len(bits) not in KINDS:
        return f"unexpected number of bits {len(bits)}"
    caller, count_type, count = KINDS[len(bits)]
    sign = 1 if bits[0]["similarity"] > 0 else -1
    versions: dict[int, int] = {}
    parsed = []
    for position, bit in enumerate(bits):
        match = TEXT.match(bit["text"])
        if not match:
            return f"unexpected text {bit['text'][:60]!r}"
        library, version, row, kind = int(match[1]), int(match[2]), int(match[3]), match[4]
        if abs(bit["similarity"] - sign * similarity(library, version, row)) > 2e-5:
            return f"similarity {bit['similarity']} is not that of L={library} V={version} i={row}"
        if position and not bit["similarity"] < bits[position - 1]["similarity"]:
            return "not in descending order"
        if versions.setdefault(library, version) != version:
            return f"library {library} mixes versions {versions[library]} and {version}"
        if (kind == "priv") != (library == PRIVATE):
            return "access tag of the wrong library"
        if kind == "priv" and caller == "anonymous":
            return "a private bit reached an anonymous caller"
        if bit["info"]["url"] != f"https://soak.example/{library}/{version}/{row}":
            return "info of another bit"
        parsed.append((library, row))
    # Against e0, bits 0 and 1 of every library lead the ranking, so every library served shows up:
    # library 0 always, and the private one for the token holder. (Against -e0 the longest
    # versions lead, and a library may rightly fall below the budget.)
    if sign > 0 and 0 not in versions:
        return "library 0 is missing"
    if sign > 0 and caller == "token" and PRIVATE not in versions:
        return "the token holder did not get the private library"
    expected = sorted(((library, row) for library, version in versions.items()
                       for row in range(bits_in_version(version))),
                      key=lambda pair: sign * (10 * pair[1] + pair[0]))
    if parsed != expected[: len(parsed)]:
        return "not the top of the ranking (a gap or a skip)"
    if count_type == "token" and sum(bit["token_count"] for bit in bits) > count:
        return "over the token budget"
    return None


def request_set(token: str) -> list[dict[str, Any]]:
    """Six requests; the number of bits each returns tells which it was (KINDS)."""
    requests = []
    for caller in ("anonymous", "token"):
        headers = {"Content-Type": "application/json"}
        if caller == "token":
            headers["Authorization"] = f"Bearer {token}"
        extra = 1 if caller == "token" else 0
        for vector, count_type, count in ((E0, "bit", 12 + extra), (-E0, "bit", 12 + extra),
                                          (E0, "token", 65 + 10 * extra)):
            body = json.dumps({"query_embedding": b64(vector), "count": count, "count_type": count_type})
            requests.append({"headers": headers, "body": body, "caller": caller})
    return requests


def lua_settings(requests: list[dict[str, Any]], failures: Path) -> str:
    """The settings file of check.lua: a Lua chunk that returns the requests, PRIVATE, KINDS and where failures go."""
    def text(value: str) -> str:
        return json.dumps(value)  # a JSON string is a valid Lua string literal here (ASCII only)

    rows = []
    for request in requests:
        headers = ", ".join(f"[{text(key)}] = {text(value)}" for key, value in request["headers"].items())
        rows.append(f"{{headers = {{{headers}}}, body = {text(request['body'])}}}")
    kinds = ", ".join(f"[{bits}] = {{{'true' if caller == 'token' else 'false'}, {text(count_type)}, {count}}}"
                      for bits, (caller, count_type, count) in KINDS.items())
    return (f"return {{\n  requests = {{{', '.join(rows)}}},\n  private = {PRIVATE},\n  kinds = {{{kinds}}},\n"
            f"  failures = {text(str(failures))},\n}}\n")


# ---- the server -----------------------------------------------------------------------------------


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(host_command(*args), cwd=cwd, capture_output=True, text=True, env=child_environment(), timeout=60)


def start_server(workdir: Path, workers: int) -> RunningHost:
    """`serve --workers N` on the work folder, once every worker has loaded the libraries."""
    try:
        server = start_host("libraries", "--access", "access.SECRET.json", "--watch-interval", "0.2", cwd=workdir,
                            workers=workers, log_path=workdir / "server.log", ready_path="/readyz", timeout=60)
        # /readyz answers as soon as one worker is up. A worker still starting when the publisher
        # first breaks a file would load its catalog without that library (it has no previous
        # version to keep), and answers would rightly fail the check: wait for every worker.
        server.wait_until(lambda: server.log().count("Application startup complete.") >= workers, timeout=60,
                          interval=0.1, what=f"start its {workers} workers")
        return server
    except HostFailed as failure:
        raise SystemExit(str(failure)) from None


def server_processes(server: RunningHost) -> list[psutil.Process]:
    """The server and its workers, as psutil sees them now."""
    processes = []
    for pid in server.pids():
        with contextlib.suppress(psutil.Error):
            processes.append(psutil.Process(pid))
    return processes


# ---- the actors -----------------------------------------------------------------------------------


@dataclass
class Publisher:
    """Replaces, deletes, re-adds and breaks library files; remembers the last good version of each."""

    root: Path
    stop: threading.Event
    rng: random.Random
    version: int = 0
    current: dict[int, int | None] = field(default_factory=dict)  # last good version, None if deleted
    actions: dict[str, int] = field(default_factory=dict)

    def next_version(self) -> int:
        self.version += 1
        return self.version

    def publish(self, library: int, atomic: bool) -> None:
        version = self.next_version()
        path = library_path(self.root, library)
        path.parent.mkdir(parents=True, exist_ok=True)
        content = json.dumps(library_file(library, version))
        if atomic:
            temporary = path.with_name(f".{path.name}.{version}.tmp")  # hidden: never read as a library
            temporary.write_text(content)
            os.replace(temporary, path)
        else:  # in place, in pieces: the watcher must wait for it to settle
            with path.open("w") as handle:
                for start in range(0, len(content), 4096):
                    handle.write(content[start:start + 4096])
                    handle.flush()
                    time.sleep(0.005)
        self.current[library] = version
        self.count("replace atomically" if atomic else "replace in place")

    def count(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1

    def break_file(self, library: int) -> None:
        path = library_path(self.root, library)
        good = json.dumps(library_file(library, self.next_version()))
        broken = self.rng.choice([
            good[: len(good) // 2],  # half-written, and left so
            good.replace('"token_count": 10', '"token_count": -1', 1),
            good.replace(f'"{MODEL}"', "null"),
            "",
        ])
        path.write_text(broken)
        self.count("malformed replacement")
        self.stop.wait(0.8)  # long enough for the watchers to refuse it (the previous version keeps serving)
        self.publish(library, atomic=True)  # and the publisher fixes it

    def run(self) -> None:  # main() has published the first version of every library
        while not self.stop.wait(self.rng.uniform(0.2, 0.6)):
            library = self.rng.choice((*PUBLIC_LIBRARIES, PRIVATE))
            roll = self.rng.random()
            if self.current.get(library) is None:
                self.publish(library, atomic=True)
                self.count("re-add deleted")
            elif roll < 0.15 and library not in (0, PRIVATE):
                library_path(self.root, library).unlink()
                self.current[library] = None
                self.count("delete")
            elif roll < 0.30:
                self.break_file(library)
            elif roll < 0.40:
                junk = self.root / f"junk-{self.version}.json"
                junk.write_text(self.rng.choice(["{", "[]", '{"version": 1}', "not json at all"]))
                self.stop.wait(0.5)
                junk.unlink()
                self.count("junk file added and removed")
            else:
                self.publish(library, atomic=self.rng.random() < 0.5)


@dataclass
class Admin:
    """Issues a token, checks the running server grants it; revokes it, checks it is refused."""

    workdir: Path
    url: str
    stop: threading.Event
    issued: int = 0
    revoked: int = 0
    failures: list[str] = field(default_factory=list)
    grant_seconds: list[float] = field(default_factory=list)
    revoke_seconds: list[float] = field(default_factory=list)

    def wait_for(self, token: str, status: int) -> float | None:
        started = time.monotonic()
        while time.monotonic() - started < 5:
            # Both workers must agree: look several times over fresh connections.
            if all(httpx.get(f"{self.url}/libraries/access/unpublished/private.json",
                             headers={"Authorization": f"Bearer {token}"}, timeout=5).status_code == status
                   for _ in range(4)):
                return time.monotonic() - started
            time.sleep(0.1)
        return None

    def run(self) -> None:
        number = 0
        while not self.stop.wait(1.0) and number < 1000:
            number += 1
            subject = f"soak-admin-{number}"
            issued = cli("token", "issue", subject, "--tag", "unpublished", "--expires", "1h",
                         "--access", "access.SECRET.json", cwd=self.workdir)
            if issued.returncode:
                self.failures.append(f"token issue failed: {issued.stderr.strip()}")
                continue
            self.issued += 1
            seconds = self.wait_for(issued.stdout.strip(), 200)
            if seconds is None:
                self.failures.append(f"{subject}: an issued token was not granted within 5 s")
                continue
            self.grant_seconds.append(seconds)
            revoked = cli("token", "revoke", subject, "--access", "access.SECRET.json", cwd=self.workdir)
            if revoked.returncode:
                self.failures.append(f"token revoke failed: {revoked.stderr.strip()}")
                continue
            self.revoked += 1
            seconds = self.wait_for(issued.stdout.strip(), 401)
            if seconds is None:
                self.failures.append(f"{subject}: a revoked token was still granted after 5 s")
                continue
            self.revoke_seconds.append(seconds)


@dataclass
class Sampler:
    server: RunningHost
    stop: threading.Event
    peak_rss: int = 0
    peak_pss: int = 0
    samples: int = 0

    def run(self) -> None:
        while not self.stop.wait(1.0) and self.samples < 100_000:
            rss = pss = 0
            for process in server_processes(self.server):
                try:
                    memory = process.memory_full_info()
                except psutil.Error:
                    continue
                rss += memory.rss
                pss += getattr(memory, "pss", memory.rss)
            self.samples += 1
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)


# ---- load generators ------------------------------------------------------------------------------


def run_wrk(url: str, token: str, seconds: int, connections: int, workdir: Path) -> dict[str, Any]:
    failures = workdir / "wrk-failures.txt"
    settings = workdir / "check-settings.lua"
    settings.write_text(lua_settings(request_set(token), failures))
    done = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(CHECK_LUA),
                           f"{url}/", "--", str(settings)], capture_output=True, text=True, timeout=seconds + 60)
    line = next((line for line in done.stdout.splitlines() if line.startswith("SOAK ")), None)
    if done.returncode or line is None:
        raise SystemExit(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    figures = json.loads(line[5:])
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


# ---- the end state --------------------------------------------------------------------------------


def final_state_problems(url: str, token: str, publisher: Publisher) -> list[str]:
    """Every library served in its last good version; deleted ones not at all."""
    problems = []
    for library, version in sorted(publisher.current.items()):
        name = "access/unpublished/private" if library == PRIVATE else f"lib{library}"
        for _ in range(6):  # several fresh connections: both workers
            response = httpx.get(f"{url}/libraries/{name}.json", headers={"Authorization": f"Bearer {token}"})
            if version is None:
                if response.status_code != 404:
                    problems.append(f"{name} was deleted but is served ({response.status_code})")
                continue
            if response.status_code != 200:
                problems.append(f"{name} should be served in version {version}: {response.status_code}")
                continue
            served = {TEXT.match(bit["text"])[2] for bit in response.json()["bits"]}
            if served != {str(version)}:
                problems.append(f"{name} is served in version(s) {sorted(served)}, not {version}")
    return problems


def metric_values(url: str, name: str, reads: int = 8) -> list[float]:
    """The metric from several fresh connections (each worker keeps its own counters)."""
    values = set()
    for _ in range(reads):
        text = httpx.get(f"{url}/metrics").text
        match = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
        if match:
            values.add(float(match[1]))
    return sorted(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=150, help="seconds of load (default 150)")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="server workers (default 2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--python-load", action="store_true", help="use the Python load generator even if wrk is here")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its path is printed)")
    options = parser.parse_args()
    if not 5 <= options.duration <= 270:
        parser.error("--duration must be between 5 and 270 seconds (the whole run stays under 5 minutes)")

    workdir = Path(tempfile.mkdtemp(prefix="polymath-soak-"))
    root = workdir / "libraries"
    stop = threading.Event()
    publisher = Publisher(root, stop, random.Random(options.seed))
    for library in (*PUBLIC_LIBRARIES, PRIVATE):
        publisher.publish(library, atomic=True)
    publisher.actions.clear()
    if cli("access", "init", "--access", "access.SECRET.json", cwd=workdir).returncode:
        raise SystemExit("access init failed")
    issued = cli("token", "issue", "soak-load", "--tag", "unpublished", "--expires", "1h",
                 "--access", "access.SECRET.json", cwd=workdir)
    token = issued.stdout.strip()

    server = start_server(workdir, options.workers)
    print(f"server {server.url} (pid {server.process.pid}, {options.workers} workers) on {workdir}", file=sys.stderr)
    try:
        admin = Admin(workdir, server.url, stop)
        sampler = Sampler(server, stop)
        actors = [threading.Thread(target=publisher.run, name="publisher"),
                  threading.Thread(target=admin.run, name="admin"),
                  threading.Thread(target=sampler.run, name="sampler")]
        for actor in actors:
            actor.start()
        use_wrk = shutil.which("wrk") is not None and not options.python_load
        started = time.monotonic()
        try:
            load = (run_wrk if use_wrk else run_python_load)(server.url, token, options.duration, options.connections,
                                                              workdir)
        finally:
            stop.set()
            for actor in actors:
                actor.join(timeout=30)
        elapsed = time.monotonic() - started

        time.sleep(1.5)  # the watchers pick up the last publication
        end_problems = final_state_problems(server.url, token, publisher)
        reloads = metric_values(server.url, "polymath_reloads_total")
        generations = metric_values(server.url, "polymath_catalog_generation")
        exit_code = server.stop(timeout=30)  # None if it had to be killed
    finally:
        server.stop(timeout=5)  # also when interrupted (a Ctrl-C does not reach the server); a no-op once stopped
    log = server.log()
    refused_files = len(re.findall(r"library not loaded: ", log))

    failed = bool(load["errors"] or admin.failures or end_problems or load["requests"] == 0 or exit_code != 0)
    report = {
        "result": "FAILED" if failed else "passed",
        "load generator": load["generator"],
        "duration s": round(elapsed, 1),
        "requests served": load["requests"],
        "requests per second": round(load["requests"] / (load["duration_us"] / 1e6), 1),
        "errors (failed or wrong answers)": load["errors"],
        "latency p50 ms": round(load["p50_us"] / 1000, 2),
        "latency p90 ms": round(load["p90_us"] / 1000, 2),
        "latency p99 ms": round(load["p99_us"] / 1000, 2),
        "latency max ms": round(load["max_us"] / 1000, 2),
        "publisher actions": dict(sorted(publisher.actions.items())),
        "versions published": publisher.version,
        "reloads per worker (polymath_reloads_total)": reloads,
        "catalog generation per worker": generations,
        "bad files refused (log lines, all workers)": refused_files,
        "tokens issued / revoked by the admin": [admin.issued, admin.revoked],
        "grant seen after (median s)": round(statistics.median(admin.grant_seconds), 2) if admin.grant_seconds else None,
        "revocation seen after (median s, max s)": [round(statistics.median(admin.revoke_seconds), 2),
                                                    round(max(admin.revoke_seconds), 2)] if admin.revoke_seconds else None,
        "admin failures": admin.failures[:5],
        "end state problems": end_problems[:5],
        "peak RSS MiB (server + workers)": round(sampler.peak_rss / 2**20, 1),
        "peak PSS MiB (server + workers)": round(sampler.peak_pss / 2**20, 1),
        "server exit code after SIGTERM": exit_code,
    }
    if load.get("failures_file"):
        report["first failures in"] = load["failures_file"]
    for key, value in report.items():
        print(f"{key}: {value}")
    if options.keep or failed:
        print(f"work folder kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
