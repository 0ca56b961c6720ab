"""uvicorn as we run it: connections that cost nothing when clients misbehave.

uvicorn never closes a connection that sends nothing or only part of its headers, and a client
that stops reading holds its answer in memory for as long as it likes. `GuardedH11Protocol` adds
the two missing timers: headers must arrive within `header_timeout` seconds of a connection being
ready for a request, and a paused write (the client is not reading) may last `write_timeout`
seconds before the connection is dropped. A dropped connection whose answer the kernel still holds
is reset, so the kernel lets go of it too.

Descriptors never run out for a connection that asks something. `serve` raises its soft open-file
limit to the hard limit before it opens anything (as nginx and HAProxy do), and the connection cap
is derived from the limit that results (`connection_budget`): what is open once the libraries are
loaded is kept twice over (a reload maps a new generation beside the old), plus
DESCRIPTORS_KEPT_FREE for the embedder, logs and files being compiled. Past the cap, or once a new
connection's descriptor comes within DESCRIPTORS_NEAR_LIMIT of the limit, the connection that has
waited longest for a request is closed to make room: a client that sends a request is served, and
idle ones (a load balancer keeps many) go first. Only when every connection is busy with a request
is a new one's request refused, with a JSON 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import resource
import signal
import socket
import struct
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any
from weakref import WeakKeyDictionary

import h11
import uvicorn
from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from host.service.process import bind_workers_over_tcp
from host.service.settings import Settings
from host.web.coalescing import CoalescingTransport

log = logging.getLogger("polymath_host.server")
DESCRIPTORS_KEPT_FREE = 64  # the embedder's files, logs, the access file, a library being compiled, the watcher
DESCRIPTORS_NEAR_LIMIT = 16  # a connection given a descriptor this close to the limit makes room as one past the cap does
OVER_CAP_BODY = b'{"error":"this host holds as many connections as it allows: try again in a moment"}'
CAP_WARNING_INTERVAL = 60.0  # seconds between two log lines saying requests are refused (or room made) at the cap
# The connections of each server waiting for a request's headers, the longest-waiting first.
_waiting: WeakKeyDictionary[ServerState, dict[GuardedH11Protocol, None]] = WeakKeyDictionary()
DRAINING = threading.Event()  # set by SIGTERM while --drain-seconds run: /readyz answers 503


async def refuse_over_cap(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """The connection cap's 503, a one-line JSON error like every other refusal; the connection closes after it."""
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(OVER_CAP_BODY)).encode()),
        (b"retry-after", b"1"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": OVER_CAP_BODY, "more_body": False})


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header-read timer and a write-stall timer per connection, and a
    connection cap: past it the longest-waiting idle connection is closed to make room, and only when
    none is idle are requests refused, with a JSON 503 (uvicorn's own answers text/plain and logs a
    warning for every refused request)."""

    header_timeout = 10.0
    write_timeout = 30.0
    connection_cap: int | None = None  # per worker; None: no cap
    open_file_limit: int | None = None  # this process's soft limit; None: not watched
    _cap_warned_at = -CAP_WARNING_INTERVAL
    _room_warned_at = -CAP_WARNING_INTERVAL

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None

    # uvicorn reads `self.app` once for each request it starts: past the cap, that is the refusal.
    @property
    def app(self) -> Any:
        cap = self.connection_cap
        if cap is not None and (len(self.connections) > cap or len(self.tasks) >= cap):
            now = time.monotonic()
            if now - GuardedH11Protocol._cap_warned_at >= CAP_WARNING_INTERVAL:
                GuardedH11Protocol._cap_warned_at = now
                log.warning("over the connection cap (%d): refusing requests with 503", cap)
            return refuse_over_cap
        return self._app

    @app.setter
    def app(self, value: Any) -> None:
        self._app = value

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Headers and body in one write: a replica killed mid-answer never leaves half of one (coalescing.py).
        super().connection_made(CoalescingTransport(transport, self.loop))
        self._follow_headers()
        if self._crowded():
            self._make_room()

    def _crowded(self) -> bool:
        """Past the cap, or given a descriptor near the open-file limit (Linux hands out the lowest
        free number, so a high one means the table is nearly full, whoever holds the rest)."""
        if self.connection_cap is not None and len(self.connections) > self.connection_cap:
            return True
        connection = self.transport.get_extra_info("socket")
        limit = self.open_file_limit
        return limit is not None and connection is not None and connection.fileno() >= limit - DESCRIPTORS_NEAR_LIMIT

    def _make_room(self) -> None:
        """Close the connection that has waited longest for a request, if one other than this does."""
        waiting = _waiting.get(self.server_state, {})
        oldest = next((connection for connection in waiting if connection is not self), None)
        if oldest is None:
            return  # every other connection is busy: this one's request gets the 503
        now = time.monotonic()
        if now - GuardedH11Protocol._room_warned_at >= CAP_WARNING_INTERVAL:
            GuardedH11Protocol._room_warned_at = now
            log.warning("at the connection cap (%s) or near the open-file limit (%s): closing the connections "
                        "idle longest to make room for new ones", self.connection_cap, self.open_file_limit)
        oldest._drop("closed to make room for a new connection")
        self.connections.discard(oldest)  # now, not once the loop reports it lost: it no longer counts

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.write_timeout, self._drop, "its answer went unread")

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _follow_headers(self) -> None:
        """Armed while the connection waits for a request's headers; disarmed once they are in.
        While armed, the connection is among the server's waiting ones, in the order it began to wait."""
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._drop, "no complete headers")
            _waiting.setdefault(self.server_state, {})[self] = None
        elif not waiting and self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
            _waiting.get(self.server_state, {}).pop(self, None)

    def _drop(self, why: str) -> None:
        self._cancel_timers()
        if not self.transport.is_closing():
            log.debug("dropping a connection from %s: %s", self.client, why)
            connection = self.transport.get_extra_info("socket")
            if connection is not None and unsent_bytes(connection):
                # Else the kernel keeps what it already took (up to its send buffer, 4 MiB by default)
                # in an orphaned socket, probing a client that answers but never reads for as long as
                # that client likes. A zero linger makes the close a reset, which frees it at once.
                with contextlib.suppress(OSError):
                    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()  # close() would first wait to flush what the client is not reading

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._stall_timer = None
        _waiting.get(self.server_state, {}).pop(self, None)


def unsent_bytes(connection: Any) -> int:
    """Bytes the kernel holds for this socket that the client has not acknowledged (Linux); 0 if unknown."""
    try:
        held: int = struct.unpack("i", fcntl.ioctl(connection.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        return held
    except (OSError, AttributeError):
        return 0


@dataclass(frozen=True)
class OpenFileLimit:
    """This process's open-file limit: soft as found, soft now, and hard (2^20 for "unlimited")."""

    found: int
    soft: int
    hard: int

    def describe(self) -> str:
        if self.soft > self.found:
            return f"{self.soft:,} (raised from {self.found:,})"
        return f"{self.soft:,}" + (" (the hard limit)" if self.soft >= self.hard else " (could not be raised)")


def raise_open_file_limit() -> OpenFileLimit:
    """Raise this process's soft open-file limit to its hard limit (as nginx and HAProxy do)."""
    found, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if found == resource.RLIM_INFINITY:  # Linux never allows it for files; elsewhere, as good as any
        found = 1 << 30
    soft = found
    wanted = hard if hard != resource.RLIM_INFINITY else max(found, 1 << 20)
    if wanted > found:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # not allowed here: keep what we have
    return OpenFileLimit(found, soft, wanted)


def descriptors_in_use() -> int:
    """How many descriptors this process holds now (its libraries' mapped files among them); 0 if unknown."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(list(Path(folder).iterdir())) - 1)  # less the one that lists the folder
        except OSError:
            continue
    return 0


def connection_budget(max_connections: int, limit: OpenFileLimit, in_use: int) -> tuple[int, str]:
    """The connection cap a worker can afford under `limit` with `in_use` descriptors open, and why (one line)."""
    kept = 2 * in_use + DESCRIPTORS_KEPT_FREE
    affordable = limit.soft - kept
    if max_connections <= affordable:
        return max_connections, (f"up to {max_connections:,} connections per worker (--max-connections; the "
                                 f"open-file limit of {limit.describe()} affords {affordable:,})")
    cap = max(1, affordable)
    return cap, (f"up to {cap:,} connections per worker, not the {max_connections:,} of --max-connections: the "
                 f"open-file limit is {limit.describe()}, less {kept:,} kept for the {in_use:,} descriptors open now "
                 f"(libraries' mapped files, logs, sockets) twice over (a reload maps the new beside the old) and "
                 f"{DESCRIPTORS_KEPT_FREE} for the embedder, logs and compiling; raise the hard limit "
                 "(ulimit -Hn, systemd LimitNOFILE=, docker --ulimit nofile=) for more")


def prepare_worker(settings: Settings, limit: OpenFileLimit | None = None) -> str:
    """Set this process up to hold connections safely, once its libraries are loaded: the timers,
    and the connection cap its open-file limit affords. Returns the line saying what the cap is and why."""
    GuardedH11Protocol.header_timeout = settings.header_timeout
    GuardedH11Protocol.write_timeout = settings.write_timeout
    limit = limit or raise_open_file_limit()
    cap, why = connection_budget(settings.max_connections, limit, descriptors_in_use())
    GuardedH11Protocol.connection_cap = cap
    GuardedH11Protocol.open_file_limit = limit.soft
    return why


def run(app: Any, settings: Settings, *, host: str, port: int, workers: int, log_level: str) -> None:
    """Serve `app` (an ASGI app, or with workers the import string of a factory) until stopped.
    Call `prepare_worker` first (workers, fresh processes, call it in host.web.app)."""
    options: dict[str, Any] = {
        "host": host, "port": port, "log_level": log_level, "access_log": False,
        "http": GuardedH11Protocol, "timeout_keep_alive": 5,  # no limit_concurrency: the protocol caps
    }
    if workers > 1:
        bind_workers_over_tcp()
        uvicorn.run(app, factory=True, workers=workers, **options)
    else:
        uvicorn.run(app, **options)


def drain_on_sigterm(seconds: float) -> None:
    """Make SIGTERM first drain for `seconds`, then stop as uvicorn does (finishing requests in flight).

    Called in the lifespan's startup, when uvicorn's own handler is in place (it restores the one
    before it when it stops): the first SIGTERM sets DRAINING (/readyz 503, so a load balancer's
    check takes this worker out) and hands the signal to uvicorn's handler `seconds` later, while
    everything is still answered. A second SIGTERM, or SIGINT, stops at once as before.
    """
    stop = signal.getsignal(signal.SIGTERM)
    if seconds <= 0 or not callable(stop):
        return

    def drain(signum: int, frame: FrameType | None) -> None:
        if DRAINING.is_set():
            stop(signum, frame)
            return
        DRAINING.set()
        log.info("SIGTERM: draining for %g s (/readyz 503), then finishing requests in flight", seconds)
        timer = threading.Timer(seconds, stop, (signum, frame))
        timer.daemon = True
        timer.start()

    with contextlib.suppress(ValueError):  # not the main thread (an app run in-process by a test)
        signal.signal(signal.SIGTERM, drain)
