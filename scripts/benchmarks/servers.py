"""A real `polymath-host serve` for the server steps (host.service.harness), and POST / against it."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from host.service.harness import RunningHost, http_status, spawn_host

from .config import COUNT


def query_body(query: np.ndarray, **extra: Any) -> bytes:
    """A JSON POST / body: this query embedding, a 1500-token budget."""
    encoded = base64.b64encode(np.asarray(query, dtype="<f4").tobytes()).decode()
    return json.dumps({"query_embedding": encoded, "count": COUNT, "count_type": "token", **extra}).encode()


def post(port: int, body: bytes, accept: str = "application/json", timeout: float = 120) -> tuple[int, bytes]:
    return http_status(port, "POST", "/", body, {"Content-Type": "application/json", "Accept": accept}, timeout=timeout)


def spawn_server(workdir: Path, libraries: Path, *, workers: int = 1, search: str | None = None,
                 environment: dict[str, str] | None = None) -> RunningHost:
    """`serve` on 127.0.0.1, spawned and not yet answering (use it in a `with` block: it is stopped at the end)."""
    arguments = ["--log-level", "warning", *(["--search", search] if search else [])]
    # cwd=workdir: no access.SECRET.json from the project folder is picked up. Its own session (and so
    # its own CPU-share group under Linux autogroup), as the benchmark's servers always had: the
    # figures stay comparable with earlier runs (see host.service.harness.spawn_host).
    return spawn_host(libraries, *arguments, cwd=workdir, workers=workers, env=environment, own_session=True)


def first_answer(server: RunningHost, body: bytes, timeout: float) -> float:
    """Seconds from the spawn to the first 200 answer to POST / (any other status is an error)."""
    def answered() -> bool:
        status, answer = post(server.port, body, timeout=max(1.0, server.spawned_at + timeout - time.perf_counter()))
        if status != 200:
            raise RuntimeError(f"server answered {status}: {answer[:300]!r}")
        return True
    return server.wait_until(answered, timeout=timeout, interval=0.02, what="answer POST / with 200")


def loaded_line(server: RunningHost) -> str:
    """The server's own `loaded N libraries (...) in S s` line."""
    return next((line for line in server.log().splitlines() if line.startswith("loaded ")), "")
