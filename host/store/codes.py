"""8-bit codes of a clustered library's vectors: what approximate search scans, a quarter of the floats.

Each value x of dimension i is stored as the nearest of 256 evenly spaced levels, x' = low_i +
step_i * c (c = 0..255), `low` and `step` from the library's smallest and largest value of that
dimension (every row, so nothing is clipped): |x - x'| <= step_i / 2. A query q scores a row of
codes as q·low + (q * step)·c: the codes cast to float32 a block at a time (the block stays in
cache) and one matrix-vector product per block. That reads a quarter of the bytes of a float32
scan: 10M x 384 dimensions are 3.8 GB of codes against 15.4 GB of floats, so the codes stay in
memory where the floats could not (docs/performance.md, "Ten million bits"). In numpy it costs more
CPU than reading floats already in memory (numpy casts ~10 G values a second here), which is why,
without the compiled scan below, a model whose floats fit in memory is scanned through them
(host/search/query.py, SearchPolicy).

How far a code score can be from the exact one: sum_i q_i (x_i - x'_i), each term within
±|q_i| step_i / 2. The errors of the dimensions are independent and uniform, so the typical error
is sqrt(sum_i (q_i step_i)^2 / 12) (`typical_error`); candidates within a few typical errors of
the k-th best code score are re-scored exactly from the floats (host/search/cluster_scan.py), so
every similarity returned is exact, and the order is exact among the rows scanned.

Where the compiled loops are built (host/store/kernels.py, an optional extension), a row's sum is
taken in integers instead: each weight rounded to int16 (the largest to ±32767), the sum exact, then
scaled back. That reads the same quarter of the bytes at several times numpy's speed (100k x 1536,
four clusters: 0.09 ms against 0.25 ms for their floats), so every clustered model is scanned through
its codes (host/search/query.py). Rounding weight i by e_i moves a row's score by sum_i e_i c_i:
127.5 * sum_i e_i shared by every row (`offset` takes it out) and sum_i e_i (c_i - 127.5), a sum of
independent terms as the codes' own errors are, each within ±127.5 |e_i|. Its spread,
127.5 * sqrt(sum_i e_i^2), is added to the typical error in quadrature: with the largest weight at
32767 it is 1.4% of the codes' own (100k x 1536, median of 100 queries), so the margin of re-scored
candidates hardly moves. (The worst case, 127.5 * sum_i |e_i|, is 34 times the spread; added to the
margin as a bound, it re-scored 3% more candidates.)

Invariant: the codes of a row depend only on its vector and the library's scale; a row's code
score only on the query and that row.
"""

from __future__ import annotations

import numpy as np

from host.store import kernels

LEVELS = 255  # steps between the lowest and the highest level
BLOCK_VALUES = 2048 * 384  # code values cast at a time (3 MB of float32, in cache): 2,048 rows at 384 dimensions


def code_scale(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """(2, dimension) float32: each dimension's lowest level and the step between levels."""
    step = ((high.astype(np.float64) - low) / LEVELS).astype(np.float32)
    step[step <= 0] = 1.0  # a dimension that never varies: every code is 0
    return np.stack([low.astype(np.float32), step])


def encode(rows: np.ndarray, scale: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """(rows, dimension) float32 -> uint8 codes: the nearest level of each value. The compiled loop
    takes the same float32 steps in one pass (1M x 384: 0.12 s against 0.61 s, while compiling);
    otherwise `scratch`, a float32 array of the same shape, is worked in if given (fresh temporaries
    of megabytes cost page faults on every call)."""
    compiled = kernels.compiled
    if compiled is not None and rows.ndim == 2 and rows.dtype == np.float32 and rows.flags.c_contiguous:
        encoded = np.empty(rows.shape, dtype=np.uint8)
        compiled.encode_codes(rows, np.ascontiguousarray(scale, dtype=np.float32), encoded)
        return encoded
    levels = scratch if scratch is not None and scratch.shape == rows.shape else np.empty(rows.shape, np.float32)
    np.subtract(rows, scale[0], out=levels)
    np.divide(levels, scale[1], out=levels)
    np.rint(levels, out=levels)
    np.clip(levels, 0, LEVELS, out=levels)
    codes: np.ndarray = levels.astype(np.uint8)
    return codes


class CodedQuery:
    """A query as the codes of one library see it: a constant and per-dimension weights."""

    def __init__(self, query: np.ndarray, scale: np.ndarray) -> None:
        self.compiled = kernels.compiled
        if self.compiled is not None:  # in one call: the dozen numpy steps below cost 0.1 ms when the caches are cold
            self.integer_weights = np.empty(len(query), dtype=np.int16)
            base, self.integer_scale, self.offset, self.typical_error = self.compiled.integer_weights(
                np.ascontiguousarray(query, dtype=np.float32), np.ascontiguousarray(scale, dtype=np.float32),
                self.integer_weights)
            self.base = np.float32(base)
            return
        query64 = query.astype(np.float64)
        weights64 = query64 * scale[1]
        self.base = np.float32(query64 @ scale[0].astype(np.float64))
        self.weights = weights64.astype(np.float32)
        self.typical_error = float(np.sqrt(np.sum(weights64**2) / 12))

    def scores(self, codes: np.ndarray, ranges: list[tuple[int, int]], out: np.ndarray, block: np.ndarray | None = None,
               rows: np.ndarray | None = None, first_row: int = 0) -> None:
        """The code scores of the rows of each of `ranges` ([start, stop) of `codes`) in turn, into `out`
        (as long as they are together); into `rows`, if given, their numbers plus `first_row`.

        Compiled: in integers, row by row. Otherwise `block` is (rows, dimension) float32 scratch (made
        here if not given):
        the ranges are cast into it back to back and scored a full block at a time, so a query's
        fifty clusters of a thousand rows cost 25 products, not 50 (a matrix-vector product: 10%
        faster than row by row on a block in cache)."""
        if self.compiled is not None:
            self.compiled.code_scores(codes, codes.shape[1], np.array(ranges, dtype=np.int64), self.integer_weights,
                                      self.integer_scale, self.offset, out, rows, first_row)
            return
        if block is None:
            block = np.empty((max(1, BLOCK_VALUES // codes.shape[1]), codes.shape[1]), dtype=np.float32)
        filled = done = 0
        for start, stop in ranges:
            while start < stop:
                taken = min(stop - start, len(block) - filled)
                np.copyto(block[filled : filled + taken], codes[start : start + taken], casting="unsafe")
                filled, start = filled + taken, start + taken
                if filled == len(block):
                    np.matmul(block, self.weights, out=out[done : done + filled])
                    done, filled = done + filled, 0
        if filled:
            np.matmul(block[:filled], self.weights, out=out[done : done + filled])
        out += self.base
        if rows is not None and ranges:
            np.concatenate([np.arange(start, stop) for start, stop in ranges], out=rows[: len(out)])
            rows[: len(out)] += first_row
