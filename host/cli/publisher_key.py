"""`polymath-host publisher-key init | public`: the key that signs published sets.

`init` writes a fresh Ed25519 private key (mode 0600; never over an existing one without `--force`)
and prints its public key on stdout, so `KEY=$(polymath-host publisher-key init)` works;
`public` prints the public key of a key file again. What a replica pins is that line:
`serve --libraries URL --origin-key ed25519:...`. host/origin/publisher_keys.py says why the key
is a file of its own rather than a key of the access file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from host.cli.common import say
from host.origin.publisher_keys import DEFAULT_KEY_FILE, KeyProblem, load_signing_key, new_key_file


def register(commands: Any) -> None:
    group = commands.add_parser("publisher-key", help="make the key that signs published sets", description=(
        "Make and show the publisher key: publish --sign signs a published set's manifest with it, and replicas "
        "started with serve --origin-key and its public key serve only sets it signed."))
    actions = group.add_subparsers(dest="publisher_key_command", metavar="COMMAND", required=True)
    init = actions.add_parser("init", help="create a publisher key; print its public key", description=(
        "Create an Ed25519 publisher key in KEY_FILE (mode 0600) and print its public key (ed25519:...) on stdout: "
        "give that to each replica as --origin-key. Refuses to replace an existing key unless --force is given."))
    _key_option(init)
    init.add_argument("--force", action="store_true",
                      help="replace an existing key (replicas pinning the old one refuse sets signed by the new one)")
    init.set_defaults(func=init_command)
    public = actions.add_parser("public", help="print the public key of a publisher key", description=(
        "Print the public key (ed25519:...) of the publisher key in KEY_FILE: what serve --origin-key pins."))
    _key_option(public)
    public.set_defaults(func=public_command)


def _key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", type=Path, default=DEFAULT_KEY_FILE, metavar="KEY_FILE",
                        help=f"the private key file (default: {DEFAULT_KEY_FILE} in the current directory)")


def init_command(args: argparse.Namespace) -> int:
    path: Path = args.key
    if path.exists() and not args.force:
        say(f"error: {path} already exists; replicas may pin its public key: use --force to replace it "
            "(then pin the new one)")
        return 1
    try:
        if args.force:
            path.unlink(missing_ok=True)
        key = new_key_file(path)
    except OSError as problem:
        say(f"error: {path}: cannot be written ({problem.strerror})")
        return 1
    print(key.public.text)
    say(f"created {path} (mode 0600): keep it secret, sign with publish --sign {path}; "
        f"pin its public key on each replica: serve --origin-key {key.public.text}")
    return 0


def public_command(args: argparse.Namespace) -> int:
    try:
        key = load_signing_key(args.key)
    except KeyProblem as problem:
        say(f"error: {problem}")
        return 1
    print(key.public.text)
    return 0
