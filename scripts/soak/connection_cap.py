"""The connection cap, shown apart from the checked load: past it, a clean 503; then service again.

Run after the load, never during it. It opens (workers + 1) x --max-connections idle sockets, so
that every worker holds more than its cap, asks a few questions on fresh connections (each must
get a complete 503 with a one-line JSON error and `Retry-After`, or a 200 from a worker the kernel
gave fewer sockets to), then waits for the header timeout to close the idle sockets and asks
again: every answer must be 200.
"""

from __future__ import annotations

import http.client
import json
import time
from collections import Counter
from typing import Any

import psutil

from host.service.harness import LOCALHOST, RunningHost

from .hostile_sockets import SLACK, close_all, connect, seconds_until_closed
from .server import Limits

QUESTIONS = 10


def ask(port: int) -> tuple[int, str, bytes]:
    """GET /healthz over a fresh connection: status, content type (with Retry-After if any), body."""
    connection = http.client.HTTPConnection(LOCALHOST, port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        retry = response.getheader("retry-after")
        kind = response.getheader("content-type", "") + (f", Retry-After {retry}" if retry else "")
        return response.status, kind, response.read()
    finally:
        connection.close()


def is_json_error(body: bytes) -> bool:
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, str) and "\n" not in error


def held_per_worker(server: RunningHost, ports: set[int]) -> list[int]:
    """How many of these client ports each server process holds a connection from."""
    held = []
    for pid in server.pids()[1:]:
        try:
            connections = psutil.Process(pid).net_connections("tcp")
        except psutil.Error:
            continue
        count = sum(1 for connection in connections if connection.raddr and connection.raddr.port in ports)
        if count:
            held.append(count)
    return sorted(held)


def connection_cap_step(server: RunningHost, limits: Limits, workers: int) -> dict[str, Any]:
    """What the cap did: answers while over it, how long the idle sockets lasted, answers after."""
    failures: list[str] = []
    idle = [connect(server.port) for _ in range((workers + 1) * limits.max_connections)]
    started = time.monotonic()
    try:
        time.sleep(0.3)  # every worker has accepted its share
        held = held_per_worker(server, {connection.getsockname()[1] for connection in idle})
        over_cap = []
        for _ in range(QUESTIONS):
            try:
                over_cap.append(ask(server.port))
            except OSError as problem:
                failures.append(f"over the cap: {problem!r} instead of an answer")
        refusals = [answer for answer in over_cap if answer[0] == 503]
        if not refusals:
            failures.append(f"over the cap: no 503 among {[status for status, _, _ in over_cap]}")
        if any(status not in (200, 503) for status, _, _ in over_cap):
            failures.append(f"over the cap: statuses {[status for status, _, _ in over_cap]}")
        if any(not is_json_error(body) or "Retry-After" not in kind for _, kind, body in refusals):
            failures.append(f"over the cap: a 503 that is not a JSON error with Retry-After: {refusals[0][1:]}")
        closed = seconds_until_closed(idle, started, limits.header_timeout + SLACK)
    finally:
        close_all(idle)
    if any(seconds is None for seconds in closed):
        failures.append(f"{sum(seconds is None for seconds in closed)} idle sockets still open after "
                        f"{limits.header_timeout + SLACK:g} s")
    after = [ask(server.port)[0] for _ in range(QUESTIONS)]
    if any(status != 200 for status in after):
        failures.append(f"after the idle sockets closed: statuses {after}")
    seen = [seconds for seconds in closed if seconds is not None]
    return {
        "idle sockets opened": len(idle),
        "held per worker": held,
        "answers while over the cap": dict(Counter(f"{status} {kind}".strip() for status, kind, _ in over_cap)),
        "a 503 body": refusals[0][2].decode(errors="replace") if refusals else None,
        "idle sockets closed after (s, max)": round(max(seen), 2) if seen else None,
        "answers after": dict(Counter(after)),
        "failures": failures,
    }
