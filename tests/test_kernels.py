"""The compiled loops (host/store/kernels.py): built in CI, the same answers as numpy's steps (and the same
bytes read), and arguments that do not fit refused before anything is read."""

from __future__ import annotations

import os

import msgpack
import numpy as np
import pytest
from compiled_or_not import compiled_or_not
from librarian import brute_force_ranking
from test_clusters import NOBODY, blobs, compile_file, library_file

from host.catalog.model_index import ModelIndex
from host.library.bit_checks import BitBlock
from host.search import budget, cluster_scan
from host.search.engine import Search, rank
from host.store import kernels
from host.store.codes import CodedQuery, code_scale, encode
from host.store.writer import RowFile, copy_ranges, pack_records, read_ranges

IN_CI = os.environ.get("CI") == "true"
needs_kernels = pytest.mark.skipif(not kernels.BUILT and not IN_CI, reason="host/store/_kernels.c was not built here")


@pytest.fixture
def numpy_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps as they run where the extension was not built."""
    monkeypatch.setattr(kernels, "compiled", None)


def test_the_compiled_loops_are_built_in_ci() -> None:
    if not IN_CI:
        pytest.skip("only CI must build them (a C compiler is there)")
    assert kernels.BUILT, "host/store/_kernels.c did not build: pip install -e . printed why"


def codes_and_query(dimension: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((700, dimension)).astype(np.float32)
    scale = code_scale(rows.min(axis=0), rows.max(axis=0))
    query = rng.standard_normal(dimension).astype(np.float32)
    return rows, scale, encode(rows, scale), query


@needs_kernels
@pytest.mark.parametrize("dimension", [5, 384, 1536, 3000])
def test_the_integer_weights_are_the_query_s_weights_rounded_so_the_largest_is_32767(dimension: int) -> None:
    _, scale, _, query = codes_and_query(dimension, seed=dimension)
    coded = CodedQuery(query, scale)

    weights = query.astype(np.float64) * scale[1]
    factor = 32767 / np.abs(weights).max()
    errors = coded.integer_weights / factor - weights
    assert np.abs(coded.integer_weights).max() == 32767
    assert np.all(np.abs(coded.integer_weights - weights * factor) <= 0.5)
    assert coded.integer_scale == pytest.approx(1 / factor, rel=1e-12)
    assert coded.base == np.float32(query.astype(np.float64) @ scale[0])
    codes_own, rounding = np.sum(weights**2) / 12, 127.5**2 * np.sum(errors**2)
    assert coded.typical_error == pytest.approx(np.sqrt(codes_own + rounding), rel=1e-9)
    assert rounding < 0.01 * codes_own or dimension < 100  # the rounding hardly widens the margin
    assert coded.offset == pytest.approx(float(coded.base) - 127.5 * errors.sum(), abs=1e-9)
    # A query of another float type or byte order is read as its float32 values.
    other = CodedQuery(query.astype(">f4"), scale.astype(np.float64))
    assert other.integer_weights.tolist() == coded.integer_weights.tolist() and other.offset == coded.offset


@needs_kernels
@pytest.mark.parametrize("dimension", [7, 1536])
def test_compiled_code_scores_are_numpy_s_within_the_rounding_bound_and_number_their_rows(
        dimension: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _, scale, codes, query = codes_and_query(dimension, seed=3)
    ranges = [(40, 90), (0, 3), (650, 700), (200, 200)]
    size = sum(stop - start for start, stop in ranges)
    compiled, compiled_rows = np.empty(size, np.float32), np.empty(size, np.int64)
    coded = CodedQuery(query, scale)
    coded.scores(codes, ranges, compiled, rows=compiled_rows, first_row=1000)
    monkeypatch.setattr(kernels, "compiled", None)
    in_numpy, numpy_rows = np.empty(size, np.float32), np.empty(size, np.int64)
    CodedQuery(query, scale).scores(codes, ranges, in_numpy, rows=numpy_rows, first_row=1000)

    expected_rows = np.concatenate([np.arange(start, stop) for start, stop in ranges]) + 1000
    assert compiled_rows.tolist() == numpy_rows.tolist() == expected_rows.tolist()
    factor = 1 / coded.integer_scale
    bound = 127.5 * np.abs(coded.integer_weights / factor - query.astype(np.float64) * scale[1]).sum()
    float_slack = 1e-6 * np.abs(in_numpy).max()
    assert np.abs(compiled - in_numpy).max() <= bound + float_slack


@needs_kernels
@pytest.mark.parametrize("k", [1, 3, 10, 64, 299, 300])
def test_margin_candidates_are_the_same_positions_numpy_finds(k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(k)
    scores = rng.standard_normal(300).astype(np.float32).round(1)  # many ties
    scores[rng.integers(0, 300, 40)] = -np.inf  # hidden rows
    k = min(k, int(np.isfinite(scores).sum()))
    for margin in (0.0, 0.1, 0.35):
        compiled = budget._margin_candidates(scores, k, margin).tolist()
        with monkeypatch.context() as patched:
            patched.setattr(kernels, "compiled", None)
            assert compiled == budget._margin_candidates(scores, k, margin).tolist()
        threshold = np.sort(scores)[-k] - np.float32(margin)
        assert compiled == np.flatnonzero(scores >= threshold).tolist()


@needs_kernels
def test_compiled_codes_are_the_bytes_numpy_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    rows = rng.standard_normal((3000, 40)).astype(np.float32)
    rows[:, 7] = 0.25  # a dimension that never varies
    scale = code_scale(rows.min(axis=0), rows.max(axis=0))
    halfway = (scale[0] + scale[1] * (np.arange(40) % 255 + np.float32(0.5))).astype(np.float32)
    rows[:5] = halfway  # values on (or a rounding away from) the middle of two levels
    rows[5], rows[6] = scale[0], rows.max(axis=0)  # the lowest and the highest level
    rows[8] = rows[8] * 2  # out of the scale's range: clipped
    compiled = encode(rows, scale)
    monkeypatch.setattr(kernels, "compiled", None)
    assert compiled.dtype == np.uint8 and compiled.tobytes() == encode(rows, scale).tobytes()


@needs_kernels
@pytest.mark.parametrize("needed", [0, 1, 5, 16, 70])
def test_the_nearest_clusters_come_in_the_order_numpy_gives_them(needed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(needed)
    for similarities in (rng.standard_normal(300).astype(np.float32).round(1),  # many ties
                         np.zeros(300, np.float32), rng.standard_normal(300).astype(np.float32)):
        compiled = cluster_scan._nearest_first(similarities, needed).tolist()
        with monkeypatch.context() as patched:
            patched.setattr(kernels, "compiled", None)
            assert compiled == cluster_scan._nearest_first(similarities, needed).tolist()
        boundary = np.sort(similarities)[::-1][needed]
        assert sorted(compiled) == np.flatnonzero(similarities >= boundary).tolist()
        assert compiled == sorted(compiled, key=lambda cluster: (-similarities[cluster], cluster))


@needs_kernels
@pytest.mark.parametrize("dimension", [1, 7, 8, 384, 1536])
def test_exact_scores_are_float64_sums_rounded_to_float32_as_numpy_gives_them(
        dimension: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(dimension)
    vectors = rng.standard_normal((300, dimension)).astype(np.float32)
    query = rng.standard_normal(dimension).astype(np.float32)
    compiled = budget.exact_scores(vectors[::2], query)  # a strided view, read as a copy
    monkeypatch.setattr(kernels, "compiled", None)
    in_numpy = budget.exact_scores(vectors[::2], query)
    # Another order of the float64 sum may round to a neighbouring float32, as with another BLAS;
    # on these vectors it never does.
    assert compiled.dtype == np.float32 and compiled.tolist() == in_numpy.tolist()
    assert budget.exact_scores(vectors[:0], query).shape == (0,)
    monkeypatch.undo()
    rows = np.array([299, 0, 17, 17], np.int64)  # read where they are, in this order
    assert budget.exact_scores_of(vectors, query, rows).tolist() == budget.exact_scores(vectors[rows], query).tolist()


@pytest.fixture(scope="module")
def clustered_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelIndex, np.ndarray]:
    folder = tmp_path_factory.mktemp("kernels")
    vectors = blobs(1500, seed=7)
    vectors[800:820] = vectors[5]  # ties that only file order breaks
    tags = ["team" if row % 4 == 1 else None for row in range(1500)]
    library = compile_file(library_file(folder / "lib.json", vectors, tags=tags), cluster_from=100)
    return ModelIndex.of_segments((library,)), vectors


def answers(index: ModelIndex, queries: np.ndarray) -> list[tuple[list[int], list[float]]]:
    found = []
    for query in queries:
        for granted, count, count_type in ((NOBODY, 10, "bit"), (frozenset({"team"}), 25, "bit"), (NOBODY, 300, "token")):
            selection = rank(index, query, granted=granted, count=count, count_type=count_type,  # type: ignore[arg-type]
                             search=Search(approximate=True, oversample=200, probes=2))
            found.append((selection.rows.tolist(), selection.scores.tolist()))
    return found


@needs_kernels
def test_a_search_answers_the_same_with_or_without_the_compiled_loops(
        clustered_index: tuple[ModelIndex, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    index, vectors = clustered_index
    queries = np.concatenate([vectors[[5, 100, 900]] + 0.01, blobs(5, seed=8)]).astype(np.float32)
    compiled = answers(index, queries)
    monkeypatch.setattr(kernels, "compiled", None)
    assert compiled == answers(index, queries)
    # ... and near a stored bit, the ten a public caller gets are the exact ten, ties in file order.
    public = [row % 4 != 1 for row in range(len(vectors))]
    assert index.tie_keys is not None
    for query, (rows, _) in zip(queries[:3], compiled[::3]):
        assert index.tie_keys[rows].tolist() == brute_force_ranking(vectors, query, public)[:10]


@needs_kernels
def test_arguments_that_do_not_fit_are_refused_before_anything_is_read() -> None:
    compiled = kernels.compiled
    assert compiled is not None
    codes, weights = np.zeros((10, 4), np.uint8), np.zeros(4, np.int16)
    out, rows = np.empty(20, np.float32), np.empty(20, np.int64)
    with pytest.raises(ValueError, match="outside the codes"):
        compiled.code_scores(codes, 4, np.array([[5, 11]], np.int64), weights, 1.0, 0.0, out)
    with pytest.raises(ValueError, match="outside the codes"):
        compiled.code_scores(codes, 4, np.array([[6, 5]], np.int64), weights, 1.0, 0.0, out)
    with pytest.raises(ValueError, match="shorter"):
        compiled.code_scores(codes, 4, np.array([[0, 10]], np.int64), weights, 1.0, 0.0, out[:9])
    with pytest.raises(ValueError, match="shorter"):
        compiled.code_scores(codes, 4, np.array([[0, 10]], np.int64), weights, 1.0, 0.0, out, rows[:9])
    with pytest.raises(ValueError, match="do not agree"):
        compiled.code_scores(codes, 4, np.array([[0, 10]], np.int64), np.zeros(3, np.int16), 1.0, 0.0, out)
    with pytest.raises(TypeError, match="weights"):
        compiled.code_scores(codes, 4, np.array([[0, 10]], np.int64), np.zeros(4, np.float32), 1.0, 0.0, out)
    with pytest.raises(ValueError, match="k must be"):
        compiled.margin_candidates(np.zeros(5, np.float32), 6, 0.0, np.empty(6, np.float32), np.empty(5, np.int64))
    with pytest.raises(ValueError, match="k must be"):
        compiled.margin_candidates(np.zeros(5, np.float32), 0, 0.0, np.empty(1, np.float32), np.empty(5, np.int64))
    with pytest.raises(ValueError, match=r"len\(out\) rows"):
        compiled.exact_dots(np.zeros((3, 4), np.float32), np.zeros(5, np.float32), np.empty(3, np.float32))
    with pytest.raises(ValueError, match="every one of `rows`"):
        compiled.exact_dots(np.zeros((3, 4), np.float32), np.zeros(4, np.float32), np.empty(2, np.float32),
                            np.array([0, 3], np.int64))
    with pytest.raises(ValueError, match="needed"):
        compiled.highest_first(np.zeros(5, np.float32), 5, np.empty(6, np.float32), np.empty(5, np.int64))
    with pytest.raises(ValueError, match="do not agree"):
        compiled.encode_codes(np.zeros((3, 4), np.float32), np.zeros((2, 4), np.float32), np.empty((3, 5), np.uint8))
    with pytest.raises(ValueError, match="agree"):
        compiled.integer_weights(np.zeros(4, np.float32), np.zeros((2, 5), np.float32), np.empty(4, np.int16))


@pytest.fixture(params=["compiled", "numpy"])
def either_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled_or_not(request.param, kernels, "host/store/_kernels.c", monkeypatch)


def test_byte_ranges_are_read_back_to_back_in_the_order_asked(either_way: None, tmp_path) -> None:
    data = np.random.default_rng(3).integers(0, 256, 100_000, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(data.tobytes())
    starts = np.array([500, 0, 10, 14, 99_990, 20, 20, 3], np.int64)  # 10 and 14 follow one another; 20 twice
    lengths = np.array([7, 0, 4, 6, 10, 1, 1, 0], np.int64)
    out = np.empty(int(lengths.sum()), np.uint8)
    with path.open("rb") as handle:
        read_ranges(handle.fileno(), starts, lengths, out)
        assert out.tobytes() == b"".join(data[start : start + length].tobytes() for start, length in zip(starts, lengths))
        with pytest.raises(OSError, match=r"end of file at byte 100,?000"):
            read_ranges(handle.fileno(), np.array([99_995], np.int64), np.array([10], np.int64), np.empty(10, np.uint8))
    copied = np.empty(int(lengths.sum()), np.uint8)
    copy_ranges(data.tobytes(), starts, lengths, copied)
    assert copied.tobytes() == out.tobytes()


def test_scattered_rows_of_a_matrix_file_are_its_rows(either_way: None, tmp_path) -> None:
    matrix = np.random.default_rng(4).standard_normal((1000, 24)).astype(np.float32)
    np.save(tmp_path / "rows.npy", matrix)
    rows = np.random.default_rng(5).permutation(1000)[:300]
    with RowFile(tmp_path / "rows.npy") as stored:
        assert np.array_equal(stored[rows], matrix[rows])
        assert np.array_equal(stored[np.sort(rows)], matrix[np.sort(rows)])
        assert np.array_equal(stored[10:20], matrix[10:20])


@needs_kernels
def test_ranges_that_do_not_fill_out_exactly_are_refused_before_anything_is_read(tmp_path) -> None:
    compiled = kernels.compiled
    assert compiled is not None
    (tmp_path / "data.bin").write_bytes(b"x" * 100)
    with (tmp_path / "data.bin").open("rb") as handle:
        fd = handle.fileno()
        for starts, lengths, size in (([0, 5], [3, 3], 5), ([0, 5], [3, 3], 7), ([0], [3, 3], 6), ([-1], [3], 3),
                                      ([0], [-3], 0)):
            with pytest.raises(ValueError, match="do not fill out exactly"):
                compiled.read_ranges(fd, np.array(starts, np.int64), np.array(lengths, np.int64),
                                     memoryview(bytearray(size)))
        with pytest.raises(OSError):
            compiled.read_ranges(-1, np.array([0], np.int64), np.array([3], np.int64), memoryview(bytearray(3)))
    source = memoryview(b"x" * 100)
    for starts, lengths, size in (([0, 5], [3, 3], 5), ([98], [3], 3), ([-1], [1], 1), ([0], [-1], 0)):
        with pytest.raises(ValueError, match="do not fill out exactly"):
            compiled.copy_ranges(source, np.array(starts, np.int64), np.array(lengths, np.int64), memoryview(bytearray(size)))


def block_of(texts: list[str], infos: list[dict[str, str | None]]) -> BitBlock:
    count = len(texts)
    return BitBlock(np.zeros((count, 2), np.float32), [1] * count, [bytes(32)] * count, texts, infos, [None] * count)


def test_records_are_packed_as_msgpack_packs_them_without_the_absent_fields(either_way: None) -> None:
    """Every size of msgpack header: strings of 31/32, 255/256 and 65535/65536 bytes, maps of 15/16
    and 65536 fields; UTF-8 of any width; a None value (an absent field) left out."""
    texts, infos = [], []
    for size in [0, 1, 31, 32, 255, 256, 65_535, 65_536]:
        texts.append("é" * (size // 2) + "a" * (size % 2))  # `size` bytes of UTF-8
        infos.append({"url": "u" * size, "title": None, "€": "😀" * (size // 4)})
    texts += ["", "fields", "many"]
    infos += [{}, {f"k{number}": f"v{number}" for number in range(16)}, {f"k{number}": "" for number in range(65_536)}]
    infos[-2]["k3"] = None  # 15 fields left

    records, lengths = pack_records(block_of(texts, infos))

    expected = [msgpack.packb({"text": text, "info": {key: value for key, value in info.items() if value is not None}})
                for text, info in zip(texts, infos, strict=True)]
    assert records == b"".join(expected)
    assert lengths.tolist() == [len(packed) for packed in expected]
    nothing, no_lengths = pack_records(block_of([], []))
    assert nothing == b"" and no_lengths.tolist() == []


def test_a_record_that_cannot_be_utf8_is_refused_either_way(either_way: None) -> None:
    for text, info in [("lone \ud800", {"url": "u"}), ("t", {"url": "\udfff"}), ("t", {"\ud800": "v"})]:
        with pytest.raises(UnicodeEncodeError):
            pack_records(block_of(["fine", text], [{"url": "u"}, info]))
