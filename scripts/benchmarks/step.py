"""What a benchmark step is, and what it is given.

A step is one module with one `STEP = Step(...)`, listed in `STEPS` in scripts/bench.py. Its
`measure` returns a dict of raw numbers (saved under its name, in --json too) or None when it
does not apply; its `report` turns the saved numbers into Markdown tables. Steps run by stage:

- `INDEX`: once per size, in this process, with the size's index open (`size.index`);
- `SERVER`: once per size, after this process has let go of the index (so that a server's PSS
  is its own), with queries drawn from it beforehand (`size.queries`, `size.bodies`);
- `ONCE`: once per run, after all sizes, given the run's `Config` alone.

In each stage, steps run in the order of `STEPS`, which is also the order of the report. A `ONCE`
step whose numbers hold `refused` (one line: why a figure it exists for was not given, e.g. a load
above the core count) makes scripts/bench.py exit 1 with that line after the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from host.catalog.model_index import ModelIndex

from .config import Config

Stage = Literal["index", "server", "once"]
INDEX: Stage = "index"
SERVER: Stage = "server"
ONCE: Stage = "once"
Numbers = dict[str, Any]
Results = dict[str, Any]  # {"command", "machine", "started", "seconds", "sizes": {bits: {step: Numbers}}, step: Numbers}


@dataclass
class Size:
    """One library size under measurement: its synthetic library, served from `folder`."""

    bits: int
    folder: Path
    config: Config
    rng: np.random.Generator  # the size's one random stream: steps draw from it in turn
    opened: ModelIndex | None = None
    queries: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=np.float32))
    bodies: list[bytes] = field(default_factory=list)  # `queries` as POST / bodies (1500 tokens)

    @property
    def index(self) -> ModelIndex:
        """The index, for `INDEX` steps only."""
        if self.opened is None:
            raise RuntimeError("the index is released before the server steps")
        return self.opened


@dataclass(frozen=True)
class Step:
    name: str  # for --steps and the key of its numbers
    about: str  # one line for --help
    stage: Stage
    measure: Callable[[Any], Numbers | None]  # given a Size (INDEX, SERVER) or the Config (ONCE)
    report: Callable[[Results, Config], list[str]]  # Markdown tables, empty when nothing was measured
    unavailable: Callable[[], str | None] = field(default=lambda: None)  # why it cannot run here, if it cannot
