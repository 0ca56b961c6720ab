"""scripts/bench_import.py gives a ratio only for runs on a quiet machine, and pairs each round's runs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from benchmarks.import_rounds import Rounds, Run, report_rounds

CPU = {"model": "test", "vector": "AVX2 only", "flags": ["avx2"]}


def rounds(loads: list[tuple[float, float, float]]) -> Rounds:
    """Two rounds of before, fp32, int8 with these (load before, load at most, others' CPU seconds), in run order."""
    seconds = {"before": 40.0, "fp32": 40.0, "int8": 20.0}
    runs = [Run(side, number, seconds[side] * number, seconds[side], 1844, 1844, [before, 1.0, 1.0], peak, others)
            for (number, side), (before, peak, others) in zip([(n, s) for n in (1, 2) for s in seconds], loads,
                                                               strict=True)]
    return Rounds(300, 2, CPU, {"before": "old", "fp32": "new", "int8": "new"}, runs, [1.0, 1.0, 1.0])


def test_a_quiet_machine_gets_each_rounds_ratio_even_when_the_importer_itself_lifts_the_load() -> None:
    quiet = rounds([(0.5, 1.6, 0.3)] * 4 + [(1.9, 2.5, 0.3), (0.5, 1.6, 0.3)])
    assert quiet.refusal() is None
    assert quiet.ratios("int8") == [2.0, 2.0]  # round 2's before (80 s) over round 2's int8 (40 s), not round 1's
    assert any(line.startswith("int8 against before issue 21") for line in report_rounds(quiet, "bench"))


def test_a_load_above_the_cores_before_or_during_a_run_with_others_at_work_refuses_the_ratio() -> None:
    for loud in ([(0.5, 1.6, 0.3)] * 4 + [(2.4, 2.4, 20.0), (0.5, 1.6, 0.3)],
                 [(0.5, 1.6, 0.3)] * 2 + [(1.0, 2.1, 4.0)] + [(0.5, 1.6, 0.3)] * 3):
        refused = rounds(loud).refusal()
        assert refused is not None and "above the 2 cores" in refused
        lines = report_rounds(rounds(loud), "bench")
        assert lines[-1] == refused and not any("against before" in line for line in lines)
