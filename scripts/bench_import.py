#!/usr/bin/env python3
"""`polymath-host import` today against the importer before issue 21, in turns, on a quiet machine.

    .venv/bin/python scripts/bench_import.py                   # 300 documents, 2 rounds: before, fp32, int8, ...
    .venv/bin/python scripts/bench_import.py --precisions int8 --rounds 3 --json import.json

The corpus is scripts/benchmarks/importing.py's generator (300 documents: 1,844 chunks of at most
250 tokens). How the sides run and what is recorded: scripts/benchmarks/import_rounds.py. The
report is Markdown on stdout; it ends with the ratios, or, when a 1-minute load average sampled
over the runs exceeded the core count while other processes used a tenth of a core or more, with
one line saying so instead, and the command exits 1 (it stops at the first such run unless
--any-load asks for every round anyway).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.import_rounds import BEFORE_21, Side, alternate, before_tree, report_rounds
from benchmarks.importing import write_corpus
from benchmarks.report import ROOT, say


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=300, help="documents in the corpus (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, in turns (default %(default)s)")
    parser.add_argument("--precisions", default="fp32,int8", help="today's sides (default %(default)s)")
    parser.add_argument("--before", default=BEFORE_21, metavar="COMMIT",
                        help="the importer to compare with (default %(default)s, the last commit before issue 21)")
    parser.add_argument("--before-tree", type=Path, metavar="DIR",
                        help="an existing checkout of --before (default: a git worktree made under --workdir)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "polymath-host-bench",
                        help="where the old checkout and the model graphs are kept (default: %(default)s)")
    parser.add_argument("--any-load", action="store_true",
                        help="run every round however busy the machine is (the ratio is still refused)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also save every run's figures to FILE")
    args = parser.parse_args(arguments)
    precisions = [value.strip() for value in args.precisions.split(",") if value.strip()]
    if not precisions or set(precisions) - {"fp32", "int8"} or args.rounds < 1 or args.documents < 1:
        parser.error(f"--precisions fp32 and/or int8 (got {args.precisions!r}), --rounds and --documents >= 1")
    args.workdir.mkdir(parents=True, exist_ok=True)
    old = args.before_tree.resolve() if args.before_tree else before_tree(args.workdir, args.before)
    sides = [Side("before", old, None),
             *(Side(precision, ROOT, None if precision == "fp32" else precision) for precision in precisions)]
    scratch = Path(tempfile.mkdtemp(prefix="bench-import-rounds-", dir=args.workdir))
    try:
        corpus = scratch / "corpus"
        write_corpus(corpus, args.documents)
        rounds = alternate(sides, corpus, args.documents, scratch, args.workdir / "import-graphs", args.rounds,
                           stop_when_loud=not args.any_load)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("\n".join(report_rounds(rounds, " ".join(["scripts/bench_import.py", *arguments]))))
    if args.json:
        args.json.write_text(json.dumps(rounds.as_json(), indent=2))
        say(f"raw numbers in {args.json}")
    if (refused := rounds.refusal()) is not None:
        print(refused, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
