"""`polymath-host publish SRC DEST`: put a library folder where replicas read it, all or nothing.

In order: every library file is validated (any problem: each is listed, nothing is uploaded, exit
1); with `--compiled` the folder is compiled too; the access file given with `--access` is checked
and its edge edition made (public keys only: access/edge.py). Then the blobs the origin lacks are
uploaded under content-addressed names (a progress bar on a terminal), the library files are
checked unchanged since they were read, and the manifest is written last: replicas switch only
when it changes, so they never see half a publish. `--dry-run` stops before uploading and lists
what would change. Without `--access` the access file published before stays; `--no-access`
removes it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from access.edge import edge_edition
from access.errors import AccessConfigError
from host.catalog.generations import default_cache_dir, load_catalog
from host.catalog.publication import Publication, changes, plan_publication, same_content
from host.cli.common import add_setting_options, say
from host.cli.validate import validate_paths
from host.origin import ObjectMissing, Origin, OriginError, open_origin
from host.origin.manifest import (
    MANIFEST_KEY,
    MANIFEST_LIMIT,
    Blob,
    Manifest,
    ManifestError,
    parse_manifest,
    render_manifest,
)


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
    publish.add_argument("--dry-run", action="store_true", help="validate and list what would change; upload nothing")
    publish.add_argument("--quiet", action="store_true", help="no progress bar")
    add_setting_options(publish, "cache_dir", "max_library_bytes")
    publish.set_defaults(func=publish_command)


def publish_command(args: argparse.Namespace) -> int:
    source: Path = args.source
    if not source.is_dir():
        say(f"error: {source} is not a folder of library files")
        return 1
    problems: list[str] = []
    validate_paths([source], args.max_library_bytes, say=lambda line: problems.append(line))
    problems = [line for line in problems if ": ok, " not in line]
    access = None
    if args.access is not None:
        try:
            body, notes = edge_edition(args.access)
            access = (Blob(hashlib.sha256(body).hexdigest(), len(body)), body)
            for note in notes:
                say(f"{args.access}: {note}")
        except FileNotFoundError:
            problems.append(f"{args.access}: does not exist")
        except AccessConfigError as problem:
            problems.append(str(problem))
    if problems:
        return refuse(problems)
    catalog, compiled_dir = None, None
    if args.compiled:
        compiled_dir = args.cache_dir or default_cache_dir(source)
        catalog = load_catalog(source, cache_dir=compiled_dir, max_bytes=args.max_library_bytes, progress=say)
        if catalog.problems:
            return refuse(list(catalog.problems))
    publication = plan_publication(source, catalog=catalog, compiled_dir=compiled_dir, access=access)
    try:
        origin = open_origin(args.destination)
        before = published_manifest(origin)
        return publish(origin, publication, before, keep_access=args.access is None and not args.no_access,
                       dry_run=args.dry_run, bar=not args.quiet and sys.stderr.isatty())
    except (OriginError, ManifestError) as problem:
        say(f"error: {problem}")
        say("nothing was published (replicas keep the set published before)")
        return 1


def refuse(problems: list[str]) -> int:
    for line in problems:
        say(line)
    say(f"error: {len(problems)} problem(s); nothing was published")
    return 1


def published_manifest(origin: Origin) -> Manifest | None:
    try:
        fetched = origin.fetch(MANIFEST_KEY, limit=MANIFEST_LIMIT)
    except ObjectMissing:
        return None
    assert fetched is not None  # no ETag was sent
    return parse_manifest(fetched.body, f"{origin.url}/{MANIFEST_KEY}")


def publish(origin: Origin, publication: Publication, before: Manifest | None, *, keep_access: bool, dry_run: bool,
            bar: bool) -> int:
    manifest = publication.manifest
    if keep_access and before is not None and before.access is not None:
        manifest = Manifest(manifest.libraries, before.access, manifest.published_at)
    for line in changes(before, manifest):
        say(line)
    if same_content(before, manifest):
        say(f"{origin.url}: already holds this set; nothing to publish")
        return 0
    present = {blob.sha256 for blob in before.blobs()} if before else set()
    missing = [blob for blob in manifest.blobs() if blob.sha256 not in present and not origin.exists(blob.key)]
    total = sum(blob.size for blob in missing)
    if dry_run:
        say(f"dry run: would upload {len(missing)} objects ({total:,} bytes) and the manifest to {origin.url}")
        return 0
    started = time.perf_counter()
    with progress_bar(total, bar) as advance:
        for blob in missing:
            if blob == manifest.access and publication.access_body is not None:
                origin.put(blob.key, publication.access_body)
                advance(blob.size)
            else:
                origin.upload(blob.key, publication.files[blob.sha256], advance)
    moved = publication.changed_since_read()
    if moved:
        for path in moved:
            say(f"{path}: changed while it was being published")
        say("error: the manifest was not written (replicas keep the set published before); publish again")
        return 1
    origin.put(MANIFEST_KEY, render_manifest(manifest))
    say(f"published {len(manifest.libraries)} libraries to {origin.url}: {len(missing)} objects "
        f"({total:,} bytes) uploaded in {time.perf_counter() - started:.1f} s, then the manifest")
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
