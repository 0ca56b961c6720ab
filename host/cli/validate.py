"""`polymath-host validate`: every problem of every library file, one line each.

`validate_paths` is the whole command (the argparse handler only unpacks its arguments): each
path is a library file or a folder of them (found as `serve` finds them, so `.SECRET.` files and
hidden folders are not libraries). A good file gets one "ok" line saying what it holds; a bad one
gets one line per problem (`library_problems`), the first exactly what `serve` would refuse it
with. A path that does not exist or holds no library file is a problem too, so a typo never
passes as "nothing wrong". Returns the exit code: 0 when all is well, 1 otherwise.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from host.catalog.generations import describe_problem, discover
from host.library.bit_checks import BitBlock
from host.library.problems import LibraryFormatError
from host.library.stream import stream_library
from host.store.compiled import DEFAULT_MAX_SOURCE_BYTES


def validate_paths(
    paths: Iterable[Path], max_library_bytes: int = DEFAULT_MAX_SOURCE_BYTES, say: Callable[[str], None] = print,
    known_good: Collection[Path] = frozenset(),
) -> int:
    """Check every library file under `paths`, reporting through `say`; 1 if anything was wrong.
    Files in `known_good` (compiled as they are now: `compiled_as_they_are`) are passed over unread."""
    problems = 0
    for path in paths:
        if not path.exists():
            say(f"{path}: does not exist")
            problems += 1
            continue
        entries = discover(path)
        if not entries:
            say(f"{path}: holds no library file (a library is a .json file, not hidden, without .SECRET. in its name)")
            problems += 1
            continue
        for entry in entries:
            if entry.path in known_good:
                continue
            problems += _validate_file(entry.path, entry.access_tag, max_library_bytes, say)
    return 1 if problems else 0


def _validate_file(path: Path, access_tag: str | None, max_library_bytes: int, say: Callable[[str], None]) -> int:
    """Report one file; returns how many problems it has."""
    try:
        size = path.stat().st_size
        if size > max_library_bytes:
            raise LibraryFormatError(
                f"file is {size:,} bytes, over the {max_library_bytes:,}-byte limit (raise --max-library-bytes)")
        streamed = stream_library(path, _Counted(), access_tag=access_tag)  # as a stream: any size, little memory
    except Exception as problem:  # every file is reported, whatever is wrong with it
        say(f"{path}: {describe_problem(problem)}")
        return 1
    for line in streamed.problems:
        say(f"{path}: {line}")
    library = streamed.header
    if streamed.problems or library is None:
        return max(len(streamed.problems), 1)
    dropped = f", {library.duplicates_dropped} duplicate bits dropped" if library.duplicates_dropped else ""
    bits = library.bits_read - library.duplicates_dropped
    say(f"{path}: ok, {bits} bits, {library.embedding_model}, dimension {library.dimension or 0}{dropped}")
    return 0


class _Counted:
    """Validating keeps nothing of the bits."""

    def add(self, block: BitBlock) -> None:
        pass


def validate_command(args: argparse.Namespace) -> int:
    """The argparse handler: `args.paths` and `args.max_library_bytes`, as `polymath-host validate` parses them."""
    return validate_paths(args.paths, args.max_library_bytes)
