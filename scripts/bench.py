#!/usr/bin/env python3
"""Benchmark polymath-host against the floor measured in the same run.

The machine this runs on is small (2 cores) and shared, so absolute times drift from run to
run: every host figure is printed next to the numpy floor (`E @ q` + argpartition) measured
on the same memory-mapped matrix in the same run, and the ratio is what to compare.

Synthetic libraries (unit float32, dimension 1536, ~200 clusters, 50-400 tokens per bit) are
written to the compiled form once and reused from --workdir. Queries are perturbed existing
bits, not random vectors (random vectors have no real neighbours: see PERFORMANCE-NOTES).
Progress goes to stderr, tables to stdout, raw numbers to --json FILE.

Install the project and the extras with `pip install -e '.[bench]'` (faiss-cpu) and wrk with
`apt-get update && apt-get install -y wrk`. Every server listens on 127.0.0.1 only.
"""

# This file only runs the steps. Each step is a module of scripts/benchmarks/ with one
# `STEP = Step(name, about, stage, measure, report)` (see benchmarks/step.py); to add one, write
# the module and list its STEP in STEPS below: its place there is its place in the report.

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

import numpy as np
from benchmarks import (
    approximate,
    coldstart,
    compiling,
    concurrency,
    constraints,
    encoding,
    fidelity,
    fixtures,
    http_load,
    http_query,
    importing,
    latency,
    memory,
    peers,
    text_queries,
)
from benchmarks.config import Config, build_parser, configure, label
from benchmarks.libraries import ensure_library, matrix_of, near_queries, open_index, warm
from benchmarks.report import describe_machine, header, say
from benchmarks.servers import query_body
from benchmarks.step import INDEX, ONCE, SERVER, Results, Size, Step

STEPS: list[Step] = [
    latency.STEP,
    approximate.STEP,
    fixtures.STEP,
    encoding.STEP,
    compiling.STEP,
    coldstart.STEP,
    memory.STEP,
    http_load.STEP,
    concurrency.STEP,
    http_query.STEP,
    peers.STEP,
    text_queries.STEP,
    fidelity.STEP,
    importing.STEP,
    constraints.STEP,
]


def steps_help() -> str:
    width = max(len(step.name) for step in STEPS)
    return "Steps (all by default; choose with --steps):\n\n" + "\n".join(
        f"  {step.name.ljust(width)}  {step.about}" for step in STEPS)


def run_size(bits: int, steps: list[Step], config: Config, results: Results) -> None:
    """Every per-size step at one size: the in-process ones, then (the index released) the server ones."""
    size = Size(bits, ensure_library(config.workdir, bits, config.seed), config, np.random.default_rng([config.seed, bits]))
    size.opened = open_index(size.folder, bits)
    say(f"{label(bits)}: warming the page cache")
    warm(matrix_of(size.index))
    entry: dict[str, Any] = {"load_average_before": [round(value, 2) for value in os.getloadavg()]}
    results["sizes"][bits] = entry
    for step in steps:
        if step.stage == INDEX and (numbers := step.measure(size)) is not None:
            entry[step.name] = numbers
    # Servers next: this process lets go of the matrix first, so that it takes no share of the
    # servers' PSS (the page cache stays warm). coldstart takes the first 2 queries, memory the
    # ones between, http the last.
    size.queries = near_queries(matrix_of(size.index), 2 + (20 if config.quick else 60) + 1, size.rng)
    size.bodies = [query_body(query) for query in size.queries]
    size.opened = None
    gc.collect()
    for step in steps:
        if step.stage == SERVER and (numbers := step.measure(size)) is not None:
            entry[step.name] = numbers
    entry["load_average"] = [round(value, 2) for value in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    arguments = argv if argv is not None else sys.argv[1:]
    names = [step.name for step in STEPS]
    parser = build_parser(f"{__doc__}\n{steps_help()}", names)
    config = configure(parser.parse_args(arguments), names, " ".join(["scripts/bench.py", *arguments]))
    run_started = time.perf_counter()
    config.workdir.mkdir(parents=True, exist_ok=True)
    results: Results = {"command": config.command, "machine": describe_machine(), "sizes": {},
                        "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    steps = []
    for step in STEPS:
        if step.name not in config.steps:
            continue
        if (missing := step.unavailable()) is not None:
            say(missing)
            continue
        steps.append(step)
    say(f"sizes {', '.join(label(b) for b in config.sizes)}; steps {', '.join(step.name for step in steps)}; "
        f"workdir {config.workdir}")
    for bits in config.sizes:
        run_size(bits, steps, config, results)
    for step in steps:
        if step.stage == ONCE:
            results[step.name] = step.measure(config)
    results["seconds"] = time.perf_counter() - run_started
    print("\n".join(header(results) + [part for step in STEPS for part in step.report(results, config)]))
    if config.json:
        config.json.write_text(json.dumps(results, indent=2, default=str))
        say(f"raw numbers in {config.json}")
    say(f"done in {results['seconds']:.0f} s")
    refusals = [numbers["refused"] for step in steps if isinstance(numbers := results.get(step.name), dict)
                and numbers.get("refused")]
    for line in refusals:  # a step that would not give a figure on a busy machine (import: its ratio)
        print(line, file=sys.stderr)
    return 1 if refusals else 0


if __name__ == "__main__":
    sys.exit(main())
