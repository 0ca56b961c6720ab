"""Which segment serves each library file: the plan every worker of a host shares, on disk.

The compiled cache holds segments (host/store/compiled.py), each the rows of one or many library
files, and `plan.json`, which says for each library name the segment and member serving it and the
file it was made from (size, mtime, SHA-256):

    {"format": 2, "libraries": {"essays": {"segment": "018c2e4f9a10-3fa1b2c4", "member": 0,
                                           "source": {"size": 1234, "mtime_ns": ..., "sha256": "..."}}}}

A library file that changes is compiled into a new segment and the plan points at it; its old rows
stay in their segment, served to no one, until a merge (host/catalog/merging.py) writes the
segment's live rows again. So one changed file among ten thousand costs the compile of that file,
not of the others. A segment no library points at is deleted.

The plan is read and written under an exclusive lock on `.plan.lock` (workers start together and
reload together): the first worker to see a change compiles it, the others find the plan up to date
and only open what it names. It is replaced atomically; one that cannot be read is an empty plan
(everything is compiled again), never a reason not to serve.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec

from host.store.members import SourceKey

PLAN_FILE = "plan.json"
REFUSED_FILE = "refused.json"  # the files found bad, as they were then: read again only once they change
SEGMENTS = "segments"  # the folder of segments, in the compiled cache
FORMAT = 2  # 2: each library's source key as one object
log = logging.getLogger("polymath_host.catalog")


class Placed(msgspec.Struct, frozen=True):
    """Where a library is served from, and the file it was made from."""

    segment: str
    member: int
    source: SourceKey


Plan = dict[str, Placed]  # library name -> where it is served from


class _Document(msgspec.Struct):
    format: int
    libraries: dict[str, Placed]


def read_plan(cache: Path) -> Plan:
    """The plan in `cache`; empty when there is none or it cannot be read (said once in the log)."""
    path = cache / PLAN_FILE
    try:
        document = msgspec.json.decode(path.read_bytes(), type=_Document)
        if document.format != FORMAT:
            raise ValueError(f"format {document.format!r}")
        return document.libraries
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, msgspec.DecodeError) as problem:  # a ValidationError is a ValueError
        log.warning("%s: unreadable (%s); compiling every library again", path, problem)
        return {}


class Refused(msgspec.Struct, frozen=True):
    """A library file found bad, as it was then (size and time), and its problem in one line."""

    size: int
    mtime_ns: int
    problem: str

    def matches_stat(self, stat: os.stat_result) -> bool:
        return self.size == stat.st_size and self.mtime_ns == stat.st_mtime_ns


Refusals = dict[str, Refused]  # library name -> why it is not served (in the version of that size and time)


def read_refused(cache: Path) -> Refusals:
    """The files found bad before, so that a worker neither reads nor names one again until it changes."""
    try:
        return msgspec.json.decode((cache / REFUSED_FILE).read_bytes(), type=Refusals)
    except (OSError, ValueError, msgspec.DecodeError):
        return {}


def write_refused(cache: Path, refused: Refusals) -> None:
    _replace(cache / REFUSED_FILE, msgspec.json.encode(dict(sorted(refused.items()))))


def write_plan(cache: Path, plan: Plan) -> None:
    """Replace the plan atomically (synced before the rename: a crash leaves the old one or the new)."""
    _replace(cache / PLAN_FILE, msgspec.json.encode(_Document(FORMAT, dict(sorted(plan.items())))))


def _replace(path: Path, body: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("wb") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


@contextlib.contextmanager
def plan_lock(cache: Path) -> Iterator[None]:
    """Held while a worker reads the plan, compiles what changed and writes it back."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".plan.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def new_segment_name() -> str:
    """A name no other segment has: the time in milliseconds (so names sort by age) and random bits."""
    return f"{time.time_ns() // 1_000_000:012x}-{os.urandom(4).hex()}"


def remove_unplanned(cache: Path, plan: Plan) -> int:
    """Delete the segments no library is served from (a worker still reading one keeps its maps:
    unlinked files stay readable while mapped), under the plan's lock. Returns how many went."""
    folder = cache / SEGMENTS
    if not folder.is_dir():
        return 0
    used = {placed.segment for placed in plan.values()}
    removed = 0
    for path in folder.iterdir():
        if path.name not in used:  # a hidden one is what a compile that died halfway left (none runs now)
            shutil.rmtree(path, ignore_errors=True)
            removed += not path.name.startswith(".")
    return removed
