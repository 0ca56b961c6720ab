"""The abuse phase: every hostile actor on its own thread, beside the checked load, all tallied together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from host.service.harness import RunningHost

from .hostile_files import BadFiles
from .hostile_requests import HostileRequests
from .hostile_sockets import HalfBodies, HalfOpenSockets, IdleSockets, SlowReaders
from .server import DropReasons, Limits, LogFollower
from .tally import Tally


class Abuse:
    def __init__(self, server: RunningHost, root: Path, limits: Limits, stop: threading.Event, seed: int) -> None:
        self.tally = Tally()
        drops = DropReasons(server.log_path)
        actors: dict[str, Any] = {
            "idle sockets": IdleSockets(server.port, limits, drops, stop, self.tally, seed + 1),
            "half-sent headers": HalfOpenSockets(server.port, limits, drops, stop, self.tally, seed + 2),
            "half-sent bodies": HalfBodies(server.port, limits, drops, stop, self.tally, seed + 3),
            "slow readers": SlowReaders(server.port, limits, drops, stop, self.tally, seed + 4),
            "hostile requests": HostileRequests(server.url, limits, stop, self.tally, seed + 5),
            "bad files": BadFiles(root, server.url, LogFollower(server.log_path), stop, self.tally, seed + 6),
        }
        self.threads = [threading.Thread(target=self.guarded(actor.run), name=name) for name, actor in actors.items()]

    def guarded(self, run: Callable[[], None]) -> Callable[[], None]:
        """An actor that dies is a failure of the run, not a silent end of its abuse."""
        def guarded_run() -> None:
            try:
                run()
            except Exception as problem:
                self.tally.fail(f"{threading.current_thread().name} stopped: {problem!r}")
        return guarded_run

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=60)
            if thread.is_alive():
                self.tally.fail(f"{thread.name} did not stop within 60 s")
