"""Every library of one embedding model, addressed by one global row number.

A query is answered from one ModelIndex: its rows are the stored rows of the segments serving the
model's libraries (host/store/compiled.py: a few, however many libraries) end to end. `owners` says
which library each row is served as; a row of a file since replaced or deleted is served as none,
and no grant sees it (its tag id is past the tags) until a merge drops it. Which rows a caller may
see is worked out here once per grant and cached. Clustered segments (host/store/clusters.py) store
their rows in cluster order: `tie_keys` gives each row's place in file order (libraries by name,
each in its file's order), so that equal scores rank as they would in the files, and `clusters`
lists every cluster of every segment under the one row numbering.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from host.catalog.libraries import Library
from host.library.visibility import PUBLIC, allowed_tag_ids
from host.store.codes import code_scale, encode
from host.store.compiled import Segment


@dataclass(frozen=True)
class ClusterTable:
    """Every cluster of a model's clustered libraries, under the model's row numbering.

    Cluster i holds rows [starts[i], stops[i]) of segment `segment[i]`, i.e. its local rows
    [starts[i] - offsets[segment[i]], ...). Rows of segments stored without clusters are
    `loose`: an approximate search always scans them (they are small).
    """

    centroids: np.ndarray  # (clusters, dimension) float32
    centroid_codes: np.ndarray  # (clusters, dimension) uint8: the centroids as 8-bit codes (host/store/codes.py)
    centroid_scale: np.ndarray  # (2, dimension) float32: their scale
    starts: np.ndarray  # (clusters,) int64 global rows
    stops: np.ndarray
    segment: np.ndarray  # (clusters,) int64: position of the owning segment in ModelIndex.segments
    loose: tuple[tuple[int, int], ...]  # global row ranges of segments without clusters

    @property
    def count(self) -> int:
        return len(self.starts)

    @cached_property
    def sizes(self) -> np.ndarray:
        sizes: np.ndarray = self.stops - self.starts
        return sizes

    @classmethod
    def build(cls, segments: tuple[Segment, ...], offsets: np.ndarray) -> ClusterTable | None:
        clustered = [position for position, segment in enumerate(segments) if segment.cluster_offsets is not None]
        if not clustered:
            return None
        starts, stops, owners, centroids = [], [], [], []
        for position in clustered:
            segment = segments[position]
            assert segment.cluster_offsets is not None and segment.centroids is not None
            bounds = segment.cluster_offsets + offsets[position]
            starts.append(bounds[:-1])
            stops.append(bounds[1:])
            owners.append(np.full(len(bounds) - 1, position, dtype=np.int64))
            centroids.append(segment.centroids)
        loose = tuple((int(offsets[position]), int(offsets[position + 1])) for position in range(len(segments))
                      if position not in clustered)
        all_starts, all_stops = np.concatenate(starts).astype(np.int64), np.concatenate(stops).astype(np.int64)
        every_centroid = centroids[0] if len(centroids) == 1 else np.concatenate(centroids)
        scale = code_scale(every_centroid.min(axis=0), every_centroid.max(axis=0))
        return cls(
            centroids=every_centroid,
            centroid_codes=encode(every_centroid, scale),
            centroid_scale=scale,
            starts=all_starts,
            stops=all_stops,
            segment=np.concatenate(owners),
            loose=loose,
        )


@dataclass
class ModelIndex:
    """Every library of one embedding model, addressed by one global row number."""

    model: str
    dimension: int
    segments: tuple[Segment, ...]  # where the rows are: segment i holds rows [offsets[i], offsets[i + 1])
    offsets: np.ndarray  # row where each segment starts, plus the total
    libraries: tuple[Library, ...]  # the libraries served, by name
    owners: np.ndarray  # int32 per row: its library's position in `libraries`; -1 for a row no library serves
    token_counts: np.ndarray
    tag_ids: np.ndarray  # into `tags`; 0 is public; len(tags) for a row no library serves (no grant sees it)
    tags: tuple[str, ...]
    has_duplicates: bool  # the same bit in two libraries, or twice in one under two tags
    shared_rows: np.ndarray | None = None  # with duplicates: the rows whose id another row may share
    tie_keys: np.ndarray | None = None  # each row's rank in file order (None: rows are in file order)
    clusters: ClusterTable | None = None  # None: no segment is clustered
    has_unserved: bool = False  # rows of files replaced or gone, until a merge drops them (host/catalog/merging.py)
    _masks: dict[tuple[int, ...], np.ndarray | None] = field(default_factory=dict, repr=False)
    _cluster_counts: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def build(cls, libraries: tuple[Library, ...]) -> ModelIndex:
        """One numbering over the segments serving `libraries` (one model's, by name). A single segment's
        arrays are used as they are (memory maps shared by every worker); several are joined once, and
        only the small per-row arrays (a few bytes a row), so a new generation opens in a fraction of a
        second whatever the number of libraries."""
        segments = tuple(sorted({library.segment.name: library.segment for library in libraries if library.bit_count}
                                .values(), key=lambda segment: segment.name))
        position = {library.name: at for at, library in enumerate(libraries)}
        offsets = np.zeros(len(segments) + 1, dtype=np.int64)
        np.cumsum([segment.bit_count for segment in segments], out=offsets[1:])
        owners = [_owners(segment, libraries, position) for segment in segments]
        numbers = {PUBLIC: 0}  # every tag of the model: a number each, in order of first sight
        tag_ids = []
        for segment in segments:
            mapping = np.array([numbers.setdefault(tag, len(numbers)) for tag in segment.tags], dtype=np.uint32)
            same = bool(np.array_equal(mapping, np.arange(len(mapping))))
            tag_ids.append(segment.tag_ids if same else mapping[segment.tag_ids])
        tags = list(numbers)
        unserved = any(bool(np.any(mine < 0)) for mine in owners)
        wide = np.uint16 if len(tags) < np.iinfo(np.uint16).max else np.uint32  # room for the unserved rows' id
        tag_ids = [np.where(mine < 0, len(tags), ids).astype(wide) if unserved else ids.astype(wide, copy=False)
                   for mine, ids in zip(owners, tag_ids)]
        joined_owners = _joined(owners) if owners else np.zeros(0, np.int32)
        tie_keys = _tie_keys(segments, libraries, joined_owners)
        shared = _shared_rows(segments, joined_owners, unserved, len(libraries) > 1 or len(tags) > 1)
        return cls(
            model=libraries[0].embedding_model,
            dimension=segments[0].dimension if segments else 0,
            segments=segments,
            offsets=offsets,
            libraries=libraries,
            owners=joined_owners,
            token_counts=_joined([segment.token_counts for segment in segments]) if segments else np.zeros(0, np.int32),
            tag_ids=_joined(tag_ids) if segments else np.zeros(0, np.uint16),
            tags=tuple(tags),
            has_duplicates=shared is not None,
            shared_rows=shared,
            tie_keys=tie_keys,
            clusters=ClusterTable.build(segments, offsets),
            has_unserved=unserved,
        )

    @classmethod
    def of_segments(cls, segments: tuple[Segment, ...]) -> ModelIndex:
        """Every member of `segments` served as a library of its own name (tests, benchmarks)."""
        libraries = tuple(Library(member.name, Path(f"{member.name}.json"), segment, number, member.source)
                          for segment in segments for number, member in enumerate(segment.members))
        return cls.build(tuple(sorted(libraries, key=lambda library: library.name)))

    @cached_property
    def ids(self) -> np.ndarray:
        """Canonical ids (S32) of every row: joined on first use (a page's bit lookup, duplicates)."""
        return _joined([segment.ids for segment in self.segments])

    @property
    def bit_count(self) -> int:
        return int(self.offsets[-1])

    @property
    def float_bytes(self) -> int:
        """Bytes of every segment's float32 vectors: what a scan of floats would need in memory."""
        return sum(segment.embeddings.nbytes for segment in self.segments)

    @cached_property
    def max_norm(self) -> float:
        return max((segment.max_norm for segment in self.segments), default=1.0)

    def locate(self, row: int) -> tuple[Segment, int]:
        """The segment holding a global row, and the row there."""
        position = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.segments[position], row - int(self.offsets[position])

    @cached_property
    def library_names(self) -> list[str]:
        return [library.name for library in self.libraries]

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {library.name: at for at, library in enumerate(self.libraries)}

    def positions_of(self, names: Iterable[str]) -> list[int]:
        """The positions in `libraries` of those of `names` this model serves."""
        positions = self._positions
        return sorted(positions[name] for name in names if name in positions)

    def library_of(self, row: int) -> Library:
        """The library a global row is served as (only ever asked of rows a caller may see: served ones)."""
        return self.libraries[int(self.owners[row])]

    def library_rows(self, positions: list[int]) -> np.ndarray:
        """The global rows of the libraries at `positions` in `libraries` (unsorted)."""
        numbers = {segment.name: number for number, segment in enumerate(self.segments)}
        parts = [self.libraries[at].rows() + self.offsets[numbers[self.libraries[at].segment.name]]
                 for at in positions if self.libraries[at].bit_count]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The embeddings of some global rows, in that order (read in row order from the maps)."""
        if len(self.segments) == 1:
            gathered: np.ndarray = self.segments[0].embeddings[rows]
            return gathered
        order = np.argsort(rows)
        gathered = np.empty((len(rows), self.dimension), dtype=np.float32)
        sorted_rows = rows[order]
        bounds = np.searchsorted(sorted_rows, self.offsets)
        for position, segment in enumerate(self.segments):
            start, stop = bounds[position], bounds[position + 1]
            if stop > start:
                gathered[order[start:stop]] = segment.embeddings[sorted_rows[start:stop] - self.offsets[position]]
        return gathered

    def cluster_visible_counts(self, granted: frozenset[str]) -> np.ndarray:
        """How many rows of each cluster a caller holding `granted` may see (cached per grant)."""
        assert self.clusters is not None
        key = self.grant_key(granted)
        with self._lock:
            counts = self._cluster_counts.get(key)
        if counts is None:
            counts = visible_counts(self.clusters, self.visible_rows(granted))
            with self._lock:
                self._cluster_counts[key] = counts
        return counts

    def visible_count(self, granted: frozenset[str]) -> int:
        mask = self.visible_rows(granted)
        return self.bit_count if mask is None else int(np.count_nonzero(mask))

    def grant_key(self, granted: frozenset[str]) -> tuple[int, ...]:
        """The tag ids a caller holding `granted` may see: what their masks are cached by."""
        return tuple(allowed_tag_ids(self.tags, granted))

    def visible_rows(self, granted: frozenset[str]) -> np.ndarray | None:
        """Bool mask of rows a caller holding `granted` tags may see; None means every row."""
        key = self.grant_key(granted)
        with self._lock:
            if key not in self._masks:
                self._masks[key] = self._mask_for(key)
            return self._masks[key]

    def _mask_for(self, allowed: tuple[int, ...]) -> np.ndarray | None:
        if len(allowed) == len(self.tags) and not self.has_duplicates and not self.has_unserved:
            return None
        mask = np.isin(self.tag_ids, allowed)
        if self.has_duplicates:
            # The first copy *this caller may see* wins (first in file order, libraries by name), so a
            # private copy listed first never hides the public one from a caller without the tag.
            assert self.shared_rows is not None
            rows = self.shared_rows[mask[self.shared_rows]]
            if self.tie_keys is not None:
                rows = rows[np.argsort(self.tie_keys[rows], kind="stable")]
            _, first = np.unique(self.ids[rows], return_index=True)
            mask[rows] = False
            mask[rows[first]] = True
        return mask


def _owners(segment: Segment, libraries: tuple[Library, ...], position: dict[str, int]) -> np.ndarray:
    """Each row of `segment`: the position in `libraries` of the library it serves, or -1."""
    by_member = np.full(len(segment.members), -1, dtype=np.int32)
    for number, member in enumerate(segment.members):
        at = position.get(member.name)
        if at is not None and libraries[at].segment is segment and libraries[at].member == number:
            by_member[number] = at
    owners: np.ndarray = by_member[segment.owners] if len(segment.members) > 1 else np.full(
        segment.bit_count, by_member[0], dtype=np.int32)
    return owners


def _tie_keys(segments: tuple[Segment, ...], libraries: tuple[Library, ...], owners: np.ndarray) -> np.ndarray | None:
    """Each row's rank in file order over the whole model (libraries by name, each in its file's
    order; rows no library serves last), or None where that is the row order already."""
    rows = len(owners)
    if not rows:
        return None
    starts = np.zeros(len(libraries) + 1, dtype=np.int64)
    np.cumsum([library.bit_count for library in libraries], out=starts[1:])
    within = []
    for segment in segments:
        file_rows = np.arange(segment.bit_count) if segment.source_rows is None else segment.source_rows
        firsts = np.array([member.first for member in segment.members], dtype=np.int64)
        within.append(file_rows - firsts[segment.owners] if len(segment.members) > 1 else file_rows)
    keys = starts[np.maximum(owners, 0)] + _joined(within)
    unserved = owners < 0
    if np.any(unserved):
        keys[unserved] = starts[-1] + np.arange(int(np.count_nonzero(unserved)))
    if np.array_equal(keys, np.arange(rows)):
        return None
    ranks: np.ndarray = keys.astype(np.int32 if rows < 2**31 else np.int64)
    return ranks


def _shared_rows(segments: tuple[Segment, ...], owners: np.ndarray, unserved: bool, may_share: bool) -> np.ndarray | None:
    """The served rows whose id another served row may share (the same 8-byte head); None when no
    two do. Ids are SHA-256 digests: distinct heads prove distinct ids, so only heads are compared,
    and the segments' sorted heads are merged, not sorted again (10M in ~0.2 s). A replaced file's
    rows share most heads with its new version's: those pairs are dropped where one side is not served."""
    if not may_share or not len(owners):
        return None
    heads = np.concatenate([segment.id_heads if segment.id_heads is not None
                            else np.sort(np.ascontiguousarray(segment.ids).view("<u8")[::4]) for segment in segments])
    heads.sort(kind="stable")  # sorted runs, one per segment: merged, not sorted again
    repeated = np.unique(heads[1:][heads[1:] == heads[:-1]])
    if not len(repeated):
        return None
    every = _joined([np.ascontiguousarray(segment.ids).view("<u8")[::4] for segment in segments])
    among = _among(every, repeated)
    candidates = np.flatnonzero(among & (owners >= 0) if unserved else among)
    values, counts = np.unique(every[candidates], return_counts=True)
    shared: np.ndarray = candidates[_among(every[candidates], values[counts > 1])]
    return shared if len(shared) else None


def _among(values: np.ndarray, few: np.ndarray) -> np.ndarray:
    """Which of `values` are in `few` (sorted, and few): a binary search each, not a sort of them all."""
    if not len(few):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(few, values), len(few) - 1)
    found: np.ndarray = few[at] == values
    return found


def visible_counts(clusters: ClusterTable, mask: np.ndarray | None) -> np.ndarray:
    """Rows of each cluster that `mask` allows (None allows every row)."""
    if mask is None:
        return clusters.sizes
    running = np.zeros(len(mask) + 1, dtype=np.int64)
    np.cumsum(mask, out=running[1:])
    counts: np.ndarray = running[clusters.stops] - running[clusters.starts]
    return counts


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
