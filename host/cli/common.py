"""What every command shares: options made from `Settings` fields (one name, one default, one help
text), and messages to the user on stderr."""

from __future__ import annotations

import argparse
import re
import sys
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from host.service.settings import Settings

_TYPES: dict[Any, type] = {int: int, float: float, str: str, Path: Path, Path | None: Path, str | None: str}


# `--cache-dir` of the commands that read a local folder (compile, publish): serve's help also
# speaks of the mirror of a published set, which they never make.
LOCAL_CACHE_DIR = {"cache_dir": "where the compiled segments are kept (default: <the libraries' folder>/.compiled)"}


def add_setting_options(parser: argparse.ArgumentParser, *names: str, helps: dict[str, str] | None = None) -> None:
    """Add `--field-name` for the named Settings fields (all that have option metadata when none are
    named); `helps` replaces some fields' help where a command means less by them than `serve` does."""
    hints = typing.get_type_hints(Settings)
    for item in fields(Settings):
        if (names and item.name not in names) or (not names and not item.metadata):
            continue
        default = item.default if item.default is not MISSING else None
        repeatable = item.metadata.get("repeatable", False)
        parser.add_argument(
            "--" + item.name.replace("_", "-"),
            dest=item.name,
            type=_TYPES[hints[item.name]],
            # A repeated option collects a list (Settings.from_arguments joins it); absent, the default holds.
            action="append" if repeatable else "store",
            default=None if repeatable else default,
            metavar=item.metadata.get("metavar"),
            choices=item.metadata.get("choices"),
            help=(helps or {}).get(item.name, item.metadata["help"]).replace("%(default)s", _shown(default)),
        )


def _shown(default: Any) -> str:
    if isinstance(default, bool) or not isinstance(default, int | float):
        return str(default)
    return f"{default:,}" if isinstance(default, int) else f"{default:g}"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"([0-9]{1,7})([smhdw])|0")


def parse_duration(text: str) -> float | None:
    """'90s', '15m', '12h', '1d', '2w' (or '0') in seconds; None for anything else."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    return float(int(match[1]) * _UNITS[match[2]]) if match[1] else 0.0
