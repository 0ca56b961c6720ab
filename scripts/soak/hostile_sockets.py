"""Clients that hold sockets: idle ones, half-sent headers, half-sent bodies, answers never read.

Each actor opens a handful of connections at a time, misbehaves, and checks that the server ends
each one within its limit, not before it, and for the right reason (the server's debug line for
the drop, by client port). A connection is closed for the client once its side leaves TCP's
ESTABLISHED state: a FIN, or the reset the server sends when the kernel still holds unsent bytes.
Together they hold at most ~50 sockets at once, far below the cap: well-behaved clients never meet it.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Sequence

from host.service.harness import LOCALHOST

from .ballast import BALLAST_MODEL, random_query
from .server import DropReasons, Limits
from .tally import Tally

ESTABLISHED = 1  # tcpi_state, the first byte of struct tcp_info (Linux)
SLACK = 5.0  # how late past its limit a close may come on a busy shared machine
# A large answer is streamed as it is rendered, between other requests: its write only stalls once
# what it has rendered fills the kernel's buffers, so its timer starts later by that rendering time.
STREAMING_SLACK = 20.0
EARLY = 0.1  # how early before its limit a close may come (timer granularity)
NO_HEADERS = "no complete headers"  # the server's reasons (host/web/server.py)
UNREAD = "its answer went unread"
IDLE_SOCKETS = 20
HALF_OPEN_SOCKETS = 20
HALF_BODIES = 4
SLOW_READERS = 2  # of each size
# Ballast bits with embeddings (~2.6 KB each): ~260 KB, which the kernel takes whole (the server's
# write completes, the connection goes idle: the header timer ends it), and ~6.2 MB, more than the
# kernel's largest send buffer (net.ipv4.tcp_wmem, 4 MiB by default): the write stalls.
SMALL_UNREAD_COUNT = 100
LARGE_UNREAD_COUNT = 2400


def connect(port: int, receive_buffer: int | None = None) -> socket.socket:
    connection = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:  # before connecting, so the window is small from the start
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    connection.settimeout(10)
    connection.connect((LOCALHOST, port))
    return connection


def is_open(connection: socket.socket) -> bool:
    return connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == ESTABLISHED


def seconds_until_closed(connections: Sequence[socket.socket], started: float, limit: float) -> list[float | None]:
    """For each connection, when (seconds after `started`) the server was seen closing it; None if not by `limit`."""
    closed: list[float | None] = [None] * len(connections)
    while True:
        now = time.monotonic()
        for position, connection in enumerate(connections):
            if closed[position] is None and not is_open(connection):
                closed[position] = now - started
        if all(seconds is not None for seconds in closed) or now - started > limit:
            return closed
        time.sleep(0.05)


def close_all(connections: Sequence[socket.socket]) -> None:
    for connection in connections:
        connection.close()


class Held:
    """Sockets an abuser opens, counted in the tally while open, all closed at the end of the `with`."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.connections: list[socket.socket] = []

    def open(self, port: int, count: int, receive_buffer: int | None = None) -> list[socket.socket]:
        for _ in range(count):
            self.connections.append(connect(port, receive_buffer))
            self.tally.hold(1)
        return self.connections

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *_: object) -> None:
        close_all(self.connections)
        self.tally.hold(-len(self.connections))


def request_bytes(body: bytes, *, content_length: int | None = None) -> bytes:
    length = len(body) if content_length is None else content_length
    return (f"POST / HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            .encode() + body)


class SocketAbuser:
    """One kind of socket abuse, repeated with short pauses until `stop`."""

    kind = ""

    def __init__(self, port: int, limits: Limits, drops: DropReasons, stop: threading.Event, tally: Tally,
                 seed: int) -> None:
        self.port, self.limits, self.drops, self.stop, self.tally = port, limits, drops, stop, tally
        self.rng = random.Random(seed)

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(0.3, 1.0)):
            try:
                self.once()
            except OSError as problem:
                self.tally.fail(f"{self.kind}: {problem!r}")

    def once(self) -> None:
        raise NotImplementedError

    def expect_dropped(self, kind: str, connections: Sequence[socket.socket], started: float, limit: float,
                       reason: str, slack: float = 0.0) -> None:
        """Each connection dropped by the server for `reason`, within `limit` (+ SLACK + `slack`) of `started`,
        not before."""
        ports = [connection.getsockname()[1] for connection in connections]
        allowed = limit + SLACK + slack
        for port, seconds in zip(ports, seconds_until_closed(connections, started, allowed)):
            if seconds is None:
                self.tally.fail(f"{kind}: still open {allowed:g} s later (its limit is {limit:g} s)")
            elif seconds < limit - EARLY:
                self.tally.fail(f"{kind}: closed after {seconds:.2f} s, before its limit ({limit:g} s)")
            elif (given := self.drops.reason(port)) != reason:
                self.tally.fail(f"{kind}: dropped for {given!r}, not {reason!r}")
            else:
                self.tally.observe(f"{kind}: dropped after (s)", seconds)
                self.tally.count(f"{kind}: dropped ({reason})")


class IdleSockets(SocketAbuser):
    """Connect and send nothing: dropped after --header-timeout."""

    kind = "idle socket"

    def once(self) -> None:
        started = time.monotonic()
        with Held(self.tally) as held:
            connections = held.open(self.port, IDLE_SOCKETS)
            self.expect_dropped(self.kind, connections, started, self.limits.header_timeout, NO_HEADERS)


class HalfOpenSockets(SocketAbuser):
    """Send half a request's headers, then nothing: dropped after --header-timeout."""

    kind = "half-sent headers"

    def once(self) -> None:
        started = time.monotonic()
        with Held(self.tally) as held:
            connections = held.open(self.port, HALF_OPEN_SOCKETS)
            for connection in connections:
                connection.sendall(b"POST / HTTP/1.1\r\nHost: soak\r\nContent-Type: applica")
            self.expect_dropped(self.kind, connections, started, self.limits.header_timeout, NO_HEADERS)


class SlowReaders(SocketAbuser):
    """Ask for an answer (a distinct one each time) and never read it.

    One the kernel takes whole: dropped --header-timeout after it was written, as an idle connection.
    One larger than the kernel's send buffer: the write stalls, dropped after --write-timeout.
    Either way the reader got a few KB of it: its small receive window is all that was read.
    """

    kind = "slow reader"

    def once(self) -> None:
        sizes = [("slow reader, answer the kernel takes whole", SMALL_UNREAD_COUNT, self.limits.header_timeout,
                  NO_HEADERS, 0.0),
                 ("slow reader, answer larger than the kernel takes", LARGE_UNREAD_COUNT, self.limits.write_timeout,
                  UNREAD, STREAMING_SLACK)]
        for kind, count, limit, reason, slack in sizes:
            with Held(self.tally) as held:
                connections = held.open(self.port, SLOW_READERS, receive_buffer=4096)
                for connection in connections:
                    body = json.dumps({"query_embedding": random_query(self.rng.getrandbits(64)), "count": count,
                                       "count_type": "bit", "omit": "", "query_embedding_model": BALLAST_MODEL})
                    connection.sendall(request_bytes(body.encode()))
                started = time.monotonic()  # each timer starts later still: once the answer is written
                self.expect_dropped(kind, connections, started, limit, reason, slack)
                for connection in connections:
                    self.check_cut_short(kind, connection)

    def check_cut_short(self, kind: str, connection: socket.socket) -> None:
        """What did arrive must be less than the whole answer (else the reader was not slow enough to matter)."""
        received = b""
        connection.settimeout(1)
        try:
            while chunk := connection.recv(1 << 16):
                received += chunk
        except OSError:
            pass  # the reset, once what had arrived is read
        head, _, body = received.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            self.tally.fail(f"{kind}: expected a 200 answer, got {head[:60]!r}")
            return
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        chunked = b"transfer-encoding: chunked" in head.lower()
        whole = body.endswith(b"\r\n0\r\n\r\n") if chunked else length is None or len(body) >= length
        if whole:
            self.tally.fail(f"{kind}: got the whole answer ({len(body):,} bytes); it was never held back")
        else:
            self.tally.observe(f"{kind}: KB received of the answer", len(body) / 1000)


class HalfBodies(SocketAbuser):
    """Send the headers and a tenth of the body announced: 408 after --body-read-timeout, then closed."""

    kind = "half-sent body"

    def once(self) -> None:
        with Held(self.tally) as held:
            connections = held.open(self.port, HALF_BODIES)
            for connection in connections:
                connection.sendall(request_bytes(b'{"count": 1, ' + b" " * 86, content_length=1000))
            started = time.monotonic()
            for connection in connections:
                self.expect_408(connection, started)
            # uvicorn closes it after its keep-alive timeout (5 s), with nothing left to send.
            for seconds in seconds_until_closed(connections, started, self.limits.body_read_timeout + 5 + SLACK):
                if seconds is None:
                    self.tally.fail("half-sent body: the connection was still open 5 s after its 408")
                else:
                    self.tally.observe("half-sent body: closed after (s)", seconds)

    def expect_408(self, connection: socket.socket, started: float) -> None:
        connection.settimeout(self.limits.body_read_timeout + SLACK)
        try:
            head = connection.recv(4096)
        except OSError as problem:
            self.tally.fail(f"half-sent body: no answer ({problem!r})")
            return
        seconds = time.monotonic() - started
        if not head.startswith(b"HTTP/1.1 408"):
            self.tally.fail(f"half-sent body: expected 408, got {head[:60]!r}")
        elif seconds < self.limits.body_read_timeout - EARLY:
            self.tally.fail(f"half-sent body: 408 after {seconds:.2f} s, before --body-read-timeout")
        else:
            self.tally.observe("half-sent body: 408 after (s)", seconds)
            self.tally.count("half-sent body: 408")
