"""Every library of one embedding model, addressed by one global row number.

A query is answered from one ModelIndex: its rows are the libraries' rows end to end, in path
order. Which rows a caller may see is worked out here once per grant and cached.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from host.store import CompiledLibrary
from host.visibility import allowed_tag_ids


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
    ids: np.ndarray  # canonical ids (S32) of every row
    has_duplicates: bool  # the same bit in two libraries
    _masks: dict[frozenset[str], np.ndarray | None] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def build(cls, libraries: tuple[CompiledLibrary, ...]) -> ModelIndex:
        tags: list[str] = [""]
        tag_ids = []
        for library in libraries:
            mapping = np.array([_intern(tags, tag) for tag in library.tags], dtype=np.uint16)
            tag_ids.append(mapping[library.tag_ids])
        offsets = np.zeros(len(libraries) + 1, dtype=np.int64)
        np.cumsum([library.bit_count for library in libraries], out=offsets[1:])
        ids = np.concatenate([library.ids for library in libraries])
        return cls(
            model=libraries[0].embedding_model,
            dimension=libraries[0].dimension,
            libraries=libraries,
            offsets=offsets,
            token_counts=np.concatenate([library.token_counts for library in libraries]).astype(np.int64),
            tag_ids=np.concatenate(tag_ids),
            tags=tuple(tags),
            ids=ids,
            has_duplicates=_has_duplicates(ids),
        )

    @property
    def bit_count(self) -> int:
        return int(self.offsets[-1])

    @property
    def max_norm(self) -> float:
        return max(library.max_norm for library in self.libraries)

    def locate(self, row: int) -> tuple[CompiledLibrary, int]:
        position = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.libraries[position], row - int(self.offsets[position])

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The embeddings of some global rows, in that order (read in row order from the maps)."""
        order = np.argsort(rows)
        gathered = np.empty((len(rows), self.dimension), dtype=np.float32)
        sorted_rows = rows[order]
        bounds = np.searchsorted(sorted_rows, self.offsets)
        for position, library in enumerate(self.libraries):
            start, stop = bounds[position], bounds[position + 1]
            if stop > start:
                gathered[order[start:stop]] = library.embeddings[sorted_rows[start:stop] - self.offsets[position]]
        return gathered

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


def _has_duplicates(ids: np.ndarray) -> bool:
    """Whether two rows share an id. Ids are SHA-256 digests: distinct 8-byte prefixes prove
    distinct ids, so the full comparison (0.9 s for 1M ids) runs only on a prefix collision."""
    heads = np.sort(np.ascontiguousarray(ids, dtype="S32").view("<u8")[::4])
    return bool(np.any(heads[1:] == heads[:-1])) and len(np.unique(ids)) < len(ids)


def _intern(tags: list[str], tag: str) -> int:
    if tag not in tags:
        tags.append(tag)
    return tags.index(tag)
