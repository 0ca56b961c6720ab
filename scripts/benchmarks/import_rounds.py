"""Today's importer against the one before issue 21, run in turns on one corpus, on a machine that
must be quiet enough for the ratio to mean anything.

Each side is a checkout of its own: today's is the checkout this script is in (its compiled
extensions built, as `pip install` builds them); the one before issue 21 is commit BEFORE_21, in a
detached git worktree made under the workdir (it had no compiled extensions). Every run is
`python -m host import CORPUS --out NEW` in a child process started in that checkout, with the
command's own defaults (today's int8: `--embedder-precision int8`), cold (a new output, so no
embeddings cache), its model's graph taken from a cache an untimed warm-up import built. Runs
alternate: A, B, A, B, ... (with int8: before, fp32, int8, before, fp32, int8), so that whatever a
shared machine does over the minutes touches every side alike.

For each run: wall seconds, the child's CPU seconds (user + sys, its own children included, from
wait4), the 1-minute load average before it and the highest sampled while it ran (every second),
and the CPU seconds the rest of the machine used meanwhile (/proc/stat's busy time less the
child's). No ratio is given when a 1-minute load sampled over the runs exceeded the core count
while other processes were at work (a tenth of a core or more): a side measured then measures its
neighbours as much as itself (the 3.65x this replaced came from a baseline run at load 6.3, where
the old importer's one two-thread model run suffered most). The importer alone may lift the load
past the core count on a small machine (its model runs fill every core, and its reading process
and Python threads come on top): that is no neighbour, so it alone refuses nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .report import ROOT, say

BEFORE_21 = "cf63ff1"  # the last commit before issue 21 ("Import at the speed of the hardware"; its first is 9c63dd2)
GRAPH_CACHE_VARIABLE = "POLYMATH_HOST_CACHE_DIR"  # both sides read it (host/embedders/graph_cache.py)
SUMMARY = re.compile(r"(\d+) chunks, .*; embedded (\d+)(?: \((\d+) distinct texts\))?")
OTHERS_AT_WORK = 0.1  # cores: other processes using less while a run lasts leave it alone (quiet: 0.01-0.02)
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


@dataclass(frozen=True)
class Side:
    """One importer under measurement: a checkout and the precision asked of its model."""

    name: str  # "before", "fp32", "int8"
    tree: Path
    precision: str | None  # None: the command's default (fp32; the old importer has no option)

    def command(self, corpus: Path, out: Path) -> list[str]:
        chosen = [] if self.precision is None else ["--embedder-precision", self.precision]
        return [sys.executable, "-m", "host", "import", str(corpus), "--out", str(out), "--base-url",
                "https://example.com/", "--quiet", *chosen]


@dataclass
class Run:
    side: str
    round: int
    seconds: float
    cpu_seconds: float  # the child's user + sys, its children included
    chunks: int
    embedded: int
    load_before: list[float]  # 1, 5, 15 minutes
    load_peak: float  # the highest 1-minute load sampled while it ran
    others_cpu_seconds: float  # CPU the rest of the machine used while it ran


@dataclass
class Rounds:
    """Every run in the order it ran, and what a reader needs to judge them."""

    documents: int
    cores: int
    cpu: dict[str, Any]
    trees: dict[str, str]  # side -> "path at commit"
    runs: list[Run] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)

    def loud(self, run: Run) -> bool:
        """Whether the 1-minute load average went above the core count before or during `run` while other
        processes were at work (a tenth of a core or more). The importer alone can take the load past the
        core count (two model runs on two cores, its reading process, its Python threads: 2.51 on 2
        cores with others at 0.01 of a core); that load is its own and distorts nothing."""
        return (max(run.load_before[0], run.load_peak) > self.cores
                and run.others_cpu_seconds >= OTHERS_AT_WORK * run.seconds)

    def refusal(self) -> str | None:
        """One line saying why no ratio may be reported, or None."""
        loud = [run for run in self.runs if self.loud(run)]
        if not loud:
            return None
        worst = max(loud, key=lambda run: run.others_cpu_seconds / run.seconds)
        return (f"import rounds: no ratio: the 1-minute load average reached {max(worst.load_before[0], worst.load_peak):.2f}"
                f" in run {self.runs.index(worst) + 1} ({worst.side}, round {worst.round}), above the {self.cores} cores, "
                f"while other processes used {worst.others_cpu_seconds / worst.seconds:.2f} of a core; run again when the "
                "machine is quiet (`cat /proc/loadavg`)")

    def ratios(self, side: str) -> list[float]:
        """The before side's seconds over `side`'s, round by round (the pair measured minutes apart)."""
        before = {run.round: run.seconds for run in self.runs if run.side == "before"}
        return [before[run.round] / run.seconds for run in self.runs if run.side == side and run.round in before]

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> Rounds:
        return cls(saved["documents"], saved["cores"], saved["cpu"], saved["trees"],
                   [Run(**run) for run in saved["runs"]], saved["load_after"])

    def as_json(self) -> dict[str, Any]:
        return {"documents": self.documents, "cores": self.cores, "cpu": self.cpu, "trees": self.trees,
                "runs": [asdict(run) for run in self.runs], "load_after": self.load_after,
                "refused": self.refusal(), "ratios": {side: self.ratios(side) for side in ("fp32", "int8")}}


def cpu_description() -> dict[str, Any]:
    """The CPU's model name, and which of the vector instructions int8 matrix products use it has."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    if {"avx512f", "avx512_vnni"} <= flags:
        vector = "AVX-512 with VNNI"
    elif "avx512f" in flags:
        vector = "AVX-512 without VNNI"
    elif {"avx2", "avx_vnni"} <= flags:
        vector = "AVX2 with AVX-VNNI"
    elif "avx2" in flags:
        vector = "AVX2 only"
    else:
        vector = "no AVX2"
    if "amx_int8" in flags:
        vector += ", AMX-INT8"
    return {"model": model, "vector": vector, "flags": sorted(flags & set(CPU_FLAGS))}


def _busy_seconds() -> float:
    """CPU seconds every core has spent on something other than idling or waiting for disks (steal counts)."""
    values = [int(value) for value in Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def commit_of(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    changed = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "host"], capture_output=True,
                             text=True, check=False).stdout.strip()
    return (done.stdout.strip() or "?") + (" with uncommitted host/ changes" if changed else "")


def before_tree(workdir: Path, commit: str = BEFORE_21) -> Path:
    """A checkout of `commit` (a detached git worktree under `workdir`), made the first time."""
    tree = (workdir / f"before-{commit}").resolve()
    if not (tree / "host" / "__main__.py").exists():
        say(f"import rounds: git worktree add --detach {tree} {commit}")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
    return tree


def unbuilt_extensions(tree: Path) -> list[str]:
    """C sources of `tree`'s host package with no compiled module beside them (those steps would run slower)."""
    return [str(source.relative_to(tree)) for source in sorted((tree / "host").rglob("_*.c"))
            if not list(source.parent.glob(f"{source.stem}.*.so"))]


def _sample_loads(ended: threading.Event, loads: list[float]) -> None:
    """The 1-minute load average every second until `ended` (the kernel updates it every 5 s)."""
    while not ended.wait(1.0):
        loads.append(os.getloadavg()[0])


def run_once(side: Side, corpus: Path, out: Path, graphs: Path, round_number: int) -> Run:
    """One import by `side` in a child process; its figures."""
    environment = {**os.environ, "PYTHONPATH": str(side.tree), GRAPH_CACHE_VARIABLE: str(graphs)}
    out.parent.mkdir(parents=True, exist_ok=True)
    load_before = [round(value, 2) for value in os.getloadavg()]
    peak = load_before[0]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        busy, started = _busy_seconds(), time.perf_counter()
        child = subprocess.Popen(side.command(corpus, out), cwd=side.tree, env=environment,
                                 stdout=subprocess.DEVNULL, stderr=errors)
        ended, loads = threading.Event(), [peak]
        sampler = threading.Thread(target=_sample_loads, args=(ended, loads), daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)  # blocks: the wall time is the child's to the millisecond
        seconds, busy = time.perf_counter() - started, _busy_seconds() - busy
        ended.set()
        sampler.join()
        peak = max(loads)
        child.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        said = errors.read()
    if child.returncode != 0:
        raise RuntimeError(f"import rounds: {side.name} ({side.tree}) exited {child.returncode}: {said.strip()[-500:]}")
    summary = SUMMARY.search(said)
    if summary is None:
        raise RuntimeError(f"import rounds: {side.name} printed no summary: {said.strip()[-500:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return Run(side.name, round_number, round(seconds, 2), round(cpu, 2), int(summary.group(1)),
               int(summary.group(3) or summary.group(2)), load_before, round(peak, 2), round(max(0.0, busy - cpu), 1))


def alternate(sides: list[Side], corpus: Path, documents: int, scratch: Path, graphs: Path, rounds: int,
              stop_when_loud: bool = True) -> Rounds:
    """`rounds` rounds of one run per side, in turn; a warm-up import per side first (untimed: it builds
    the model's graph in that side's cache under `graphs`, and reads the checkout's files once). Each
    checkout's graphs are kept apart; today's fp32 and int8 share one cache, as a publisher's do."""
    cores = os.cpu_count() or 1
    result = Rounds(documents, cores, cpu_description(), {side.name: f"{side.tree} at {commit_of(side.tree)}"
                                                          for side in sides})
    for side in sides:
        if missing := unbuilt_extensions(side.tree):
            say(f"import rounds: {side.name}: no compiled module for {', '.join(missing)} (numpy runs those steps)")
    warm = scratch / "warm-up"
    if not warm.exists():
        warm.mkdir(parents=True)
        (warm / "a.md").write_text("# A warm-up\n\nIn the beginning was the word.\n", encoding="utf-8")
    for side in sides:
        say(f"import rounds: warm-up, {side.name}")
        run_once(side, warm, scratch / "out" / f"warm-{side.name}" / "bench.json", graphs / side.tree.name, 0)
    for number in range(1, rounds + 1):
        for side in sides:
            say(f"import rounds: round {number}, {side.name}, {documents} documents (load {os.getloadavg()[0]:.2f})")
            out = scratch / "out" / f"{side.name}-{number}" / "bench.json"
            run = run_once(side, corpus, out, graphs / side.tree.name, number)
            shutil.rmtree(out.parent, ignore_errors=True)
            result.runs.append(run)
            say(f"import rounds: {run.seconds:.1f} s, {run.cpu_seconds:.1f} CPU s, {run.chunks} chunks; load "
                f"{run.load_before[0]:.2f} before, {run.load_peak:.2f} at most; others used {run.others_cpu_seconds:.0f} CPU s")
            if stop_when_loud and result.refusal():
                result.load_after = [round(value, 2) for value in os.getloadavg()]
                return result
    result.load_after = [round(value, 2) for value in os.getloadavg()]
    return result


def report_rounds(rounds: Rounds, command: str) -> list[str]:
    """The runs as a Markdown table, then the ratios, or the one line saying why there are none."""
    cpu = rounds.cpu
    lines = [f"`{command}`: {rounds.documents:,} generated documents, local MiniLM; {rounds.cores} cores, "
             f"{cpu['model']} ({cpu['vector']}: {' '.join(cpu['flags']) or 'none of ' + ' '.join(CPU_FLAGS)})", ""]
    for side, tree in rounds.trees.items():
        lines.append(f"- {side}: {tree}")
    lines += ["", "| run | side | chunks | seconds | CPU s (user+sys) | load before (1, 5, 15 min) | load at most "
              "| others' CPU s |", "|---:|---|---:|---:|---:|---|---:|---:|"]
    for index, run in enumerate(rounds.runs, 1):
        lines.append(f"| {index} | {run.side} | {run.chunks:,} | {run.seconds:.1f} | {run.cpu_seconds:.1f} | "
                     f"{', '.join(f'{value:.2f}' for value in run.load_before)} | {run.load_peak:.2f} | "
                     f"{run.others_cpu_seconds:.1f} |")
    lines += ["", f"Load after the last run: {', '.join(f'{value:.2f}' for value in rounds.load_after)}.", ""]
    if (refused := rounds.refusal()) is not None:
        return [*lines, refused]
    for side in ("fp32", "int8"):
        ratios = rounds.ratios(side)
        if not ratios:
            continue
        cpu_ratio = (sum(run.cpu_seconds for run in rounds.runs if run.side == "before")
                     / sum(run.cpu_seconds for run in rounds.runs if run.side == side))
        lines.append(f"{side} against before issue 21, round by round (wall): "
                     f"{', '.join(f'{ratio:.2f}x' for ratio in ratios)}; CPU seconds over all rounds: {cpu_ratio:.2f}x")
    fp32 = [run.seconds for run in rounds.runs if run.side == "fp32"]
    int8 = [run.seconds for run in rounds.runs if run.side == "int8"]
    if fp32 and int8:
        lines.append(f"int8 against fp32 (today, {cpu['vector']}): {sum(fp32) / sum(int8):.2f}x wall")
    return lines
