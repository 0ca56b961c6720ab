"""A real OpenAI-compatible embeddings server for tests: http.server on a free port, in a thread.

It answers `POST .../embeddings` as OpenAI does, with vectors that depend only on the text (not
unit length, so callers' normalisation is exercised) and `usage.prompt_tokens` = words. Tests
script failures by queueing `Reply`s: a status and body, a hang, or a dropped connection. Like a
busy hosted service, it can also throttle and fail on its own: `max_in_flight` answers 429 with
`Retry-After` to a request beyond that many at once, `flaky` fails a seeded share of requests
with 500, 502, 503 or a dropped connection, and `policy` decides a reply from what was asked (a
service that goes down after a while). It records every request (headers, body, and the status
it got) and the most requests it ever served at once.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def raw_vector(text: str, dimension: int) -> np.ndarray:
    """The server's (unnormalised) vector of `text`."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).normal(size=dimension) * 3.0


def unit_vector(text: str, dimension: int) -> np.ndarray:
    vector = raw_vector(text, dimension)
    unit: np.ndarray = (vector / np.linalg.norm(vector)).astype(np.float32)
    return unit


@dataclass
class Reply:
    """One scripted answer; `hang` seconds of silence first; `drop` closes without answering."""

    status: int = 200
    body: bytes | dict[str, Any] | None = None  # None: the normal answer
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0
    drop: bool = False


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int = 0  # what it was answered; 0: the connection was dropped (or not answered yet)


@dataclass
class Flaky:
    """A seeded share of requests fails: half with a 5xx, half with a dropped connection."""

    share: float
    seed: int = 0

    def __post_init__(self) -> None:
        self._chance = random.Random(self.seed)

    def reply(self) -> Reply | None:
        if self._chance.random() >= self.share:
            return None
        if self._chance.random() < 0.5:
            return Reply(drop=True)
        return Reply(self._chance.choice((500, 502, 503)), {"error": {"message": "the service is having a moment"}})


class EmbeddingService:
    def __init__(self, dimension: int = 16, delay: float = 0.0) -> None:
        self.dimension = dimension
        self.delay = delay  # seconds every answer takes
        self.script: deque[Reply] = deque()
        self.requests: list[Seen] = []
        self.usage = True  # report usage.prompt_tokens
        self.encoding = "float"  # or "base64"
        self.shuffle = False  # answer data items in reverse order
        self.max_in_flight: int | None = None  # throttle: 429 beyond this many requests at once
        self.retry_after = "0.05"  # what a throttled request is told
        self.flaky: Flaky | None = None
        self.policy: Callable[[EmbeddingService, Seen], Reply | None] | None = None  # called under the lock
        self.in_flight = 0
        self.most_in_flight = 0
        self.released = threading.Event()  # set at shutdown: ends any hang at once
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reply(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for index, text in enumerate(texts):
            vector = raw_vector(text, self.dimension)
            if self.encoding == "base64":
                import base64

                embedding: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode()
            else:
                embedding = vector.tolist()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        if self.shuffle:
            data.reverse()
        answer: dict[str, Any] = {"object": "list", "data": data, "model": body["model"]}
        if self.usage:
            words = sum(len(text.split()) for text in texts)
            answer["usage"] = {"prompt_tokens": words, "total_tokens": words}
        return answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                seen = Seen(self.path, dict(self.headers), body)
                with service._lock:
                    service.requests.append(seen)
                    reply = service.script.popleft() if service.script else (
                        (service.policy(service, seen) if service.policy else None)
                        or (service.flaky.reply() if service.flaky else None) or Reply())
                    throttled = service.max_in_flight is not None and service.in_flight >= service.max_in_flight
                    if throttled:
                        reply = Reply(429, {"error": {"message": "Rate limit reached: too many requests at once"}},
                                      {"Retry-After": service.retry_after})
                    service.in_flight += 1
                    service.most_in_flight = max(service.most_in_flight, service.in_flight)
                finished = False

                def finish() -> None:  # before the answer goes out: once a client has it, it is not in flight
                    nonlocal finished
                    with service._lock:
                        if not finished:
                            service.in_flight -= 1
                            finished = True

                try:
                    if (service.delay and not throttled) or reply.hang:  # a 429 comes at once
                        service.released.wait(service.delay * (not throttled) + reply.hang)
                    if reply.drop:
                        self.close_connection = True
                        self.connection.close()
                        return
                    if not self.path.endswith("/embeddings"):
                        reply = Reply(404, {"error": {"message": f"no route {self.path}"}})
                    payload = reply.body if reply.body is not None else service.answer(body)
                    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                    finish()
                    seen.status = reply.status
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (a timeout test): nothing to answer
                finally:
                    finish()

        return Handler

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()

    def answered(self) -> list[Seen]:
        """The requests that got their vectors (status 200)."""
        with self._lock:
            return [seen for seen in self.requests if seen.status == 200]


@contextmanager
def running_service(dimension: int = 16, delay: float = 0.0) -> Iterator[EmbeddingService]:
    service = EmbeddingService(dimension, delay)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def wait_until(condition: Any, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
