"""Dot products of stored rows with queries: the kernels every scan uses, chosen by measurement.

Why not `E @ q`: numpy sends it to OpenBLAS's sgemv_t, which on the 2-core AMD EPYC (Zen 4) of
docs/performance.md streamed the 586 MB matrix of 100k bits at ~16 GB/s on one core, while
faiss's flat scan (`fvec_inner_products_ny`, one SIMD dot product per row) streamed ~23 GB/s:
faiss was 1.4-1.6x faster than "the floor". Not because of memory (an anonymous copy of the
matrix scans as slowly as the file mapping), blocking (4,096- or 256-row blocks: the same), the
kernel's target (OPENBLAS_CORETYPE=Haswell or Zen: the same) or threads (one each): sgemv_t itself
is the slow part. `np.vecdot(E, q)` runs BLAS's sdot once per row, which streams like faiss's
loop: it is the one-query kernel (scripts/bench_index.py, `kernels`, measures all of them).

Several queries at once (host/search/batching.py): sdot over each row for every query while the row is
in cache (`vecdot` broadcast) wins up to a few queries, where sgemm's packing of the matrix
costs more than it saves (2 queries: one pass, 31 ms, against 94 ms); from `GEMM_FROM` queries
on, sgemm's arithmetic wins (16 queries: 122 against 159 ms). Both go block by block of rows, so
the per-query results are spread into each query's own array from a small block in cache.

These float32 products only find candidates (host/search/budget.py): any summation order is fine.
"""

from __future__ import annotations

import numpy as np

from host.search.scratch import SCRATCH

GEMM_FROM = 8  # queries from which one matrix-matrix product beats per-row dot products
BLOCK_ROWS = 1024  # rows scored at a time for several queries: sgemm was 8-15% faster than with 2048


def row_dots(matrix: np.ndarray, query: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`out[i] = matrix[i] @ query` (float32): one pass over the rows."""
    np.vecdot(matrix, query, out=out)
    return out


def rows_dots_many(matrix: np.ndarray, queries: np.ndarray, outs: list[np.ndarray]) -> None:
    """`outs[j][i] = matrix[i] @ queries[j]` for every query j, reading the rows once."""
    if len(queries) == 1:
        row_dots(matrix, queries[0], outs[0])
        return
    gemm = len(queries) >= GEMM_FROM
    columns = np.ascontiguousarray(queries.T) if gemm else queries[np.newaxis, :, :]
    block = SCRATCH.take("product_block", BLOCK_ROWS * len(queries), np.float32)
    for start in range(0, len(matrix), BLOCK_ROWS):
        rows = matrix[start : start + BLOCK_ROWS]
        scores = block[: len(rows) * len(queries)].reshape(len(rows), len(queries))
        if gemm:
            np.matmul(rows, columns, out=scores)
        else:
            np.vecdot(rows[:, np.newaxis, :], columns, out=scores)
        for position, out in enumerate(outs):
            out[start : start + len(rows)] = scores[:, position]
