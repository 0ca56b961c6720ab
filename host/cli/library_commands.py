"""`polymath-host compile` (also `build`) and `validate`: compile library files ahead of time, or check them."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from host.catalog.generations import default_cache_dir, load_catalog
from host.cli.common import LOCAL_CACHE_DIR, add_setting_options, say
from host.cli.validate import validate_command


def register(commands: Any) -> None:
    # `build` is the command's first name (SPEC §6); `compile` says what it does.
    for name, summary in (("compile", "compile libraries to their memory-mapped form"), ("build", "the same as compile")):
        build = commands.add_parser(name, help=summary, description=(
            "Compile library files (or folders of them) now, so that serve starts without parsing JSON. Files are "
            "read as a stream: memory stays well below the size of their vectors, whatever the size of the file. "
            "A compile longer than two seconds shows how far it is. `compile` and `build` are the same command."))
        build.add_argument("paths", nargs="+", type=Path, metavar="PATH")
        add_setting_options(build, "cache_dir", "max_library_bytes", helps=LOCAL_CACHE_DIR)
        build.set_defaults(func=build_command)

    validate = commands.add_parser("validate", help="check library files", description=(
        "Check library files (or folders of them): print every problem of every file, one line each; "
        "exit 1 if there is any, or if a path holds no library file."))
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
                               max_bytes=args.max_library_bytes, progress=say, bars=True)
        for problem in catalog.problems:
            say(f"error: {problem}")
        failed += len(catalog.problems)
        bits = sum(library.bit_count for library in catalog.libraries)
        say(f"{path}: {len(catalog.libraries)} libraries, {bits:,} bits ready in {time.perf_counter() - started:.2f} s")
    return 1 if failed else 0
