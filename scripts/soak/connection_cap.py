"""The connection cap, shown apart from the checked load: idle sockets make room, busy ones meet a 503.

Run after the load, never during it. Two rounds, each of (workers + 1) x --max-connections
sockets, so that every worker is past its cap:

- idle sockets (they send nothing): every question on a fresh connection must get a 200, as each
  worker closes the sockets idle longest to make room for it; no worker holds more than its cap,
  and the idle sockets left are closed at the header timeout;
- busy sockets (headers in, the body still coming): nothing to close, so each question gets a
  complete 503 with a one-line JSON error and `Retry-After`, or a 200 from a worker the kernel
  gave fewer sockets to; the body-read timeout ends them.

Then every answer must be 200 again.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections import Counter
from typing import Any

import psutil

from host.service.harness import LOCALHOST, RunningHost

from .hostile_sockets import EARLY, SLACK, close_all, connect, seconds_until_closed
from .server import Limits

KEEP_ALIVE_TIMEOUT = 5.0  # uvicorn's, which closes a connection after its 408
BUSY_REQUEST = (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                b'{"count": ')
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


def busy(port: int) -> socket.socket:
    """A connection busy with a request: its headers are in, its body is still coming."""
    connection = connect(port)
    connection.sendall(BUSY_REQUEST)
    return connection


def questions(port: int, failures: list[str], when: str) -> list[tuple[int, str, bytes]]:
    answers = []
    for _ in range(QUESTIONS):
        try:
            answers.append(ask(port))
        except OSError as problem:
            failures.append(f"{when}: {problem!r} instead of an answer")
    return answers


def connection_cap_step(server: RunningHost, limits: Limits, workers: int) -> dict[str, Any]:
    """What the cap did: answers past it with idle and with busy sockets, how long those lasted, answers after."""
    failures: list[str] = []
    count = (workers + 1) * limits.max_connections
    idle = [connect(server.port) for _ in range(count)]
    started = time.monotonic()
    try:
        time.sleep(0.3)  # every worker has accepted its share
        held_idle = held_per_worker(server, {connection.getsockname()[1] for connection in idle})
        past_idle = questions(server.port, failures, "past the cap, idle sockets")
        if any(status != 200 for status, _, _ in past_idle):
            failures.append(f"past the cap, idle sockets: statuses {[status for status, _, _ in past_idle]}")
        if any(held > limits.max_connections for held in held_idle):
            failures.append(f"past the cap, idle sockets: a worker held {max(held_idle)}")
        closed_idle = seconds_until_closed(idle, started, limits.header_timeout + SLACK)
    finally:
        close_all(idle)
    making_room = [seconds for seconds in closed_idle if seconds is not None and seconds < limits.header_timeout - EARLY]
    if any(seconds is None for seconds in closed_idle):
        failures.append(f"{sum(seconds is None for seconds in closed_idle)} idle sockets still open after "
                        f"{limits.header_timeout + SLACK:g} s")

    busy_sockets = [busy(server.port) for _ in range(count)]
    started = time.monotonic()
    try:
        time.sleep(0.3)
        held_busy = held_per_worker(server, {connection.getsockname()[1] for connection in busy_sockets})
        past_busy = questions(server.port, failures, "past the cap, busy sockets")
        refusals = [answer for answer in past_busy if answer[0] == 503]
        if not refusals:
            failures.append(f"past the cap, busy sockets: no 503 among {[status for status, _, _ in past_busy]}")
        if any(status not in (200, 503) for status, _, _ in past_busy):
            failures.append(f"past the cap, busy sockets: statuses {[status for status, _, _ in past_busy]}")
        if any(not is_json_error(body) or "Retry-After" not in kind for _, kind, body in refusals):
            failures.append(f"past the cap: a 503 that is not a JSON error with Retry-After: {refusals[0][1:]}")
        closed_busy = seconds_until_closed(busy_sockets, started,
                                           limits.body_read_timeout + KEEP_ALIVE_TIMEOUT + SLACK)
    finally:
        close_all(busy_sockets)
    if any(seconds is None for seconds in closed_busy):
        failures.append(f"{sum(seconds is None for seconds in closed_busy)} busy sockets still open after "
                        f"{limits.body_read_timeout + KEEP_ALIVE_TIMEOUT + SLACK:g} s")

    after = [ask(server.port)[0] for _ in range(QUESTIONS)]
    if any(status != 200 for status in after):
        failures.append(f"after the sockets closed: statuses {after}")
    seen = [seconds for seconds in closed_idle + closed_busy if seconds is not None]
    return {
        "sockets opened, each round": count,
        "idle held per worker": held_idle,
        "answers past the cap, idle sockets": dict(Counter(f"{status} {kind}".strip() for status, kind, _ in past_idle)),
        "idle sockets closed to make room (before the header timeout)": len(making_room),
        "busy held per worker": held_busy,
        "answers past the cap, busy sockets": dict(Counter(f"{status} {kind}".strip() for status, kind, _ in past_busy)),
        "a 503 body": refusals[0][2].decode(errors="replace") if refusals else None,
        "sockets closed after (s, max)": round(max(seen), 2) if seen else None,
        "answers after": dict(Counter(after)),
        "failures": failures,
    }
