"""What a caller may see of the catalog, in RAGFlow's terms: libraries are datasets, the bits of a
library that share a URL are a document, bits are chunks.

- A dataset's `id` is RAGFlow-shaped (32 hex digits, a valid UUID version 1, which RAGFlow's own
  validators accept) and stable: made from the library's name alone, so it survives restarts,
  reloads and edits of the file.
- A document is the visible bits of one library with one `info.url`, URLs compared as the
  constraint engine compares them (case-folded, NFKC: host/constraints/words.py), so that
  `metadata_condition` on `url` and documents always agree. Its `id` is made the same way from
  the library's name and that folded URL; its `name` is the URL as the first visible bit of it
  spells it.
- Only rows the caller may see count anywhere (`ModelIndex.visible_rows`: public, or a granted
  tag; a bit held by two libraries is served by the first the caller may see): a library without
  such a row is not a dataset for this caller, and every count, name and id comes from visible
  rows only. Nothing here loops over bits in Python: counts are bincounts over the compiled
  text index's per-row URL value ids.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from host.catalog.generations import Catalog
from host.catalog.model_index import ModelIndex
from host.constraints.value_index import ValueIndex
from host.store.compiled import CompiledLibrary, text_index_of
from host.web.library_selection import Reach

INFO_KEYS = ("url", "title", "description", "image_url")


def _uuid1_shaped(text: str) -> str:
    return uuid.UUID(bytes=hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16], version=1).hex


@functools.lru_cache(maxsize=4096)
def dataset_id(library_name: str) -> str:
    return _uuid1_shaped(f"polymath-library\n{library_name}")


@functools.lru_cache(maxsize=1 << 16)
def document_id(library_name: str, folded_url: str) -> str:
    return _uuid1_shaped(f"polymath-document\n{library_name}\n{folded_url}")


@dataclass(frozen=True)
class Documents:
    """A dataset's documents, in the order of their folded URLs: arrays, one entry per document."""

    values: np.ndarray  # url value ids (into the text index's url dictionary)
    first_rows: np.ndarray  # the first visible (local) row of each
    chunk_counts: np.ndarray
    token_counts: np.ndarray


@dataclass(frozen=True)
class Dataset:
    """One library as one caller sees it."""

    library: CompiledLibrary
    index: ModelIndex  # the model index holding it
    start: int  # its first row in `index`
    visible: np.ndarray  # bool per local row: what this caller may see

    @property
    def id(self) -> str:
        return dataset_id(self.library.name)

    @property
    def urls(self) -> ValueIndex:
        return text_index_of(self.library).values["url"]

    @cached_property
    def visible_rows(self) -> np.ndarray:
        return np.flatnonzero(self.visible)

    @property
    def chunk_count(self) -> int:
        return len(self.visible_rows)

    @property
    def token_count(self) -> int:
        return int(self.library.token_counts[self.visible_rows].sum())

    @cached_property
    def documents(self) -> Documents:
        rows = self.visible_rows
        values_of_rows = self.urls.value_ids[rows]
        values, first = np.unique(values_of_rows, return_index=True)
        counts = np.bincount(values_of_rows, minlength=len(self.urls.values))
        tokens = np.bincount(values_of_rows, weights=self.library.token_counts[rows].astype(np.float64),
                             minlength=len(self.urls.values))
        return Documents(values, rows[first], counts[values], tokens[values].astype(np.int64))

    def folded_url(self, value: int) -> str:
        return self.urls.values[value].decode("utf-8", "surrogatepass")

    def document_id(self, value: int) -> str:
        return document_id(self.library.name, self.folded_url(value))

    def value_of_row(self, local_row: int) -> int:
        return int(self.urls.value_ids[local_row])

    def document_values(self) -> dict[str, int]:
        """Visible documents by id (hashes each visible URL once: asked only for a document filter)."""
        return {self.document_id(int(value)): int(value) for value in self.documents.values}

    def info(self, local_row: int) -> dict[str, Any]:
        info = self.library.record(local_row).get("info")
        return {key: info[key] for key in INFO_KEYS if isinstance(info, dict) and isinstance(info.get(key), str)}


def visible_datasets(catalog: Catalog, access_tags: frozenset[str], reach: Reach | None = None) -> list[Dataset]:
    """The libraries this caller may see a bit of (within `reach`: a `/p/{name}/` prefix's), in the
    catalog's (path) order."""
    found: dict[str, Dataset] = {}
    for index in catalog.models.values():
        mask = index.visible_rows(access_tags)
        for position, library in enumerate(index.libraries):
            if reach is not None and not reach.holds(library.name):
                continue
            start, stop = int(index.offsets[position]), int(index.offsets[position + 1])
            visible = np.ones(stop - start, dtype=bool) if mask is None else mask[start:stop]
            if visible.any():
                found[library.name] = Dataset(library, index, start, visible)
    return [found[library.name] for library in catalog.libraries if library.name in found]
