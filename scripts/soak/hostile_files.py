"""Hostile library files, and the actor that publishes them: each is one refused file, nothing more.

The classes (issue 13): a `token_count` of 2^31 and of 2^63 (the compiled form holds int32), JSON
nested 5,000 deep, a number of 4,400 digits, embedding values near 3e38 (float32 holds them, dot
products overflow). `BadFiles` takes turns: it replaces `target.json` with one (the log must name
the file and the problem, every worker must keep serving the previous version, and the next good
publication must be served), or drops one in as a new file (named in the log, never listed).
The publisher also breaks the checked libraries with these when abuse is on (publisher.Breakage).
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from .ballast import TARGET, TARGET_TEXT, target_library
from .model import b64
from .publisher import Breakage, write_atomically
from .server import LogFollower
from .tally import Tally

SEEN_WITHIN = 15.0  # seconds for a file to be refused or served (reloads take up to ~2 s under load)


@dataclass(frozen=True)
class Hostile:
    breakage: Breakage
    refusal: str  # what the log line must say about the file


def token_count(value: str) -> Breakage:
    return lambda text, _: text.replace('"token_count": 10', f'"token_count": {value}', 1)


def deep_details(text: str, _: dict[str, Any]) -> str:
    return text.replace('"bits": ', '"details": ' + "[" * 5000 + "]" * 5000 + ', "bits": ', 1)


def huge_values(_: str, data: dict[str, Any]) -> str:
    first = data["bits"][0]
    dimension = len(base64.b64decode(first["embedding"])) // 4
    bits = [{**first, "embedding": b64(np.full(dimension, 3e38, dtype=np.float32))}, *data["bits"][1:]]
    return json.dumps({**data, "bits": bits})


HOSTILE = {
    "token_count 2^31": Hostile(token_count(str(2**31)),
                                "token_count: must be an integer from 0 to 2147483647, got 2147483648"),
    "token_count 2^63": Hostile(token_count(str(2**63)),
                                "token_count: must be an integer from 0 to 2147483647, got 9223372036854775808"),
    "JSON nested 5,000 deep": Hostile(deep_details, "not valid JSON: nested too deeply"),
    "a number of 4,400 digits": Hostile(token_count("7" * 4400), "not valid JSON: a number has more than 4300 digits"),
    "embedding values near 3e38": Hostile(huge_values, "embedding: has a value of magnitude 3e+38"),
}
HOSTILE_BREAKAGES: dict[str, Breakage] = {name: hostile.breakage for name, hostile in HOSTILE.items()}


class BadFiles:
    def __init__(self, root: Path, url: str, log: LogFollower, stop: threading.Event, tally: Tally, seed: int) -> None:
        self.root, self.url, self.log, self.stop, self.tally = root, url, log, stop, tally
        self.rng = random.Random(seed)
        self.target_version = 1  # what ballast.publish_ballast published
        self.new_files = 0

    def run(self) -> None:
        names = sorted(HOSTILE)
        turn = 0
        while not self.stop.wait(self.rng.uniform(0.2, 0.6)):
            name = names[turn % len(names)]
            try:
                if (turn // len(names)) % 2 == 0:
                    self.replace_target(name)
                else:
                    self.add_new_file(name)
            except httpx.HTTPError as problem:
                self.tally.fail(f"bad file {name}: {problem!r}")
            turn += 1

    def refused(self, path: Path, refusal: str, started: float, *, still_serving: bool) -> bool:
        """Wait for the log line that refuses `path` with `refusal`; time it, or note the failure."""
        while time.monotonic() - started < SEEN_WITHIN:
            for line in self.log.new_lines():
                if "library not loaded: " in line and f"/{path.name}: " in line and refusal in line \
                        and still_serving == line.endswith("; still serving its previous version"):
                    self.tally.observe("bad file: refused in the log after (s)", time.monotonic() - started)
                    return True
            time.sleep(0.05)
        self.tally.fail(f"bad file {path.name}: no log line saying {refusal!r} within {SEEN_WITHIN:g} s")
        return False

    def target_versions(self) -> set[str]:
        """The versions of target.json served over several fresh connections (every worker)."""
        served = set()
        for _ in range(6):
            response = httpx.get(f"{self.url}/libraries/{TARGET}.json", timeout=30)
            if response.status_code != 200:
                served.add(f"status {response.status_code}")
                continue
            served |= {match[1] for bit in response.json()["bits"] if (match := TARGET_TEXT.match(bit["text"]))}
        return served

    def replace_target(self, name: str) -> None:
        hostile = HOSTILE[name]
        previous = self.target_version
        path = self.root / f"{TARGET}.json"
        good = target_library(previous + 1)
        started = time.monotonic()
        write_atomically(path, hostile.breakage(json.dumps(good), good))
        if self.refused(path, hostile.refusal, started, still_serving=True):
            served = self.target_versions()
            if served != {str(previous)}:
                self.tally.fail(f"bad file {name}: target served as {sorted(served)} while refused, not {previous}")
            else:
                self.tally.count(f"bad file replaced a library: {name}: refused, previous version served")
        self.target_version = previous + 2  # the refused one keeps its number: versions only go up
        write_atomically(path, json.dumps(target_library(self.target_version)))
        started = time.monotonic()
        while (served := self.target_versions()) != {str(self.target_version)}:
            if time.monotonic() - started > SEEN_WITHIN:
                self.tally.fail(f"bad file {name}: the next good version was not served within {SEEN_WITHIN:g} s "
                                f"(served: {sorted(served)})")
                return
            time.sleep(0.1)
        self.tally.observe("bad file: next good version served after (s)", time.monotonic() - started)

    def add_new_file(self, name: str) -> None:
        hostile = HOSTILE[name]
        self.new_files += 1
        path = self.root / f"hostile-{self.new_files}.json"
        good = target_library(0)
        started = time.monotonic()
        write_atomically(path, hostile.breakage(json.dumps(good), good))
        try:
            if not self.refused(path, hostile.refusal, started, still_serving=False):
                return
            listed = httpx.get(f"{self.url}/libraries", timeout=30).json()["libraries"]
            if any(library["name"] == path.stem for library in listed) \
                    or httpx.get(f"{self.url}/libraries/{path.name}", timeout=30).status_code != 404:
                self.tally.fail(f"bad file {name}: {path.name} is served")
            else:
                self.tally.count(f"bad new file: {name}: refused, not served")
        finally:
            path.unlink()
