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
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from host.catalog.generations import Catalog
from host.catalog.libraries import Library
from host.catalog.model_index import ModelIndex
from host.constraints.value_index import ValueIndex
from host.store.compiled import Segment, text_index_of
from host.web.library_selection import Reach

INFO_KEYS = ("url", "title", "description", "image_url")


def _uuid1_shaped(text: str) -> str:
    return uuid.UUID(bytes=hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16], version=1).hex


@functools.lru_cache(maxsize=1 << 16)  # every library of a host of ten thousand, from one generation to the next
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
    """One library as one caller sees it. Its rows are its segment's (`library.rows()`): "local"
    rows here are rows of that segment, whose text index holds each row's URL."""

    library: Library
    index: ModelIndex  # the model index holding it
    start: int  # where its segment's rows start in `index`
    granted: frozenset[str]

    @property
    def id(self) -> str:
        return dataset_id(self.library.name)

    @property
    def segment(self) -> Segment:
        return self.library.segment

    @property
    def urls(self) -> ValueIndex:
        return text_index_of(self.segment).values["url"]

    @cached_property
    def visible_rows(self) -> np.ndarray:
        """Its rows this caller may see (local, in its file's order)."""
        rows = self.library.rows()
        mask = self.index.visible_rows(self.granted)
        return rows if mask is None else rows[mask[rows + self.start]]

    @property
    def chunk_count(self) -> int:
        return len(self.visible_rows)

    @property
    def token_count(self) -> int:
        return int(self.segment.token_counts[self.visible_rows].sum())

    @cached_property
    def documents(self) -> Documents:
        rows = self.visible_rows
        values_of_rows = self.urls.value_ids[rows]
        order = np.argsort(values_of_rows, kind="stable")  # each document's rows together, in file order
        ordered = values_of_rows[order]
        starts = np.flatnonzero(np.diff(ordered, prepend=-1)) if len(ordered) else np.zeros(0, np.int64)
        tokens = np.add.reduceat(self.segment.token_counts[rows][order].astype(np.int64), starts) if len(starts) \
            else np.zeros(0, np.int64)
        counts = np.diff(np.append(starts, len(ordered)))
        return Documents(ordered[starts], rows[order[starts]], counts, tokens)

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
        info = self.segment.record(local_row).get("info")
        return {key: info[key] for key in INFO_KEYS if isinstance(info, dict) and isinstance(info.get(key), str)}


def visible_datasets(catalog: Catalog, access_tags: frozenset[str], reach: Reach | None = None) -> list[Dataset]:
    """The libraries this caller may see a bit of (within `reach`: a `/p/{name}/` prefix's), in the
    catalog's (name) order. A dataset's rows are looked at only when its chunks or documents are asked
    for: listing ten thousand costs no pass over bits."""
    return [dataset for library in catalog.libraries
            if (dataset := dataset_of(catalog, library, access_tags, reach)) is not None]


def dataset_of(catalog: Catalog, library: Library, access_tags: frozenset[str], reach: Reach | None = None
               ) -> Dataset | None:
    """`library` as a dataset of this caller's, or None where it is none (see `visible_datasets`)."""
    index = catalog.models.get(library.embedding_model)
    if index is None or not library.visible_bit_count(access_tags) or (reach is not None and not reach.holds(library.name)):
        return None
    [position] = [number for number, segment in enumerate(index.segments) if segment is library.segment]
    dataset = Dataset(library, index, int(index.offsets[position]), access_tags)
    if index.has_duplicates and not dataset.chunk_count:  # a library whose every bit another serves first: none
        return None
    return dataset


# The latest generation's ids, made once; held weakly: a replaced generation's maps are let go.
_named_by_id: tuple[weakref.ref[Catalog], dict[str, str]] | None = None


def library_of_dataset_id(catalog: Catalog, id_: str) -> Library | None:
    """The library whose dataset id is `id_` (whoever may see it): a retrieval naming one dataset
    among ten thousand looks it up, never lists them all."""
    global _named_by_id
    known = _named_by_id
    if known is None or known[0]() is not catalog:
        known = _named_by_id = (weakref.ref(catalog),
                                {dataset_id(library.name): library.name for library in catalog.libraries})
    name = known[1].get(id_)
    return catalog.library(name) if name is not None else None
