"""The commands about identity providers: `access trust|untrust|trusted` and `token explain`.

    polymath-host access trust ISSUER_URL --audience AUD [--jwks-uri URL | --jwks-file FILE]
                               [--algorithms LIST] --grant RULE [--grant RULE]... [--last-good-keys 24h]
    polymath-host access untrust ISSUER_URL
    polymath-host access trusted [--json]
    polymath-host token explain TOKEN|-

`access trust` checks everything before it writes: the rules, the algorithms, and the provider's
keys, fetched now as a host would (by OpenID discovery unless a jwks_uri or a JWKS file is given),
so a typo in the issuer, a discovery document naming another issuer, a key set holding a symmetric
key or keys of no allowed algorithm are refused with nothing changed. Trusting an issuer again
replaces its entry. `cli.register` adds these to the `access` and `token` groups; handlers return
the exit code (0 ok, 1 a user error or a token that does not verify).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import files
from .claim_rules import GrantRule, parse_rule
from .config import load_settings, public_only_settings
from .explain import explain
from .fetching import FetchFailed, url_problem
from .issuer_keys import fetch_key_set
from .issuers import DEFAULT_ALGORITHMS, LAST_GOOD_KEYS_SECONDS, MAX_LAST_GOOD_KEYS_SECONDS, check_algorithms
from .jwks import SUPPORTED_ALGORITHMS, JwksRefused, KeySet, parse_jwks

MAX_TOKEN_INPUT = 1 << 20
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class UserError(Exception):
    """A problem the admin can fix; cli reports it as one 'error:' line with exit code 1."""


def register_access(commands: Any, access_option: Any, handler: Any) -> None:
    trust = commands.add_parser(
        "trust",
        help="accept an identity provider's tokens, granting tags by their claims",
        description="Trust the identity provider ISSUER_URL: its tokens (JWTs whose iss is exactly ISSUER_URL and "
        "whose aud holds AUD) are verified with its published keys, and --grant rules turn their claims into "
        "access tags. Its keys are fetched now to check them (by OpenID discovery unless --jwks-uri or --jwks-file "
        "says where they are). Trusting the same issuer again replaces its entry. Running hosts apply it within "
        "seconds.",
        epilog="RULE: CLAIM=VALUE:TAG[,TAG...] (the claim equals VALUE, is a list holding it, or for scope/scp a "
        "space-separated string holding it), CLAIM:TAG[,TAG...] (the claim is true), *:TAG[,TAG...] (any valid "
        "token of this issuer). CLAIM may be a dotted path (app_metadata.tier) or a URL-shaped claim name "
        "(https://example.com/roles). Example: access trust https://example.eu.auth0.com/ --audience "
        "https://library.example.com --grant https://example.com/roles=member:members",
    )
    trust.add_argument("issuer", metavar="ISSUER_URL", help="the provider's issuer, exactly as its tokens' iss says")
    trust.add_argument("--audience", required=True, metavar="AUD",
                       help="the audience its tokens for this host carry in aud (an API identifier, or a client id)")
    keys = trust.add_mutually_exclusive_group()
    keys.add_argument("--jwks-uri", metavar="URL", help="where its keys are (default: from its OpenID discovery "
                                                        "document, ISSUER_URL/.well-known/openid-configuration)")
    keys.add_argument("--jwks-file", type=Path, metavar="FILE",
                      help="its keys from a JWKS file, copied into the access file and never fetched")
    trust.add_argument("--algorithms", default=",".join(DEFAULT_ALGORITHMS), metavar="LIST",
                       help=f"the signing algorithms accepted, separated by commas (default {DEFAULT_ALGORITHMS[0]}; "
                            f"any of {', '.join(SUPPORTED_ALGORITHMS)})")
    trust.add_argument("--grant", dest="grants", action="append", type=_rule, required=True, metavar="RULE",
                       help="a rule from claims to tags; repeat for several (see below)")
    trust.add_argument("--last-good-keys", type=_window, default=None, metavar="DURATION",
                       help="how long the keys fetched last keep verifying while the provider cannot be reached "
                            "(default 24h; from 1m to 30d)")
    access_option(trust)
    trust.set_defaults(func=handler(_trust))

    untrust = commands.add_parser(
        "untrust",
        help="stop accepting an identity provider's tokens",
        description="Remove ISSUER_URL from the trusted issuers: its tokens are refused from then on (running hosts "
        "apply it within seconds).",
    )
    untrust.add_argument("issuer", metavar="ISSUER_URL", help="the issuer, as `access trusted` shows it")
    access_option(untrust)
    untrust.set_defaults(func=handler(_untrust))

    trusted = commands.add_parser(
        "trusted",
        help="list the trusted identity providers",
        description="One line per trusted issuer: its audience, algorithms, where its keys come from and its rules.",
    )
    trusted.add_argument("--json", action="store_true", help="print the entries as JSON")
    access_option(trusted)
    trusted.set_defaults(func=handler(_trusted))


def register_token(commands: Any, access_option: Any, handler: Any) -> None:
    explainer = commands.add_parser(
        "explain",
        help="say what the host makes of a token, without printing it",
        description="Which issuer a token comes from, whether it verifies now (and why not), which rules match "
        "its claims and what it grants; for this file's own tokens, legacy tokens and trusted providers' tokens. "
        "The token is never printed. Exit status 0 if it verifies, 1 if not.",
    )
    explainer.add_argument("token", metavar="TOKEN", help="the token, or - to read it from stdin (keeps it out of "
                                                          "the shell's history)")
    access_option(explainer)
    explainer.set_defaults(func=handler(_explain))


# --- handlers -------------------------------------------------------------------------


def _trust(args: argparse.Namespace) -> int:
    issuer: str = args.issuer
    problem = url_problem(issuer)
    if problem:
        raise UserError(f"ISSUER_URL: {problem}")
    if not args.audience.strip():
        raise UserError("--audience must not be empty")
    algorithms = [name.strip() for name in args.algorithms.split(",") if name.strip()]
    problem = check_algorithms(algorithms)
    if problem:
        raise UserError(f"--algorithms: {problem}")
    if args.jwks_uri is not None and url_problem(args.jwks_uri):
        raise UserError(f"--jwks-uri: {url_problem(args.jwks_uri)}")
    entry: dict[str, Any] = {"issuer": issuer, "audience": args.audience}
    if args.jwks_file is not None:
        document, keys, where = _jwks_file(args.jwks_file)
        entry["jwks"] = document
    else:
        try:
            fetched = fetch_key_set(issuer, args.jwks_uri)
        except (FetchFailed, JwksRefused) as failure:
            raise UserError(f"{issuer}: its keys cannot be used: {failure}; nothing was changed") from None
        keys, where = fetched.keys, f"fetched from {fetched.jwks_uri}"
        if args.jwks_uri is not None:
            entry["jwks_uri"] = args.jwks_uri
    usable = keys.algorithms & set(algorithms)
    if not usable:
        raise UserError(f"{issuer}: its keys ({where}) verify {', '.join(sorted(keys.algorithms))}, none of the "
                        f"algorithms allowed ({', '.join(algorithms)}): add --algorithms "
                        f"{','.join(sorted(keys.algorithms))}; nothing was changed")
    entry["algorithms"] = algorithms
    grants: list[GrantRule] = args.grants
    entry["grants"] = [rule.to_json() for rule in grants]
    if args.last_good_keys is not None and args.last_good_keys != LAST_GOOD_KEYS_SECONDS:
        entry["last_good_keys_seconds"] = args.last_good_keys
    outcome: list[str] = []

    def change(data: dict[str, Any]) -> None:
        entries = data.setdefault("trusted_issuers", [])
        for index, existing in enumerate(entries):
            if existing.get("issuer") == issuer:
                entries[index] = entry
                outcome.append("replaced its entry")
                return
        entries.append(entry)
        outcome.append("added")

    files.update(args.access, change)
    kids = ", ".join(keys.kids)
    _say(f"trusting {issuer} ({outcome[0]}): tokens whose aud holds {args.audience}, signed {'/'.join(algorithms)} "
         f"with its keys ({where}: kid {kids}); {'; '.join(rule.text for rule in grants)}. Running hosts apply it "
         "within seconds")
    for skipped in keys.skipped:
        _say(f"  a key left out: {skipped}")
    return 0


def _untrust(args: argparse.Namespace) -> int:
    def change(data: dict[str, Any]) -> None:
        entries = data.get("trusted_issuers", [])
        kept = [entry for entry in entries if entry.get("issuer") != args.issuer]
        if len(kept) == len(entries):
            known = ", ".join(entry.get("issuer", "?") for entry in entries) or "none"
            raise UserError(f"{args.issuer} is not trusted by {args.access} (trusted: {known})")
        data["trusted_issuers"] = kept

    files.update(args.access, change)
    _say(f"no longer trusting {args.issuer}: its tokens are refused from now on (running hosts apply it within seconds)")
    return 0


def _trusted(args: argparse.Namespace) -> int:
    settings = _settings(args.access)
    if args.json:
        entries = [{"issuer": t.issuer, "audience": t.audience, "algorithms": list(t.algorithms),
                    "keys": t.keys_source, "grants": [rule.text for rule in t.grants],
                    "last_good_keys_seconds": t.last_good_keys_seconds} for t in settings.trusted_issuers]
        print(json.dumps(entries, indent=2, ensure_ascii=False))
        return 0
    if not settings.trusted_issuers:
        print("no trusted issuers (add one: polymath-host access trust ISSUER_URL --audience AUD --grant RULE)")
        return 0
    for t in settings.trusted_issuers:
        rules = "; ".join(rule.text for rule in t.grants) or "no rule (its tokens grant no tag)"
        print(f"{t.issuer}  audience {t.audience}  {'/'.join(t.algorithms)}  keys {t.keys_source}  grants {rules}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    token = sys.stdin.read(MAX_TOKEN_INPUT) if args.token == "-" else args.token
    try:
        settings = load_settings(args.access)
    except FileNotFoundError:
        _say(f"{args.access} does not exist: explaining against no access file (every JWT is refused)")
        settings = public_only_settings(str(args.access))
    result = explain(settings, token)
    for line in result.lines:
        print(line)
    return 0 if result.verifies else 1


# --- helpers --------------------------------------------------------------------------


def _settings(path: Path) -> Any:
    try:
        return load_settings(path)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; create it with `polymath-host access init`") from None


def _jwks_file(path: Path) -> tuple[Any, KeySet, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--jwks-file {path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    try:
        document = json.loads(text)
    except ValueError:
        raise UserError(f"--jwks-file {path}: is not JSON") from None
    try:
        keys = parse_jwks(document, str(path))
    except JwksRefused as refused:
        raise UserError(f"--jwks-file {refused}") from None
    if not keys.keys:
        raise UserError(f"--jwks-file {path}: holds no key this host can verify with ({'; '.join(keys.skipped)})")
    return document, keys, f"from {path}"


def _rule(text: str) -> GrantRule:
    try:
        return parse_rule(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem)) from None


def _window(text: str) -> int:
    number, unit = text[:-1], text[-1:]
    if not number.isdigit() or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90m, 24h or 7d")
    seconds = int(number) * _UNITS[unit]
    if not 60 <= seconds <= MAX_LAST_GOOD_KEYS_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r}: give from 1m to 30d")
    return seconds


def _say(message: str) -> None:
    print(message, file=sys.stderr)

