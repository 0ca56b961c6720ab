"""Output: progress lines on stderr, number formats, Markdown tables, and the report's header."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .config import label

ROOT = Path(__file__).resolve().parents[2]  # the project, for the commit measured


def say(message: str) -> None:
    """A progress line on stderr (stdout holds only the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    value = seconds * 1000
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def table(title: str, headers: list[str], rows: list[list[Any]], note: str = "", left: int = 1) -> str:
    """A Markdown table, aligned for reading in a terminal: the first `left` columns to the left."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(headers[i]), *(len(row[i]) for row in cells)) if cells else len(headers[i])
              for i in range(len(headers))]
    lines = [f"### {title}", ""]
    lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    lines.append("|" + "|".join(("-" * (w + 1)) + ":" if i >= left else "-" * (w + 2) for i, w in enumerate(widths)) + "|")
    for row in cells:
        lines.append("| " + " | ".join(c.ljust(w) if i < left else c.rjust(w)
                                       for i, (c, w) in enumerate(zip(row, widths))) + " |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def summary(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples)
    return {
        "n": len(values),
        "p50": float(np.percentile(values, 50)),
        "p99": float(np.percentile(values, 99)),
        "mean": float(values.mean()),
        "min": float(values.min()),
    }


def describe_machine() -> dict[str, Any]:
    """CPUs, memory, versions, and the commit measured (with any uncommitted host/ files)."""
    machine: dict[str, Any] = {
        "cpus": os.cpu_count(), "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform()}
    with contextlib.suppress(ImportError):
        import faiss  # type: ignore[import-not-found]
        machine["faiss"] = faiss.__version__
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(ROOT)]
        machine["commit"] = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                           check=False).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--", "host"], capture_output=True, text=True,
                                 check=False).stdout.split("\n")
        machine["uncommitted_host_files"] = [line[3:] for line in changed if line.strip()]
    return machine


def header(results: dict[str, Any]) -> list[str]:
    """The report's first lines: when, the command, the machine and commit, the load during each size."""
    sizes: dict[int, dict[str, Any]] = results["sizes"]
    machine = results["machine"]
    uncommitted = machine.get("uncommitted_host_files")
    out = [f"## polymath-host benchmark ({results['started']}, {results['seconds']:.0f} s)\n",
           f"`{results['command']}` on {machine['cpus']} CPUs, {machine['memory_gib']} GiB, Python {machine['python']}, "
           f"numpy {machine['numpy']}, faiss {machine.get('faiss', 'not installed')}; {machine['platform']}; "
           f"commit {machine.get('commit', '?')}"
           + (f" with uncommitted changes to {', '.join(uncommitted)}" if uncommitted else "")
           + "\n"]
    loads = "; ".join(f"{label(bits)}: {entry['load_average_before'][0]:.1f} -> {entry.get('load_average', ['?'])[0]}"
                      for bits, entry in sizes.items())
    out.append(f"1-minute load average before -> after each size (2 cores; others share the machine): {loads}\n")
    return out
