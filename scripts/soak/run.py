"""The soak's run: set up the work folder, start the server, run everyone, check the end, report."""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .abuse import Abuse
from .admin import ACCESS_FILE, Admin
from .ballast import publish_ballast
from .connection_cap import connection_cap_step
from .end_state import final_state_problems
from .hostile_files import HOSTILE_BREAKAGES
from .load import run_python_load, run_wrk
from .model import PRIVATE, PUBLIC_LIBRARIES
from .publisher import ORDINARY_BREAKAGES, Publisher
from .report import MIB, admin_figures, load_average, load_figures, memory_figures, print_report, spread, write_json
from .sampler import Sampler, memory_now
from .server import LIMITS, cli, metric_values, reload_seconds, service_lines, start_server


def parse_options(argv: list[str] | None, description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--duration", type=int, default=150, help="seconds of load (default 150)")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="server workers (default 2)")
    parser.add_argument("--abuse", action=argparse.BooleanOptionalAction, default=True,
                        help="run the abusers beside the load, and the connection-cap step after it (default: yes)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--python-load", action="store_true", help="use the Python load generator even if wrk is here")
    parser.add_argument("--json", type=Path, help="also write the report to this file, as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its path is printed)")
    options = parser.parse_args(argv)
    if not 5 <= options.duration <= 270:
        parser.error("--duration must be between 5 and 270 seconds (the whole run stays under 5 minutes)")
    return options


def prepare(workdir: Path, publisher: Publisher, seed: int) -> str:
    """Publish every library's first version and the ballast, make the access file; the load's token."""
    for library in (*PUBLIC_LIBRARIES, PRIVATE):
        publisher.publish(library, atomic=True)
    publisher.actions.clear()
    publish_ballast(publisher.root, seed)
    if cli("access", "init", "--access", ACCESS_FILE, cwd=workdir).returncode:
        raise SystemExit("access init failed")
    issued = cli("token", "issue", "soak-load", "--tag", "unpublished", "--expires", "1h", "--access", ACCESS_FILE,
                 cwd=workdir)
    return issued.stdout.strip()


def main(argv: list[str] | None = None, description: str = "") -> int:
    options = parse_options(argv, description)
    workdir = Path(tempfile.mkdtemp(prefix="polymath-soak-"))
    stop = threading.Event()
    breakages = {**ORDINARY_BREAKAGES, **(HOSTILE_BREAKAGES if options.abuse else {})}
    publisher = Publisher(workdir / "libraries", stop, random.Random(options.seed), breakages)
    token = prepare(workdir, publisher, options.seed)
    load_before = load_average()

    server = start_server(workdir, options.workers)
    print(f"server {server.url} (pid {server.process.pid}, {options.workers} workers) on {workdir}", file=sys.stderr)
    cap: dict[str, Any] | None = None
    try:
        admin = Admin(workdir, server.url, stop)
        sampler = Sampler(server, stop)
        abuse = Abuse(server, publisher.root, LIMITS, stop, options.seed) if options.abuse else None
        actors = [threading.Thread(target=publisher.run, name="publisher"),
                  threading.Thread(target=admin.run, name="admin"),
                  threading.Thread(target=sampler.run, name="sampler")]
        for actor in actors:
            actor.start()
        if abuse:
            abuse.start()
        use_wrk = shutil.which("wrk") is not None and not options.python_load
        started = time.monotonic()
        try:
            load = (run_wrk if use_wrk else run_python_load)(server.url, token, options.duration, options.connections,
                                                              workdir)
        finally:
            load_during = load_average()
            stop.set()
            for actor in actors:
                actor.join(timeout=30)
            if abuse:
                abuse.join()
        elapsed = time.monotonic() - started

        time.sleep(1.5)  # the watchers pick up the last publication
        end_problems = final_state_problems(server.url, token, publisher)
        generations = metric_values(server.url, "polymath_public_generation")
        if options.abuse:  # apart from the checked load: well-behaved clients never meet the cap
            cap = connection_cap_step(server, LIMITS, options.workers)
            cap["RSS MiB after it"] = round(memory_now(server)[0] / MIB, 1)
        exit_code = server.stop(timeout=30)  # None if it had to be killed
    finally:
        server.stop(timeout=5)  # also when interrupted (a Ctrl-C does not reach the server); a no-op once stopped
    log = server.log()

    abuse_summary = abuse.tally.summary() if abuse else None
    failed = bool(load["errors"] or admin.failures or end_problems or load["requests"] == 0 or exit_code != 0
                  or (abuse_summary and abuse_summary["failures"]) or (cap and cap["failures"]))
    report: dict[str, Any] = {
        "result": "FAILED" if failed else "passed",
        "abuse": "on" if options.abuse else "off",
        "load average (1, 5, 15 min) before / at the end of the load": [load_before, load_during],
        **load_figures(load, elapsed),
        "publisher actions": dict(sorted(publisher.actions.items())),
        "versions published": publisher.version,
        "reloads (log lines, all workers)": service_lines(log, r"libraries reloaded: generation"),
        "reload seconds (median, max)": spread(reload_seconds(log)),
        "public generation per worker (polymath_public_generation)": generations,
        "bad files refused (log lines, all workers)": service_lines(log, r"library not loaded: "),
        **admin_figures(admin),
        "end state problems": end_problems[:5],
        **memory_figures(sampler),
        "abusers": abuse_summary,
        "connection cap step": cap,
        "server exit code after SIGTERM": exit_code,
    }
    if load.get("failures_file"):
        report["first failures in"] = load["failures_file"]
    print_report(report)
    if options.json:
        write_json(report, options.json)
    if options.keep or failed:
        print(f"work folder kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0
