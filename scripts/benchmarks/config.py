"""The benchmark's command line and the settings of one run, quick or full."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000, "1M": 1_000_000}
COUNT = 1500  # tokens per query, as the brief and the original host's measurements


@dataclass(frozen=True)
class Config:
    """What the options ask for, with the budgets that follow from --quick."""

    quick: bool
    sizes: list[int]  # bits, ascending
    steps: frozenset[str]
    workdir: Path  # synthetic libraries are generated here and reused by the next run
    json: Path | None
    seed: int
    http_seconds: float  # wrk duration per run
    faiss_max: int  # largest size compared with faiss IndexFlatIP
    command: str  # the command line, for the report
    budget: float  # seconds a timing loop may take
    oversamples: tuple[int, ...]  # approximate search pools swept
    encoding_repetitions: int
    compile_sizes: list[int]  # sizes whose JSON file is compiled

    def repetitions(self, bits: int) -> int:
        if self.quick:
            return 100 if bits <= 10_000 else 30 if bits <= 100_000 else 10
        return 400 if bits <= 10_000 else 100 if bits <= 100_000 else 30

    def approximate_queries(self, bits: int) -> int:
        return 100 if self.quick or bits >= 1_000_000 else 200

    @property
    def mid(self) -> int | None:
        """The size the once-only steps (encoding, memory) run at: 100k, or the largest below it."""
        if 100_000 in self.sizes:
            return 100_000
        return max((bits for bits in self.sizes if bits <= 100_000), default=None)


def label(bits: int) -> str:
    return next((name for name, value in SIZES.items() if value == bits), f"{bits:,}")


def parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if part in SIZES:
            sizes.append(SIZES[part])
        else:
            multiplier = {"k": 1_000, "m": 1_000_000}.get(part[-1:].lower(), 1)
            sizes.append(int(float(part[:-1] if multiplier > 1 else part) * multiplier))
    return sorted(set(sizes))


def build_parser(description: str, step_names: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="1k, 10k, 100k with fewer repetitions (< 2 minutes once the libraries exist)")
    parser.add_argument("--sizes",
                        help="comma-separated library sizes, e.g. 1k,10k,100k,1M (default: 1k,10k,100k,1M; --quick: 1k,10k,100k)")
    parser.add_argument("--steps", default=",".join(step_names),
                        help=f"comma-separated steps (default: all): {', '.join(step_names)}")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "polymath-host-bench",
                        help="where synthetic libraries are generated and kept for the next run (default: %(default)s)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also save every raw number to FILE")
    parser.add_argument("--seed", type=int, default=20240611, help="seed of the synthetic libraries and queries")
    parser.add_argument("--http-seconds", type=float, help="wrk duration per run (default 10; --quick 3)")
    parser.add_argument("--faiss-max", type=int, default=100_000,
                        help="largest size compared with faiss IndexFlatIP (it copies the matrix; default %(default)s)")
    return parser


def configure(args: argparse.Namespace, step_names: Sequence[str], command: str) -> Config:
    quick = args.quick
    sizes = parse_sizes(args.sizes or ("1k,10k,100k" if quick else "1k,10k,100k,1M"))
    steps = frozenset(step.strip() for step in args.steps.split(",") if step.strip())
    unknown = steps - set(step_names)
    if unknown:
        raise SystemExit(f"unknown steps: {', '.join(sorted(unknown))}; choose from {', '.join(step_names)}")
    return Config(
        quick=quick, sizes=sizes, steps=steps, workdir=args.workdir, json=args.json, seed=args.seed,
        http_seconds=args.http_seconds or (3.0 if quick else 10.0), faiss_max=args.faiss_max, command=command,
        budget=3.0 if quick else 30.0,
        oversamples=(250, 1000, 4000) if quick else (250, 500, 1000, 2000, 4000, 8000),
        encoding_repetitions=10 if quick else 40,
        compile_sizes=[bits for bits in sizes if bits in ((10_000,) if quick else (10_000, 100_000))],
    )
