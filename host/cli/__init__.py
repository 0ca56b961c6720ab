"""`polymath-host`: serve, build and validate libraries; `access` and `token` for admins.

Each command lives in its own module with a `register(commands)` that adds its parser.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

import access.cli
import host.importer.cli
from host import MANUAL_URL
from host.cli import library_commands, publish, publisher_key, serve


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    status: int = args.func(args)
    return status


def installed_version() -> str:
    try:
        return version("polymath-host")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polymath-host",
        description="Host Polymath libraries: answer similarity queries over HTTP, with access tokens.",
        epilog=f"The manual: {MANUAL_URL}",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(metavar="COMMAND")
    serve.register(commands)
    library_commands.register(commands)
    publish.register(commands)
    publisher_key.register(commands)
    host.importer.cli.register(commands)
    access.cli.register(commands)
    return parser
