"""The admin commands: `access init|rotate|remove-key` and `token issue|revoke|list` (with
`access trust|untrust|trusted` and `token explain` from issuer_cli.py).

`register(subparsers)` adds them to the host's argparse parser; each leaf command sets
``func`` to a handler returning the exit code: 0 ok, 1 a user error (one line on stderr
starting "error: "), 2 usage errors (argparse's own). `main(argv)` runs them standalone.

`token issue` prints only the token on stdout, so `TOKEN=$(polymath-host token issue bob)`
works; everything meant for the admin goes to stderr. No command ever prints a secret, a
private key or a token other than the one just issued.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import files
from .config import (
    DEFAULT_ISSUER,
    DEFAULT_PRIVATE_ACCESS_TAG,
    AccessSettings,
    IssuedRecord,
    load_settings,
    parse_settings,
)
from .errors import AccessConfigError
from .issuer_cli import UserError, register_access, register_token
from .keys import ALGORITHMS, HS256, generate_key_entry, new_kid
from .tokens import issue_token

DEFAULT_ACCESS_FILE = Path("access.SECRET.json")
DEFAULT_EXPIRES = "30d"

Handler = Callable[[argparse.Namespace], int]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"([1-9][0-9]{0,6})([smhdw])")


def register(subparsers: Any) -> None:
    """Add the `access` and `token` command groups to an argparse subparsers object."""
    access = subparsers.add_parser(
        "access",
        help="create the access file, manage its signing keys and the identity providers it trusts",
        description="Create access.SECRET.json, manage the keys that sign and verify tokens, and the identity "
        "providers whose tokens it accepts.",
    )
    access_commands = access.add_subparsers(dest="access_command", metavar="COMMAND", required=True)

    init = access_commands.add_parser(
        "init",
        help="create the access file with a fresh signing key",
        description="Create the access file with one fresh signing key (mode 0600). "
        "Refuses to replace an existing file unless --force is given.",
    )
    _access_option(init)
    init.add_argument(
        "--issuer",
        default=DEFAULT_ISSUER,
        metavar="URL",
        help=f"the JWT issuer and audience, usually this host's URL (default: {DEFAULT_ISSUER})",
    )
    init.add_argument("--alg", choices=ALGORITHMS, default=HS256, help="key algorithm (default: HS256)")
    init.add_argument(
        "--force",
        action="store_true",
        help="replace an existing file; every token it issued stops working",
    )
    init.set_defaults(func=_handler(_init))

    rotate = access_commands.add_parser(
        "rotate",
        help="add a new signing key; older keys keep verifying",
        description="Add a new key. New tokens are signed with it; tokens signed with older keys "
        "stay valid until those keys are removed with `access remove-key`.",
    )
    _access_option(rotate)
    rotate.add_argument(
        "--alg",
        choices=ALGORITHMS,
        default=HS256,
        help="HS256 (shared secret) or EdDSA/ES256 (replicas can verify with the public key alone; default: HS256)",
    )
    rotate.set_defaults(func=_handler(_rotate))

    remove = access_commands.add_parser(
        "remove-key",
        help="remove a key; tokens signed with it stop working",
        description="Remove the key KID. Tokens it signed are rejected from then on.",
    )
    remove.add_argument("kid", metavar="KID", help="the key id, as shown in the file")
    _access_option(remove)
    remove.set_defaults(func=_handler(_remove_key))
    register_access(access_commands, _access_option, _handler)

    token = subparsers.add_parser(
        "token",
        help="issue, revoke and list access tokens",
        description="Issue, revoke and list the access tokens (JWTs) that grant access tags.",
    )
    token_commands = token.add_subparsers(dest="token_command", metavar="COMMAND", required=True)

    issue = token_commands.add_parser(
        "issue",
        help="print a new signed token for SUBJECT",
        description="Print a new token for SUBJECT on stdout (details go to stderr), e.g. "
        "TOKEN=$(polymath-host token issue bob@example.com --tag unpublished).",
    )
    issue.add_argument("subject", metavar="SUBJECT", help="who the token is for, e.g. an email address")
    issue.add_argument(
        "--tag",
        dest="tags",
        action="append",
        default=[],
        metavar="TAG",
        help="an access tag to grant; repeat for several (default: the file's default_private_access_tag)",
    )
    issue.add_argument(
        "--expires",
        type=parse_lifetime,
        default=DEFAULT_EXPIRES,  # argparse runs string defaults through `type` too
        metavar="LIFETIME",
        help=f"how long the token lasts: 45m, 12h, 30d, 8w, or never (default: {DEFAULT_EXPIRES})",
    )
    _access_option(issue)
    issue.set_defaults(func=_handler(_issue))

    revoke = token_commands.add_parser(
        "revoke",
        help="revoke a token by its jti, or every token of a subject",
        description="Add JTI or SUBJECT to the revoked list. A subject revokes all of its "
        "tokens, including a legacy token of that name. Running hosts apply it within seconds. "
        "Put -- before a value that starts with '-'.",
    )
    revoke.add_argument("target", metavar="JTI|SUBJECT", help="a token id (jti) or a subject")
    _access_option(revoke)
    revoke.set_defaults(func=_handler(_revoke))

    listing = token_commands.add_parser(
        "list",
        help="list issued and legacy tokens (never the tokens themselves)",
        description="List issued tokens (subject, jti, tags, issued, expires, status) and legacy "
        "tokens by name. Secrets and tokens are never printed.",
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _access_option(listing)
    listing.set_defaults(func=_handler(_list))
    register_token(token_commands, _access_option, _handler)


def main(argv: list[str] | None = None) -> int:
    """Run the access commands without the rest of the host (used by tests)."""
    parser = argparse.ArgumentParser(prog="polymath-host")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(subparsers)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def parse_lifetime(text: str) -> int | None:
    """'30d' -> seconds; 'never' -> None. An argparse type, so bad values are usage errors."""
    if text == "never":
        return None
    match = _DURATION.fullmatch(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a lifetime like 45m, 12h, 30d, 8w or never")
    return int(match[1]) * _UNITS[match[2]]


# --- handlers -------------------------------------------------------------------------


def _init(args: argparse.Namespace) -> int:
    path: Path = args.access
    if path.exists() and not args.force:
        raise UserError(f"{path} already exists; use --force to replace it (its tokens will stop working)")
    if not args.issuer.strip():
        raise UserError("--issuer must not be empty")
    entry = generate_key_entry(args.alg, new_kid(set()))
    data: dict[str, Any] = {
        "issuer": args.issuer,
        "keys": [entry],
        "default_private_access_tag": DEFAULT_PRIVATE_ACCESS_TAG,
        "restricted": {"count": False, "message": ""},
        "tokens": {},
        "revoked": [],
        "issued": [],
    }
    files.write_atomically(path, data)
    _say(f"created {path} (mode 0600) with key {entry['kid']} ({args.alg}); keep it secret")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    added: dict[str, str] = {}

    def change(data: dict[str, Any]) -> None:
        keys = data.setdefault("keys", [])
        entry = generate_key_entry(args.alg, new_kid({k["kid"] for k in keys}))
        keys.append(entry)
        added.update(kid=entry["kid"], older=str(len(keys) - 1))

    files.update(args.access, change)
    _say(
        f"added key {added['kid']} ({args.alg}); new tokens are signed with it, "
        f"{added['older']} older key(s) still verify"
    )
    return 0


def _remove_key(args: argparse.Namespace) -> int:
    def change(data: dict[str, Any]) -> None:
        keys = data.get("keys", [])
        kept = [k for k in keys if k.get("kid") != args.kid]
        if len(kept) == len(keys):
            known = ", ".join(k["kid"] for k in keys) or "none"
            raise UserError(f"no key {args.kid!r} in {args.access} (keys: {known})")
        if not kept:
            raise UserError(f"{args.kid} is the only key; run `access rotate` first")
        data["keys"] = kept

    files.update(args.access, change)
    _say(f"removed key {args.kid}; tokens it signed are no longer accepted")
    return 0


def _issue(args: argparse.Namespace) -> int:
    issued: list[str] = []

    def change(data: dict[str, Any]) -> None:
        settings = parse_settings(data, str(args.access))
        try:
            result = issue_token(settings, args.subject, args.tags, args.expires)
        except ValueError as error:
            raise UserError(str(error)) from None
        record = result.record
        data.setdefault("issued", []).append(
            {
                "jti": record.jti,
                "sub": record.subject,
                "access_tags": list(record.access_tags),
                "iat": record.issued_at,
                "exp": record.expires_at,
                "kid": record.kid,
            }
        )
        issued.append(result.token)
        expires = "never expires" if record.expires_at is None else f"expires {_when(record.expires_at)}"
        issued.append(
            f"issued a token for {record.subject}: tags {', '.join(record.access_tags)}; {expires}; "
            f"jti {record.jti}; key {record.kid}"
        )

    files.update(args.access, change)
    # Printed only once the record is safely on disk.
    print(issued[0])
    _say(issued[1])
    return 0


def _revoke(args: argparse.Namespace) -> int:
    target: str = args.target
    if not target.strip():
        raise UserError("nothing to revoke: JTI|SUBJECT is empty")
    outcome: list[str] = []

    def change(data: dict[str, Any]) -> None:
        revoked = data.setdefault("revoked", [])
        settings = parse_settings(data, str(args.access))
        if target in revoked:
            outcome.append(f"{target} was already revoked")
            return
        revoked.append(target)
        outcome.append(f"revoked {target}: {_describe_matches(settings, target)}")

    files.update(args.access, change)
    _say(outcome[0])
    return 0


def _list(args: argparse.Namespace) -> int:
    path: Path = args.access
    try:
        settings = load_settings(path)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; create it with `polymath-host access init`") from None
    now = int(time.time())
    issued = [
        {
            "subject": r.subject,
            "jti": r.jti,
            "access_tags": list(r.access_tags),
            "issued": _when(r.issued_at),
            "expires": "never" if r.expires_at is None else _when(r.expires_at),
            "status": _status(settings, now, r),
        }
        for r in settings.issued
    ]
    legacy = [
        {
            "name": t.name,
            "access_tags": sorted(t.access_tags),
            "description": t.description,
            "status": "revoked" if t.name in settings.revoked else "active",
        }
        for t in settings.legacy_tokens
    ]
    if args.json:
        print(json.dumps({"issued": issued, "legacy": legacy}, indent=2, ensure_ascii=False))
        return 0
    if not issued and not legacy:
        print("no tokens issued yet")
        return 0
    if issued:
        fields = ("subject", "jti", "access_tags", "issued", "expires", "status")
        _table(
            ["SUBJECT", "JTI", "TAGS", "ISSUED", "EXPIRES", "STATUS"],
            [[_cell(row[f]) for f in fields] for row in issued],
        )
    if legacy:
        if issued:
            print()
        print("legacy tokens:")
        legacy_fields = ("name", "access_tags", "status", "description")
        _table(["NAME", "TAGS", "STATUS", "DESCRIPTION"], [[_cell(row[f]) for f in legacy_fields] for row in legacy])
    return 0


# --- helpers --------------------------------------------------------------------------


def _handler(function: Handler) -> Handler:
    """Turn expected failures into one 'error:' line and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return function(args)
        except (UserError, AccessConfigError) as error:
            return _fail(str(error))
        except OSError as error:
            where = f"{error.filename}: " if error.filename else ""
            return _fail(f"{where}{error.strerror or error}")

    run.__doc__ = function.__doc__
    return run


def _access_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--access",
        type=Path,
        default=DEFAULT_ACCESS_FILE,
        metavar="FILE",
        help=f"the access file (default: {DEFAULT_ACCESS_FILE} in the current directory)",
    )


def _describe_matches(settings: AccessSettings, target: str) -> str:
    by_jti = [r for r in settings.issued if r.jti == target]
    by_subject = [r for r in settings.issued if r.subject == target]
    legacy = [t for t in settings.legacy_tokens if t.name == target]
    found = []
    if by_jti:
        found.append(f"the token issued to {by_jti[0].subject}")
    if by_subject:
        found.append(f"{len(by_subject)} token(s) issued to this subject")
    if legacy:
        found.append("the legacy token of this name")
    if not found:
        return "no token recorded here matches it (added anyway: it applies to any token with this jti or subject)"
    return "; ".join(found) + "; running hosts apply this within seconds"


def _status(settings: AccessSettings, now: int, record: IssuedRecord) -> str:
    if record.jti in settings.revoked or record.subject in settings.revoked:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    if settings.key(record.kid) is None:
        return "key removed"
    return "active"


def _when(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _cell(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1
