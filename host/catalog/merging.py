"""Merging segments: few segments per model, and the rows of replaced files dropped, in the background.

A library file that changes is compiled into a segment of its own (host/catalog/plan.py), so a
host that takes edits one at a time gathers small segments, and its large ones keep rows no library
is served from. Each costs a little on every query. As Lucene's tiered merge policy does, segments
of one model and language whose served rows are of the same order of magnitude (a *tier*) are
merged once `TIER_FACTOR` of them gather, and a segment of which more than `MOSTLY_UNSERVED` of the
rows serve no library is written again alone. Both keep the number of segments of a model within
`TIER_FACTOR` a tier (a handful), whatever the number of edits.

A merge reads the served rows of its segments (vectors, records, tags as compiled: nothing is
parsed again) and writes them as a new segment, its libraries in name order. It runs on a thread of
its own, never under the plan's lock: the plan is taken only to switch the merged libraries over,
and only those still served from where the merge read them (a library changed meanwhile keeps its
newer segment). One worker merges at a time (`.merge.lock`); the others see the plan change.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from host.catalog.plan import SEGMENTS, Placed, Plan, new_segment_name, plan_lock, read_plan, write_plan
from host.library.bit_checks import BLOCK, BitBlock
from host.library.format import LibraryHeader
from host.service.allocator import garbage_collector_paused
from host.store.compiled import Segment, decode_record
from host.store.members import details_of
from host.store.writer import StoreWriter

TIER_FACTOR = 4  # segments of one tier merged together once this many gather
MOSTLY_UNSERVED = 0.5  # a segment with more than this share of rows serving no library is written again
MERGING = "merging"  # where a merge builds its segment, in the compiled cache
log = logging.getLogger("polymath_host.catalog")


@dataclass(frozen=True)
class SegmentUse:
    """What the merge policy knows of a segment: its model and language, its rows, those served."""

    name: str
    kind: tuple[str, str]  # (embedding model, language): only segments of one kind merge
    rows: int
    served: int


def merges_due(uses: list[SegmentUse]) -> list[list[str]]:
    """The groups of segments to merge, each into one (see the module docstring)."""
    due: list[list[str]] = []
    tiers: dict[tuple[tuple[str, str], int], list[SegmentUse]] = {}
    for use in sorted(uses, key=lambda use: use.name):
        if use.served < use.rows * (1 - MOSTLY_UNSERVED):
            due.append([use.name])  # mostly rows of files replaced or gone: written again (or dropped)
            continue
        tiers.setdefault((use.kind, tier(use.served)), []).append(use)
    for members in tiers.values():
        if len(members) >= TIER_FACTOR:
            due.append([use.name for use in members])
    return due


def tier(rows: int) -> int:
    """The order of magnitude of a segment's served rows: segments merge with those of their tier."""
    return int(math.log10(max(rows, 1)))


def segment_uses(plan: Plan, segments: Mapping[str, Segment]) -> list[SegmentUse]:
    served: dict[str, int] = {}
    for placed in plan.values():
        segment = segments.get(placed.segment)
        if segment is not None:
            served[placed.segment] = served.get(placed.segment, 0) + segment.members[placed.member].bit_count
    return [SegmentUse(name, (segment.embedding_model, segment.language), segment.bit_count, served.get(name, 0))
            for name, segment in segments.items()]


@contextlib.contextmanager
def merge_lock(cache: Path) -> Iterator[bool]:
    """Whether this worker may merge now (no other is): held while it does."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".merge.lock", "wb") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def merge(cache: Path, group: list[str], segments: Mapping[str, Segment], plan: Plan) -> str | None:
    """Merge the segments named `group` (open in `segments`), serving what `plan` serves from them,
    into a new segment and switch those libraries over in the plan on disk. Returns the new segment's
    name (None when nothing of them is served any more: the plan then simply drops them)."""
    served = sorted((name, placed) for name, placed in plan.items() if placed.segment in group)
    if not served:
        return None
    started = time.perf_counter()
    name = new_segment_name()
    (cache / MERGING).mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{name}.", dir=cache / MERGING))
    try:
        first = segments[served[0][1].segment]
        writer = StoreWriter(building)
        try:
            with garbage_collector_paused():
                for _, placed in served:
                    copy_member(segments[placed.segment], placed.member, writer)
                members = writer.finish(first.embedding_model, first.dimension, first.language, name)
        finally:
            writer.close()
        with plan_lock(cache):
            current = read_plan(cache)
            switched, read_from = 0, dict(served)
            for number, member in enumerate(members):
                before = read_from[member.name]
                if current.get(member.name) == before:  # not changed since the merge read it
                    current[member.name] = Placed(name, number, before.source)
                    switched += 1
            (cache / SEGMENTS).mkdir(parents=True, exist_ok=True)
            building.rename(cache / SEGMENTS / name)
            write_plan(cache, current)
        log.info("merged %d segments (%d libraries, %d bits) into %s in %.1f s", len(group), switched,
                 sum(member.bit_count for member in members), name, time.perf_counter() - started)
        return name
    finally:
        shutil.rmtree(building, ignore_errors=True)


def copy_member(segment: Segment, member: int, writer: StoreWriter) -> None:
    """One member's rows, in its file's order, as compiled (tags scoped already), into `writer`."""
    compiled = segment.members[member]
    rows = segment.member_rows(member)
    writer.begin_member()
    for start in range(0, len(rows), BLOCK):
        block = np.asarray(rows[start : start + BLOCK])
        records = [decode_record(segment.records[segment.record_offsets[row] : segment.record_offsets[row + 1]])
                   for row in block.tolist()]
        tags = [segment.tags[tag] or None for tag in segment.tag_ids[block].tolist()]
        writer.add(BitBlock(np.ascontiguousarray(segment.embeddings[block]), segment.token_counts[block].tolist(),
                            [bytes(bit_id).ljust(32, b"\0") for bit_id in segment.ids[block]],
                            [record["text"] for record in records], [record["info"] for record in records], tags))
    header = LibraryHeader(segment.embedding_model, details_of(compiled), compiled.sort, segment.dimension,
                           compiled.bit_count, 0, segment.language)
    writer.end_member(header, compiled.name, compiled.source, scope=compiled.scope, access_tag=compiled.access_tag)
