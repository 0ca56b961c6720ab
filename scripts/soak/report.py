"""The soak's report: one `name: value` line per figure (nested figures indented), and a JSON copy."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from .admin import Admin
from .sampler import Sampler

MIB = 2**20


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def spread(values: list[float]) -> list[float] | None:
    """Median and maximum, rounded; None for no values."""
    return [round(statistics.median(values), 2), round(max(values), 2)] if values else None


def load_figures(load: dict[str, Any], elapsed: float) -> dict[str, Any]:
    return {
        "load generator": load["generator"],
        "duration s": round(elapsed, 1),
        "requests served": load["requests"],
        "requests per second": round(load["requests"] / (load["duration_us"] / 1e6), 1),
        "errors (failed or wrong answers)": load["errors"],
        "latency p50 / p90 / p99 / max ms": [round(load[key] / 1000, 2)
                                             for key in ("p50_us", "p90_us", "p99_us", "max_us")],
    }


def admin_figures(admin: Admin) -> dict[str, Any]:
    return {
        "tokens issued / revoked by the admin": [admin.issued, admin.revoked],
        "grant seen after (median s, max s)": spread(admin.grant_seconds),
        "revocation seen after (median s, max s)": spread(admin.revoke_seconds),
        "admin failures": admin.failures[:5],
    }


def memory_figures(sampler: Sampler) -> dict[str, Any]:
    first, last = sampler.samples[0], sampler.samples[-1]
    return {
        "memory samples": len(sampler.samples),
        "RSS MiB every 10 samples": [round(rss / MIB) for rss, _ in sampler.samples[::10]],
        "RSS MiB at start / peak / end (server + workers)": [round(first[0] / MIB, 1), round(sampler.peak_rss / MIB, 1),
                                                              round(last[0] / MIB, 1)],
        "PSS MiB at start / peak / end (server + workers)": [round(first[1] / MIB, 1), round(sampler.peak_pss / MIB, 1),
                                                              round(last[1] / MIB, 1)],
    }


def print_report(report: dict[str, Any], indent: str = "") -> None:
    for key, value in report.items():
        if isinstance(value, dict) and value:
            print(f"{indent}{key}:")
            print_report(value, indent + "  ")
        else:
            print(f"{indent}{key}: {value}")


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")
