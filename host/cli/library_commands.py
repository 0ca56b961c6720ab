"""`polymath-host build` and `validate`: compile library files ahead of time, or check them."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from host.catalog import default_cache_dir, describe_problem, discover, load_catalog
from host.cli.common import add_setting_options, say
from host.library_format import parse_library
from host.store import read_library_file


def register(commands: Any) -> None:
    build = commands.add_parser("build", help="compile libraries to their memory-mapped form", description=(
        "Compile library files (or folders of them) now, so that serve starts without parsing JSON."))
    build.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    add_setting_options(build, "cache_dir", "max_library_bytes")
    build.set_defaults(func=build_command)

    validate = commands.add_parser("validate", help="check library files", description=(
        "Check library files (or folders of them); print one line per problem and exit 1 if there is any."))
    validate.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    add_setting_options(validate, "max_library_bytes")
    validate.set_defaults(func=validate_command)


def build_command(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.paths:
        if not path.exists():
            say(f"error: {path} does not exist")
            failed += 1
            continue
        started = time.perf_counter()
        catalog = load_catalog(path, cache_dir=args.cache_dir or default_cache_dir(path),
                               max_bytes=args.max_library_bytes, progress=say)
        for problem in catalog.problems:
            say(f"error: {problem}")
        failed += len(catalog.problems)
        bits = sum(library.bit_count for library in catalog.libraries)
        say(f"{path}: {len(catalog.libraries)} libraries, {bits:,} bits ready in {time.perf_counter() - started:.2f} s")
    return 1 if failed else 0


def validate_command(args: argparse.Namespace) -> int:
    problems = 0
    for path in args.paths:
        if not path.exists():
            print(f"{path}: does not exist")
            problems += 1
            continue
        for entry in discover(path):
            try:
                library = parse_library(read_library_file(entry.path, args.max_library_bytes),
                                        access_tag=entry.access_tag, consume=True)
            except Exception as problem:  # every file is reported, whatever is wrong with it
                print(f"{entry.path}: {describe_problem(problem)}")
                problems += 1
                continue
            dropped = f", {library.duplicates_dropped} duplicate bits dropped" if library.duplicates_dropped else ""
            print(f"{entry.path}: ok, {len(library.ids)} bits, {library.embedding_model}, "
                  f"dimension {library.dimension}{dropped}")
    return 1 if problems else 0
