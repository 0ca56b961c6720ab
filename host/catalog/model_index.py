"""Every library of one embedding model, addressed by one global row number.

A query is answered from one ModelIndex: its rows are the libraries' stored rows end to end, in
path order. Which rows a caller may see is worked out here once per grant and cached. Clustered
libraries (host/store/clusters.py) store their rows in cluster order: `tie_keys` gives each row's place
in file order, so that equal scores rank as they would in the files, and `clusters` lists every
cluster of every library under the one row numbering.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from host.library.visibility import allowed_tag_ids
from host.store.codes import code_scale, encode
from host.store.compiled import CompiledLibrary


@dataclass(frozen=True)
class ClusterTable:
    """Every cluster of a model's clustered libraries, under the model's row numbering.

    Cluster i holds rows [starts[i], stops[i]) of library `library[i]`, i.e. its local rows
    [starts[i] - offsets[library[i]], ...). Rows of libraries stored without clusters are
    `loose`: an approximate search always scans them (they are small).
    """

    centroids: np.ndarray  # (clusters, dimension) float32
    centroid_codes: np.ndarray  # (clusters, dimension) uint8: the centroids as 8-bit codes (host/store/codes.py)
    centroid_scale: np.ndarray  # (2, dimension) float32: their scale
    starts: np.ndarray  # (clusters,) int64 global rows
    stops: np.ndarray
    library: np.ndarray  # (clusters,) int64: position of the owning library in ModelIndex.libraries
    loose: tuple[tuple[int, int], ...]  # global row ranges of libraries without clusters

    @property
    def count(self) -> int:
        return len(self.starts)

    @cached_property
    def sizes(self) -> np.ndarray:
        sizes: np.ndarray = self.stops - self.starts
        return sizes

    @classmethod
    def build(cls, libraries: tuple[CompiledLibrary, ...], offsets: np.ndarray) -> ClusterTable | None:
        clustered = [position for position, library in enumerate(libraries) if library.cluster_offsets is not None]
        if not clustered:
            return None
        starts, stops, owners, centroids = [], [], [], []
        for position in clustered:
            library = libraries[position]
            assert library.cluster_offsets is not None and library.centroids is not None
            bounds = library.cluster_offsets + offsets[position]
            starts.append(bounds[:-1])
            stops.append(bounds[1:])
            owners.append(np.full(len(bounds) - 1, position, dtype=np.int64))
            centroids.append(library.centroids)
        loose = tuple((int(offsets[position]), int(offsets[position + 1])) for position in range(len(libraries))
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
            library=np.concatenate(owners),
            loose=loose,
        )


@dataclass
class ModelIndex:
    """Every library of one embedding model, addressed by one global row number."""

    model: str
    dimension: int
    libraries: tuple[CompiledLibrary, ...]
    offsets: np.ndarray  # row where each library starts, plus the total
    token_counts: np.ndarray
    tag_ids: np.ndarray  # into `tags`; 0 is public
    tags: tuple[str, ...]
    has_duplicates: bool  # the same bit in two libraries
    tie_keys: np.ndarray | None = None  # each row's position in file order (None: rows are in file order)
    clusters: ClusterTable | None = None  # None: no library is clustered
    _masks: dict[frozenset[str], np.ndarray | None] = field(default_factory=dict, repr=False)
    _cluster_counts: dict[frozenset[str], np.ndarray] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def build(cls, libraries: tuple[CompiledLibrary, ...]) -> ModelIndex:
        """One numbering over `libraries`. A single library's arrays are used as they are (memory maps
        shared by every worker); several are joined once, and only the small per-row arrays (10
        bytes a row), so ten libraries of a million bits open in a fraction of a second."""
        tags: list[str] = [""]
        tag_ids = []
        for library in libraries:
            mapping = np.array([_intern(tags, tag) for tag in library.tags], dtype=np.uint16)
            same = bool(np.array_equal(mapping, np.arange(len(mapping))))
            tag_ids.append(library.tag_ids if same else mapping[library.tag_ids])
        offsets = np.zeros(len(libraries) + 1, dtype=np.int64)
        np.cumsum([library.bit_count for library in libraries], out=offsets[1:])
        tie_keys = None
        if any(library.source_rows is not None for library in libraries):
            keys = np.int32 if offsets[-1] < 2**31 else np.int64
            tie_keys = (libraries[0].source_rows if len(libraries) == 1 else np.concatenate([
                ((np.arange(library.bit_count) if library.source_rows is None else library.source_rows) + start)
                .astype(keys) for library, start in zip(libraries, offsets[:-1].tolist())]))
        return cls(
            model=libraries[0].embedding_model,
            dimension=libraries[0].dimension,
            libraries=libraries,
            offsets=offsets,
            token_counts=_joined([library.token_counts for library in libraries]),
            tag_ids=_joined(tag_ids),
            tags=tuple(tags),
            # One copy per (bit, tag) is kept within a file: two rows share an id only across
            # libraries, or across the tags of one.
            has_duplicates=(len(libraries) > 1 or len(libraries[0].tags) > 1) and _has_duplicates(libraries),
            tie_keys=tie_keys,
            clusters=ClusterTable.build(libraries, offsets),
        )

    @cached_property
    def ids(self) -> np.ndarray:
        """Canonical ids (S32) of every row: joined on first use (a page's bit lookup, duplicates)."""
        return _joined([library.ids for library in self.libraries])

    @property
    def bit_count(self) -> int:
        return int(self.offsets[-1])

    @property
    def float_bytes(self) -> int:
        """Bytes of every library's float32 vectors: what a scan of floats would need in memory."""
        return sum(library.embeddings.nbytes for library in self.libraries)

    @property
    def max_norm(self) -> float:
        return max(library.max_norm for library in self.libraries)

    def locate(self, row: int) -> tuple[CompiledLibrary, int]:
        position = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.libraries[position], row - int(self.offsets[position])

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The embeddings of some global rows, in that order (read in row order from the maps)."""
        if len(self.libraries) == 1:
            gathered: np.ndarray = self.libraries[0].embeddings[rows]
            return gathered
        order = np.argsort(rows)
        gathered = np.empty((len(rows), self.dimension), dtype=np.float32)
        sorted_rows = rows[order]
        bounds = np.searchsorted(sorted_rows, self.offsets)
        for position, library in enumerate(self.libraries):
            start, stop = bounds[position], bounds[position + 1]
            if stop > start:
                gathered[order[start:stop]] = library.embeddings[sorted_rows[start:stop] - self.offsets[position]]
        return gathered

    def cluster_visible_counts(self, granted: frozenset[str]) -> np.ndarray:
        """How many rows of each cluster a caller holding `granted` may see (cached per grant)."""
        assert self.clusters is not None
        key = frozenset(tag for tag in granted if tag in self.tags)
        with self._lock:
            counts = self._cluster_counts.get(key)
        if counts is None:
            counts = visible_counts(self.clusters, self.visible_rows(key))
            with self._lock:
                self._cluster_counts[key] = counts
        return counts

    def visible_count(self, granted: frozenset[str]) -> int:
        mask = self.visible_rows(granted)
        return self.bit_count if mask is None else int(np.count_nonzero(mask))

    def visible_rows(self, granted: frozenset[str]) -> np.ndarray | None:
        """Bool mask of rows a caller holding `granted` tags may see; None means every row."""
        key = frozenset(tag for tag in granted if tag in self.tags)
        with self._lock:
            if key not in self._masks:
                self._masks[key] = self._mask_for(key)
            return self._masks[key]

    def _mask_for(self, granted: frozenset[str]) -> np.ndarray | None:
        allowed = allowed_tag_ids(self.tags, granted)
        if len(allowed) == len(self.tags) and not self.has_duplicates:
            return None
        mask = np.isin(self.tag_ids, allowed)
        if self.has_duplicates:
            # The first copy *this caller may see* wins, so a private copy listed first never
            # hides the public one from a caller without the tag.
            rows = np.flatnonzero(mask)
            _, first = np.unique(self.ids[rows], return_index=True)
            mask = np.zeros(len(mask), dtype=bool)
            mask[rows[first]] = True
        return mask


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


def _has_duplicates(libraries: tuple[CompiledLibrary, ...]) -> bool:
    """Whether two rows share an id. Ids are
    SHA-256 digests: distinct 8-byte prefixes prove distinct ids, so only the prefixes are sorted
    (10M in ~0.2 s) and the full comparison runs only on a prefix collision."""
    heads = np.concatenate([np.sort(np.ascontiguousarray(library.ids).view("<u8")[::4]) if library.id_heads is None
                            else library.id_heads for library in libraries])
    heads.sort(kind="stable")  # sorted runs, one per library: merged, not sorted again
    if not np.any(heads[1:] == heads[:-1]):
        return False
    ids = np.concatenate([library.ids for library in libraries])
    return len(np.unique(ids)) < len(ids)


def _intern(tags: list[str], tag: str) -> int:
    if tag not in tags:
        tags.append(tag)
    return tags.index(tag)
