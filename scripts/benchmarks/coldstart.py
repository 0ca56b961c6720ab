"""Step `coldstart`: spawning `python -m host serve` to its first 200 answer, on an already compiled library."""

from __future__ import annotations

import time

from .config import Config, label
from .report import ms, say, table
from .servers import first_answer, loaded_line, post, spawn_server
from .step import SERVER, Numbers, Results, Size, Step


def measure(size: Size) -> Numbers:
    say(f"{label(size.bits)}: cold start")
    with spawn_server(size.config.workdir, size.folder) as server:
        seconds = first_answer(server, size.bodies[0], timeout=300)
        loaded = loaded_line(server)
        started = time.perf_counter()
        post(server.port, size.bodies[1])
        second = time.perf_counter() - started
    return {"first_answer": seconds, "second_answer": second, "server_says": loaded}


def report(results: Results, config: Config) -> list[str]:
    rows = []
    for bits, entry in results["sizes"].items():
        cold = entry.get("coldstart")
        if cold:
            rows.append([label(bits), f"{cold['first_answer']:.2f}", ms(cold["second_answer"]), cold["server_says"]])
    if not rows:
        return []
    return [table("Cold start: spawn `python -m host serve` to the first 200 answer (compiled library, warm page cache)",
                  ["bits", "first answer s", "next query ms", "server's own line"], rows, left=4)]


STEP = Step("coldstart", "`python -m host serve` to the first 200 answer on an already compiled library", SERVER,
            measure, report)
