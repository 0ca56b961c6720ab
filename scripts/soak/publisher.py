"""The publisher: replaces, deletes, re-adds and breaks the soak's library files, as a careless one would.

It remembers the last good version of each library (None once deleted): the end-state check and
every answer hold the host to it. Whatever it breaks, it fixes 0.8 s later.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .model import MODEL, PRIVATE, PUBLIC_LIBRARIES, library_file, library_path

# A breakage turns a good file's JSON text (and the decoded file) into the bad text written in its place.
Breakage = Callable[[str, dict[str, Any]], str]

ORDINARY_BREAKAGES: dict[str, Breakage] = {
    "half-written": lambda text, _: text[: len(text) // 2],
    "negative token_count": lambda text, _: text.replace('"token_count": 10', '"token_count": -1', 1),
    "embedding_model null": lambda text, _: text.replace(f'"{MODEL}"', "null"),
    "empty": lambda text, _: "",
}


def write_atomically(path: Path, text: str) -> None:
    """Through a hidden temporary file (never read as a library) and a rename: never seen half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


@dataclass
class Publisher:
    root: Path
    stop: threading.Event
    rng: random.Random
    breakages: dict[str, Breakage] = field(default_factory=lambda: dict(ORDINARY_BREAKAGES))
    version: int = 0
    current: dict[int, int | None] = field(default_factory=dict)  # last good version, None if deleted
    actions: dict[str, int] = field(default_factory=dict)

    def next_version(self) -> int:
        self.version += 1
        return self.version

    def count(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1

    def publish(self, library: int, atomic: bool) -> None:
        version = self.next_version()
        path = library_path(self.root, library)
        content = json.dumps(library_file(library, version))
        if atomic:
            write_atomically(path, content)
        else:  # in place, in pieces: the watcher must wait for it to settle
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as handle:
                for start in range(0, len(content), 4096):
                    handle.write(content[start:start + 4096])
                    handle.flush()
                    time.sleep(0.005)
        self.current[library] = version
        self.count("replace atomically" if atomic else "replace in place")

    def break_file(self, library: int) -> None:
        good = library_file(library, self.next_version())
        name = self.rng.choice(sorted(self.breakages))
        library_path(self.root, library).write_text(self.breakages[name](json.dumps(good), good))
        self.count(f"broken: {name}")
        self.stop.wait(0.8)  # long enough for the watchers to refuse it (the previous version keeps serving)
        self.publish(library, atomic=True)  # and the publisher fixes it

    def run(self) -> None:  # the run has published the first version of every library
        while not self.stop.wait(self.rng.uniform(0.2, 0.6)):
            library = self.rng.choice((*PUBLIC_LIBRARIES, PRIVATE))
            roll = self.rng.random()
            if self.current.get(library) is None:
                self.publish(library, atomic=True)
                self.count("re-add deleted")
            elif roll < 0.15 and library not in (0, PRIVATE):
                library_path(self.root, library).unlink()
                self.current[library] = None
                self.count("delete")
            elif roll < 0.30:
                self.break_file(library)
            elif roll < 0.40:
                junk = self.root / f"junk-{self.version}.json"
                junk.write_text(self.rng.choice(["{", "[]", '{"version": 1}', "not json at all"]))
                self.stop.wait(0.5)
                junk.unlink()
                self.count("junk file added and removed")
            else:
                self.publish(library, atomic=self.rng.random() < 0.5)
