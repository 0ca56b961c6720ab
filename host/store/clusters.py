"""The clustered (inverted-file) layout of a compiled library: which rows sit together, and where.

A library of at least `CLUSTER_FROM` bits is stored sorted by cluster: spherical k-means
centroids, trained on a seeded sample, each row assigned to its nearest centroid, rows of one
cluster stored back to back (in file order within it). An approximate query then ranks the
centroids and reads only the nearest clusters' contiguous slices of the one memory-mapped matrix.

Invariants:
- Deterministic: the same embeddings and tags give the same layout (a fixed seed, stable sorts,
  ties to the lower index).
- Only what everyone may see shapes it: centroids (and their number) come from the public rows
  alone when the library has any, so private bits never move a public bit's cluster, and an
  anonymous caller's approximate answer is the one it would get without them. A library with no
  public rows is trained on all its rows (whoever sees one of its bits usually sees them all).
- A layout is a permutation: every row stored once; `order[i]` is the file row stored at row i.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from threadpoolctl import threadpool_limits

CLUSTER_FROM = 10_000  # smaller libraries keep file order: exact search is as fast there
SEED = 14  # the layout's k-means seed: fixed, so the same file gives the same layout
ITERATIONS = 10  # k-means rounds at most; more moved recall@10 by < 0.001 on scripts/bench.py's libraries
SETTLED = 1 / 1000  # ...and fewer once a round moves fewer than this share of the sample's rows
SAMPLE_PER_CLUSTER = 32  # training rows per centroid
CLUSTERS_PER_SQRT = 1.0  # clusters = sqrt(bits): the centroid scan and one cluster's slice cost alike
ASSIGN_BLOCK = 4096  # rows assigned at a time: the block and its (rows x clusters) scores stay small
SPLIT_PERTURBATION = 1 / 1024  # how far the two halves of a split cluster's centroid move apart (faiss's EPS)


@dataclass(frozen=True)
class Layout:
    """Where each row goes: `order` (stored row -> file row), centroids, and each cluster's rows."""

    order: np.ndarray  # (bits,) int64, a permutation of the file rows
    centroids: np.ndarray  # (clusters, dimension) float32, unit length
    offsets: np.ndarray  # (clusters + 1,) int64: cluster c is stored at rows offsets[c]:offsets[c + 1]

    @property
    def clusters(self) -> int:
        return len(self.centroids)


def cluster_count(training_bits: int) -> int:
    return max(1, min(training_bits, round(CLUSTERS_PER_SQRT * math.sqrt(training_bits))))


EachBlock = Callable[[np.ndarray, np.ndarray, int], None]  # (rows, their clusters, number of clusters)
Threads = Callable[[], int] | None  # how many threads BLAS may use now (None: every core)


def blas_threads(threads: Threads) -> int:
    return threads() if threads is not None else os.cpu_count() or 1


class Rows(Protocol):
    """A (rows, dimension) float32 matrix, in memory or read from a file a block at a time."""

    def __len__(self) -> int: ...
    def __getitem__(self, rows: Any) -> np.ndarray: ...


def plan_layout(embeddings: Rows | np.ndarray, public: np.ndarray, *, seed: int = SEED,
                clusters: int | None = None, step: Callable[[str, float], None] | None = None,
                each_block: EachBlock | None = None, threads: Threads = None) -> Layout:
    """The clustered layout of `embeddings` ((bits, dimension) float32, in memory or memory-mapped;
    `public`: bool per row). `step(what, fraction done)` is told how far it is; `each_block` is
    handed every block of rows as it is assigned (see `assign`); `threads()`, asked before each
    block, how many threads BLAS may use (default: every core)."""
    step = step or (lambda what, done: None)
    training = np.flatnonzero(public) if public.any() else np.arange(len(embeddings))
    count = max(1, min(clusters, len(training))) if clusters else cluster_count(len(training))
    rng = np.random.default_rng(seed)
    sample_size = min(len(training), SAMPLE_PER_CLUSTER * count)
    sample = np.asarray(embeddings[np.sort(training[rng.choice(len(training), sample_size, replace=False)])],
                        dtype=np.float32)
    step("clustering", 0.0)
    centroids = train_centroids(sample, count, rng, threads)
    labels = assign(embeddings, centroids, step, each_block, threads)
    order = np.argsort(labels, kind="stable")  # file order within a cluster
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=count), out=offsets[1:])
    return Layout(order=order.astype(np.int64), centroids=centroids, offsets=offsets)


def train_centroids(sample: np.ndarray, count: int, rng: np.random.Generator, threads: Threads = None) -> np.ndarray:
    """Spherical k-means: unit centroids, each row to the centroid of largest dot product, with the
    threads `threads()` allows BLAS at each round (a text index process beside may finish meanwhile).

    A centroid left with no rows takes half of the largest cluster (faiss's rule: the two move
    apart by a small perturbation), so that clusters stay of similar sizes and a probe reads about
    as many rows as any other. Rounds stop early once the rows have settled (a round moving fewer
    than SETTLED of them): where none moves, the centroids would not move either.
    """
    centroids = _unit(sample[np.sort(rng.choice(len(sample), count, replace=False))].astype(np.float64))
    labels = np.empty(len(sample), dtype=np.int64)
    previous: np.ndarray | None = None
    for _ in range(ITERATIONS):
        with threadpool_limits(limits=blas_threads(threads), user_api="blas"):
            nearest_centroids(sample, centroids, out=labels)
        if previous is not None and np.count_nonzero(labels != previous) < SETTLED * len(sample):
            break
        previous = labels.copy()
        sizes = np.bincount(labels, minlength=count)
        by_cluster = sample[np.argsort(labels, kind="stable")]
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        sums = np.zeros((count, sample.shape[1]), dtype=np.float64)
        for cluster in np.flatnonzero(sizes).tolist():  # contiguous sums: np.add.reduceat strides, 10x slower
            np.sum(by_cluster[bounds[cluster] : bounds[cluster + 1]], axis=0, dtype=np.float64, out=sums[cluster])
        centroids = _split_largest(_unit(sums), sizes)
    return centroids


def _split_largest(centroids: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each empty cluster's centroid becomes a perturbed copy of the largest cluster's (halving it)."""
    sizes = sizes.astype(np.float64)
    signs = np.where(np.arange(centroids.shape[1]) % 2 == 0, 1.0, -1.0) * SPLIT_PERTURBATION
    for empty in np.flatnonzero(sizes == 0).tolist():
        largest = int(np.argmax(sizes))  # ties: the lower cluster
        if sizes[largest] < 2:
            break
        base = centroids[largest].astype(np.float64)
        centroids[empty] = _unit((base * (1 + signs))[np.newaxis, :])[0]
        centroids[largest] = _unit((base * (1 - signs))[np.newaxis, :])[0]
        sizes[empty] = sizes[largest] / 2
        sizes[largest] -= sizes[empty]
    return centroids


def assign(rows: Rows | np.ndarray, centroids: np.ndarray, step: Callable[[str, float], None],
           each_block: EachBlock | None = None, threads: Threads = None) -> np.ndarray:
    """Each row's cluster, block by block (a matrix on disk is read once, in order), with the threads
    `threads` allows BLAS (every core unless a text index process works beside): the products are
    the compile's largest arithmetic (1M x 1,000 x 1,536 x 2 flops).
    `each_block(rows, their clusters, number of clusters)` sees each block (in order) once assigned.

    Two-level assignment (groups of centroids) was tried and dropped: on data without clear
    clusters it put three rows in four in a farther cluster, for a 2.3x saving.
    """
    labels = np.empty(len(rows), dtype=np.int64)
    limited: tuple[int, threadpool_limits] | None = None
    try:
        for start in range(0, len(rows), ASSIGN_BLOCK):
            wanted = blas_threads(threads)
            if limited is None or limited[0] != wanted:  # another process may have let a core go
                if limited is not None:
                    limited[1].restore_original_limits()
                limited = (wanted, threadpool_limits(limits=wanted, user_api="blas"))
            block = np.asarray(rows[start : start + ASSIGN_BLOCK], dtype=np.float32)
            nearest_centroids(block, centroids, out=labels[start : start + len(block)])
            if each_block is not None:
                each_block(block, labels[start : start + len(block)], len(centroids))
            step("assigning", (start + len(block)) / len(rows))
    finally:
        if limited is not None:
            limited[1].restore_original_limits()
    return labels


def nearest_centroids(rows: np.ndarray, centroids: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """The index of each row's nearest centroid (largest dot product; ties to the lower index)."""
    labels = np.empty(len(rows), dtype=np.int64) if out is None else out
    for start in range(0, len(rows), ASSIGN_BLOCK):
        scores = np.asarray(rows[start : start + ASSIGN_BLOCK], dtype=np.float32) @ centroids.T
        np.argmax(scores, axis=1, out=labels[start : start + ASSIGN_BLOCK])
    return labels


def _unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = (vectors / norms).astype(np.float32)
    return unit
