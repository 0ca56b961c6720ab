"""`polymath-host publish SRC DEST`: put a library folder where replicas read it, all or nothing.

In order: every library file is validated (any problem: each is listed, nothing is uploaded, exit
1); with `--compiled` the folder is compiled too; the access file given with `--access` is checked
and its edge edition made (public keys only: access/edge.py), and so is each publisher folder's
access file (host/catalog/scopes.py), always: a folder's keys travel with its libraries. Then the blobs the origin lacks are
uploaded under content-addressed names (a progress bar on a terminal), the library files are
checked unchanged since they were read, and the manifest is written last: replicas switch only
when it changes, so they never see half a publish. Before it, the same manifest goes under its
history name (host/origin/history.py) and, with `--sign`, its signature (host/origin/signatures.py).
`--dry-run` stops before uploading and lists what would change. Without `--access` the access file
published before stays; `--no-access` removes it. A set published signed is not followed by an
unsigned one unless `--unsigned` says so: replicas pinning the key would refuse it.

`--prune` then deletes what none of the last `--keep-sets` sets names, past the `--older-than`
grace period (host/origin/pruning.py), and says what in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from access.edge import edge_edition
from access.errors import AccessConfigError
from host.catalog.generations import compiled_as_they_are, default_cache_dir, load_catalog
from host.catalog.publication import Publication, changes, plan_publication, same_content
from host.catalog.scopes import PUBLISHER_ACCESS_FILE, find_scopes
from host.cli.common import LOCAL_CACHE_DIR, add_setting_options, parse_duration, say
from host.cli.validate import validate_paths
from host.origin import ObjectMissing, Origin, OriginError, open_origin
from host.origin.history import history_key, next_published_at
from host.origin.manifest import (
    MANIFEST_KEY,
    MANIFEST_LIMIT,
    Blob,
    Manifest,
    ManifestError,
    parse_manifest,
    render_manifest,
)
from host.origin.pruning import PruneRefused, plan_prune, prune
from host.origin.publisher_keys import DEFAULT_KEY_FILE, KeyProblem, SigningKey, load_signing_key
from host.origin.signatures import SIGNATURE_LIMIT, manifest_digest, sign_manifest, signature_key, signers

KEEP_SETS = 3
OLDER_THAN = "1d"


@dataclass(frozen=True)
class Published:
    """What an origin holds now: its manifest, that manifest's bytes, and the keys its signature names."""

    manifest: Manifest
    body: bytes
    signed_by: frozenset[str]


def register(commands: Any) -> None:
    publish = commands.add_parser("publish", help="publish a library folder to an origin replicas read", description=(
        "Validate the library files under SRC, upload them (and with --compiled their compiled stores) to DEST under "
        "content-addressed names, then write DEST's manifest.json last. DEST is a folder, file:///PATH, or "
        "s3://BUCKET/PREFIX (endpoint and credentials from the AWS_* variables). Replicas serve it with "
        "serve --libraries s3://... (a folder: file:///PATH, or the https:// URL of a server in front of it)."))
    publish.add_argument("source", type=Path, metavar="SRC", help="a folder of library files (as serve reads it)")
    publish.add_argument("destination", metavar="DEST", help="a folder, file:///PATH or s3://BUCKET/PREFIX")
    publish.add_argument("--compiled", action="store_true",
                         help="also upload the compiled stores (compiling what changed first), so replicas of the "
                              "same store format start without compiling")
    access = publish.add_mutually_exclusive_group()
    access.add_argument("--access", type=Path, metavar="FILE",
                        help="also publish this access file's edge edition: public keys and revocations only")
    access.add_argument("--no-access", action="store_true", help="remove the access file published before")
    publish.add_argument("--issuer-keys", choices=("fetch", "embed"), default="fetch",
                         help="fetch (default): replicas fetch each trusted identity provider's keys themselves; "
                              "embed: fetch them now and publish them in the edge editions (--access FILE's and each "
                              "publisher folder's), for replicas that may not reach the providers (publish again to "
                              "carry a provider's new keys)")
    publish.add_argument("--sign", action="append", nargs="?", const=DEFAULT_KEY_FILE, type=Path, metavar="KEY_FILE",
                         help=f"sign the manifest with this publisher key (default {DEFAULT_KEY_FILE}; make one with "
                              "polymath-host publisher-key init); replicas started with --origin-key and its public key "
                              "serve only sets it signed. Repeat it to sign with two keys during a rotation")
    publish.add_argument("--unsigned", action="store_true",
                         help="publish without --sign over a set that was signed (replicas pinning its key will refuse "
                              "this one: unpin it first)")
    publish.add_argument("--prune", action="store_true",
                         help="then delete the objects that none of the last --keep-sets sets names, once they are past "
                              "the --older-than grace period")
    publish.add_argument("--keep-sets", type=int, default=None, metavar="N",
                         help=f"with --prune: the published sets whose objects are kept (default {KEEP_SETS}; at least 1)")
    publish.add_argument("--older-than", default=None, metavar="DURATION",
                         help=f"with --prune: the grace period (default {OLDER_THAN}): an object is deleted only once it "
                              "was written, and the last set naming it was replaced, longer ago than this, so a replica "
                              "still downloading the set before never loses an object (90s, 15m, 12h, 1d, 2w)")
    publish.add_argument("--dry-run", action="store_true",
                         help="validate and list what would change (and what --prune would delete); change nothing")
    publish.add_argument("--quiet", action="store_true", help="no progress bar")
    add_setting_options(publish, "cache_dir", "max_library_bytes", helps=LOCAL_CACHE_DIR)
    publish.set_defaults(func=publish_command)


def publish_command(args: argparse.Namespace) -> int:
    source: Path = args.source
    if not source.is_dir():
        say(f"error: {source} is not a folder of library files")
        return 1
    pruning = pruning_options(args)
    if isinstance(pruning, str):
        say(f"error: {pruning}")
        return 1
    keys: list[SigningKey] = []
    for path in args.sign or ():
        try:
            keys.append(load_signing_key(path))
        except KeyProblem as problem:
            say(f"error: --sign {problem}")
            return 1
    problems: list[str] = []
    known_good = compiled_as_they_are(source, args.cache_dir)  # checked when they were compiled
    validate_paths([source], args.max_library_bytes, say=lambda line: problems.append(line), known_good=known_good)
    problems = [line for line in problems if ": ok, " not in line]
    access = None
    embed = args.issuer_keys == "embed"
    scopes = find_scopes(source)
    if embed and args.access is None and not scopes:
        say("error: --issuer-keys embed goes with an access file whose trusted issuers' keys are embedded: "
            "--access FILE, or a publisher folder's own")
        return 1
    if args.access is not None:
        try:
            body, notes = edge_edition(args.access, embed_issuer_keys=embed)
            access = (Blob(hashlib.sha256(body).hexdigest(), len(body)), body)
            for note in notes:
                say(f"{args.access}: {note}")
        except FileNotFoundError:
            problems.append(f"{args.access}: does not exist")
        except AccessConfigError as problem:
            problems.append(str(problem))
    publishers = {}
    for folder in scopes:
        path = source / folder / PUBLISHER_ACCESS_FILE
        try:
            body, notes = edge_edition(path, embed_issuer_keys=embed)
        except AccessConfigError as problem:
            problems.append(str(problem))
            continue
        publishers[folder] = (Blob(hashlib.sha256(body).hexdigest(), len(body)), body)
        for note in notes:
            say(f"{path}: {note}")
    if problems:
        return refuse(problems)
    catalog, compiled_dir = None, None
    if args.compiled:
        compiled_dir = args.cache_dir or default_cache_dir(source)
        catalog = load_catalog(source, cache_dir=compiled_dir, max_bytes=args.max_library_bytes, progress=say)
        if catalog.problems:
            return refuse(list(catalog.problems))
    try:
        origin = open_origin(args.destination)
        before = published_state(origin)
        publication = plan_publication(source, catalog=catalog, compiled_dir=compiled_dir, access=access,
                                       publishers=publishers, at_origin=before.manifest if before else None)
        manifest = manifest_to_publish(publication, before, keep_access=args.access is None and not args.no_access)
        status = publish(origin, publication, manifest, before, keys=keys, unsigned=args.unsigned,
                         dry_run=args.dry_run, bar=not args.quiet and sys.stderr.isatty())
    except (OriginError, ManifestError) as problem:
        say(f"error: {problem}")
        say("nothing was published (replicas keep the set published before)")
        return 1
    if status != 0 or pruning is None:
        return status
    pending = manifest if args.dry_run and not unchanged(before, manifest, keys) else None
    try:
        return prune_origin(origin, *pruning, dry_run=args.dry_run, pending=pending)
    except (OriginError, ManifestError, PruneRefused) as problem:
        say(f"error: {problem}")
        say("pruning stopped (the set published is whole: it names no object that was deleted)")
        return 1


def pruning_options(args: argparse.Namespace) -> tuple[int, float, str] | str | None:
    """(keep_sets, grace in seconds, the grace as given) with --prune; None without; a problem as one line."""
    if not args.prune:
        if args.keep_sets is not None or args.older_than is not None:
            return "--keep-sets and --older-than only go with --prune"
        return None
    keep_sets = KEEP_SETS if args.keep_sets is None else args.keep_sets
    if keep_sets < 1:
        return f"--keep-sets {keep_sets}: keep at least 1 set (the one in force is never pruned)"
    given = OLDER_THAN if args.older_than is None else args.older_than
    grace = parse_duration(given)
    if grace is None:
        return f"--older-than {given!r} is not a duration: give a number and a unit, as 90s, 15m, 12h, 1d or 2w (0 for none)"
    return keep_sets, grace, given


def refuse(problems: list[str]) -> int:
    for line in problems:
        say(line)
    say(f"error: {len(problems)} problem(s); nothing was published")
    return 1


def published_state(origin: Origin) -> Published | None:
    """What `origin` holds now (None when nothing is published there)."""
    try:
        fetched = origin.fetch(MANIFEST_KEY, limit=MANIFEST_LIMIT)
    except ObjectMissing:
        return None
    assert fetched is not None  # no ETag was sent
    manifest = parse_manifest(fetched.body, f"{origin.url}/{MANIFEST_KEY}")
    try:
        signature = origin.fetch(signature_key(fetched.body), limit=SIGNATURE_LIMIT)
    except ObjectMissing:
        signature = None
    return Published(manifest, fetched.body, signers(signature.body) if signature is not None else frozenset())


def manifest_to_publish(publication: Publication, before: Published | None, *, keep_access: bool) -> Manifest:
    """The publication's manifest, dated after the one in force, with the access file before kept if asked."""
    manifest = replace(publication.manifest,
                       published_at=next_published_at(before.manifest.published_at if before else None))
    if keep_access and before is not None and before.manifest.access is not None:
        manifest = replace(manifest, access=before.manifest.access)
    return manifest


def publish(origin: Origin, publication: Publication, manifest: Manifest, before: Published | None, *,
            keys: Sequence[SigningKey], unsigned: bool, dry_run: bool, bar: bool) -> int:
    previous = before.manifest if before else None
    if unchanged(before, manifest, keys):
        say(f"{origin.url}: already holds this set; nothing to publish")
        return 0
    if before is not None and before.signed_by and not keys and not unsigned:
        say(f"error: the set at {origin.url} is signed; replicas that pin its key refuse an unsigned one: add --sign "
            "KEY_FILE (or --unsigned to publish unsigned all the same)")
        return 1
    lines = changes(previous, manifest)
    if same_content(previous, manifest):
        lines.append("~ the signature")
    for line in lines:
        say(line)
    present = {blob.sha256 for blob in previous.blobs()} if previous else set()
    missing = [blob for blob in manifest.blobs() if blob.sha256 not in present and not origin.exists(blob.key)]
    total = sum(blob.size for blob in missing)
    signed = f", signed by {', '.join(key.public.short for key in keys)}" if keys else ""
    if dry_run:
        say(f"dry run: would upload {len(missing)} objects ({total:,} bytes) and the manifest{signed} to {origin.url}")
        return 0
    started = time.perf_counter()
    with progress_bar(total, bar) as advance:
        for blob in missing:
            if blob.sha256 in publication.bodies:  # an edge edition, made here
                origin.put(blob.key, publication.bodies[blob.sha256])
                advance(blob.size)
            else:
                origin.upload(blob.key, publication.files[blob.sha256], advance)
    moved = publication.changed_since_read()
    if moved:
        for path in moved:
            say(f"{path}: changed while it was being published")
        say("error: the manifest was not written (replicas keep the set published before); publish again")
        return 1
    write_manifest(origin, render_manifest(manifest), manifest.published_at, keys)
    say(f"published {len(manifest.libraries)} libraries to {origin.url}: {len(missing)} objects "
        f"({total:,} bytes) uploaded in {time.perf_counter() - started:.1f} s, then the manifest{signed}")
    return 0


def unchanged(before: Published | None, manifest: Manifest, keys: Sequence[SigningKey]) -> bool:
    """Whether the origin already holds this set, signed by these keys (or by none asked for)."""
    if before is None or not same_content(before.manifest, manifest):
        return False
    return not keys or before.signed_by == frozenset(key.public.text for key in keys)


def write_manifest(origin: Origin, body: bytes, published_at: str, keys: Sequence[SigningKey]) -> None:
    """The manifest under its history name, its signature, then `manifest.json`: what it needs exists first."""
    origin.put(history_key(published_at, manifest_digest(body)), body)
    if keys:
        origin.put(signature_key(body), sign_manifest(body, keys))
    origin.put(MANIFEST_KEY, body)


def prune_origin(origin: Origin, keep_sets: int, grace: float, given: str, *, dry_run: bool,
                 pending: Manifest | None) -> int:
    """Delete (or, in a dry run, count) what no recent set names; one line saying how much."""
    plan = plan_prune(origin, keep_sets=keep_sets, grace=grace, pending=pending)
    sets = "the last set" if keep_sets == 1 else f"the last {keep_sets} sets"
    kept = f"{len(plan.kept)} ({plan.kept_bytes:,} bytes): named by {sets}, or within the grace period ({given})"
    if dry_run:
        say(f"dry run: pruning {origin.url} would delete {len(plan.doomed)} objects ({plan.doomed_bytes:,} bytes) "
            f"and keep {kept}")
        return 0
    prune(origin, plan)
    say(f"pruned {origin.url}: deleted {len(plan.doomed)} objects ({plan.doomed_bytes:,} bytes); kept {kept}")
    return 0


@contextlib.contextmanager
def progress_bar(total: int, shown: bool) -> Iterator[Callable[[int], object]]:
    """A tqdm bar of bytes on a terminal (when tqdm is installed); else a function that does nothing."""
    try:
        tqdm: Any = importlib.import_module("tqdm").tqdm
    except ImportError:
        shown = False
    if not shown or not total:
        yield lambda moved: None
        return
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="uploading", file=sys.stderr,
              leave=False, dynamic_ncols=True) as bar:
        yield bar.update
