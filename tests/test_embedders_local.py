"""The built-in all-MiniLM-L6-v2 embedder against the sample libraries it must reproduce.

The sample library and the drafts were embedded by sentence-transformers on torch
(sentence-transformers on torch); the host's ONNX Runtime embedder must give, for every bit's own
text, a vector with cosine >= 0.999 to the stored one, the same top-10 lists, and the same token
counts. Needs the `embed` extra (part of `test`): skipped without it, except in CI.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import pickle
import shutil
import struct
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from host.embedders import EmbedderError, minilm
from host.embedders.minilm import MiniLMEmbedder
from host.embedders.safetensors_file import read_safetensors

pytest_plugins = ["embedder_fixtures"]  # minilm_embedder, minilm_int8_embedder, minilm_cache_dir

PROJECT = Path(__file__).resolve().parents[1]
SAMPLE_FILES = (PROJECT / "libraries" / "sample.json", PROJECT / "libraries" / "access" / "unpublished" / "drafts.json")
QUERIES = (
    "a great fish swallowed the prophet",
    "love your enemies and pray for them that persecute you",
    "in the beginning God created the heaven and the earth",
    "the Lord is my shepherd, I shall not want",
    "charity suffereth long and is kind",
    "vanity of vanities, all is vanity",
    "a son who wasted his inheritance comes home to his father",
    "thrown into a den of lions for praying",
    "who can find a virtuous woman? her price is far above rubies",
    "a light from heaven on the road to Damascus",
    "storm at sea and a shipwreck on an island",
    "where were you when I laid the foundations of the earth?",
)


@dataclass(frozen=True)
class SampleBits:
    texts: list[str]
    titles: list[str]
    vectors: np.ndarray  # the stored float32 vectors, (n, 384)
    token_counts: list[int]


@pytest.fixture(scope="session")
def sample_bits() -> SampleBits:
    texts, titles, vectors, counts = [], [], [], []
    for path in SAMPLE_FILES:
        library = json.loads(path.read_text(encoding="utf-8"))
        assert library["embedding_model"] == minilm.MODEL
        for bit in library["bits"]:
            texts.append(bit["text"])
            titles.append(bit["info"]["title"])
            vectors.append(np.frombuffer(base64.b64decode(bit["embedding"]), dtype="<f4"))
            counts.append(bit["token_count"])
    return SampleBits(texts, titles, np.stack(vectors), counts)


@pytest.fixture(scope="session")
def embedder(minilm_embedder: MiniLMEmbedder) -> MiniLMEmbedder:
    return minilm_embedder


@pytest.fixture(scope="session")
def host_vectors(embedder: MiniLMEmbedder, sample_bits: SampleBits) -> np.ndarray:
    """The host's vector of every sample bit's own text (one batched pass)."""
    return embedder.embed(sample_bits.texts)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    similarity: np.ndarray = np.sum(a64 * b64, axis=1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    return similarity


def top(matrix: np.ndarray, query: np.ndarray, k: int = 10) -> list[int]:
    scores = matrix.astype(np.float64) @ query.astype(np.float64)
    return [int(row) for row in np.argsort(-scores, kind="stable")[:k]]


def same_ranking(matrix: np.ndarray, ours: list[int], reference: list[int], query: np.ndarray) -> bool:
    """Equal lists, allowing neighbours whose reference scores tie within float32 rounding to swap."""
    if ours == reference:
        return True
    scores = matrix.astype(np.float64) @ query.astype(np.float64)
    return set(ours) == set(reference) and all(
        a == b or abs(scores[a] - scores[b]) < 1e-6 for a, b in zip(ours, reference, strict=True)
    )


# ---------------------------------------------------------------- the requirement (SPEC §7, issue 9)


def test_every_sample_and_draft_bit_reproduces_its_stored_vector(
    sample_bits: SampleBits, host_vectors: np.ndarray
) -> None:
    assert len(sample_bits.texts) == 397  # 386 sample bits + 11 drafts
    similarity = cosines(host_vectors, sample_bits.vectors)
    worst = int(np.argmin(similarity))
    assert similarity.min() >= 0.999, f"{sample_bits.titles[worst]}: cosine {similarity[worst]:.6f}"
    # fp32 end to end: the figure is in fact float rounding, far above the requirement.
    assert similarity.min() > 0.999999


def test_bit_text_queries_give_the_reference_top_10(sample_bits: SampleBits, host_vectors: np.ndarray) -> None:
    stored = sample_bits.vectors
    for row in range(len(stored)):
        reference = top(stored, stored[row])
        ours = top(stored, host_vectors[row])
        assert same_ranking(stored, ours, reference, stored[row]), sample_bits.titles[row]


def test_free_text_queries_rank_host_and_stored_vectors_alike(embedder: MiniLMEmbedder, sample_bits: SampleBits,
                                                              host_vectors: np.ndarray) -> None:
    queries = embedder.embed(list(QUERIES))
    for text, query in zip(QUERIES, queries, strict=True):
        reference = top(sample_bits.vectors, query)
        assert same_ranking(sample_bits.vectors, top(host_vectors, query), reference, query), text


def test_the_jonah_passage_answers_the_fish_question(embedder: MiniLMEmbedder, sample_bits: SampleBits) -> None:
    (query,) = embedder.embed(["a great fish swallowed the prophet"])
    best = top(sample_bits.vectors, query, k=1)[0]
    assert sample_bits.titles[best].startswith("Jonah 1:")


def test_token_counts_equal_every_bits_token_count(embedder: MiniLMEmbedder, sample_bits: SampleBits) -> None:
    counted = [embedder.count_tokens(text) for text in sample_bits.texts]
    assert counted == sample_bits.token_counts


# ---------------------------------------------------------------- behaviour


def test_vectors_are_unit_length_float32_rows_in_input_order(embedder: MiniLMEmbedder) -> None:
    texts = ["short", "a somewhat longer text about the sea and ships and storms", "short"]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors.astype(np.float64), axis=1), 1.0, atol=1e-6)
    assert np.array_equal(vectors[0], vectors[2])
    assert cosines(vectors[:1], vectors[1:2])[0] < 0.9


def test_a_texts_vector_does_not_depend_on_its_batch(embedder: MiniLMEmbedder, sample_bits: SampleBits) -> None:
    alone = embedder.embed([QUERIES[0]])
    padded = embedder.embed([QUERIES[0], *sample_bits.texts[:5]])  # batched with much longer texts
    assert np.abs(alone[0] - padded[0]).max() < 1e-5


def test_threads_may_embed_and_count_at_once(embedder: MiniLMEmbedder) -> None:
    texts = [f"{query} ({n})" for n, query in enumerate(QUERIES)]
    serial = [(embedder.embed([text])[0], embedder.count_tokens(text)) for text in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(lambda text: (embedder.embed([text])[0], embedder.count_tokens(text)), texts))
    for (vector, count), (again, recount) in zip(serial, parallel, strict=True):
        assert np.array_equal(vector, again) and count == recount


def test_no_texts_give_an_empty_matrix(embedder: MiniLMEmbedder) -> None:
    assert embedder.embed([]).shape == (0, 384)


def test_one_string_is_refused_as_a_list_of_texts(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("a string is a sequence of characters")


def test_counting_neither_cuts_nor_adds_special_tokens(embedder: MiniLMEmbedder) -> None:
    assert embedder.count_tokens("") == 0
    assert embedder.count_tokens("hello world") == 2
    long_text = "and it came to pass " * 200
    assert embedder.count_tokens(long_text) == 5 * 200  # far past the model's 256-token window


def test_texts_past_the_window_are_cut_as_the_model_does(embedder: MiniLMEmbedder) -> None:
    common = "and the waters prevailed exceedingly upon the earth " * 40  # ~360 tokens
    first, second = embedder.embed([common + "and all the high hills were covered", common + "a red fox"])
    assert embedder.count_tokens(common) > minilm.MAX_SEQUENCE_TOKENS
    assert cosines(first[None], second[None])[0] > 0.999999  # what follows the first 254 tokens is unseen


def test_runs_take_many_short_texts_and_few_long_ones() -> None:
    batching = MiniLMEmbedder(batch_size=3, batch_tokens=100)
    lengths = [50, 10, 10, 10, 10, 60, 120]
    # Shortest first; a run stops at 3 texts or when its padded size would pass 100 tokens.
    assert batching._batches(lengths) == [[1, 2, 3], [4, 0], [5], [6]]


def test_without_bucketing_runs_take_the_texts_in_their_order() -> None:
    batching = MiniLMEmbedder(batch_size=3, bucketing=False)
    assert batching._batches([50, 10, 10, 10, 10, 60, 120]) == [[0, 1, 2], [3, 4, 5], [6]]


def test_long_and_short_texts_mixed_come_back_in_their_order(embedder: MiniLMEmbedder) -> None:
    texts = [QUERIES[0], " ".join(QUERIES), QUERIES[1], " ".join(QUERIES[:4]), QUERIES[2]]
    together = embedder.embed(texts)  # three runs of different lengths
    for text, row in zip(texts, together, strict=True):
        assert np.abs(embedder.embed([text])[0] - row).max() < 1e-5


def test_the_token_counter_counts_in_another_process_as_the_embedder_does(embedder: MiniLMEmbedder) -> None:
    counter = pickle.loads(pickle.dumps(embedder.token_counter()))  # what the importer's second process gets
    for text in ("", "hello world", QUERIES[3], "and it came to pass " * 100):
        assert counter(text) == embedder.count_tokens(text)


def test_construction_is_cheap_and_loading_is_lazy() -> None:
    fresh = MiniLMEmbedder()
    assert not fresh.loaded


def copy_model_files(directory: Path, *names: str) -> None:
    archive = minilm.packaged_archive()
    assert archive is not None  # the embedder fixture loaded from it
    with zipfile.ZipFile(archive) as source:
        for name in names:
            source.extract(name, directory)


def test_model_files_that_differ_from_the_published_ones_are_refused(tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    copy_model_files(tmp_path, minilm.TOKENIZER_FILE, minilm.WEIGHTS_FILE)
    weights = tmp_path / minilm.WEIGHTS_FILE
    with weights.open("r+b") as file:  # one weight changed, deep inside the file
        file.seek(weights.stat().st_size // 2)
        file.write(b"\x00\x00\x80\x3f")
    with pytest.raises(EmbedderError, match=r"model\.safetensors has SHA-256 .*, expected 53aa5117"):
        MiniLMEmbedder(tmp_path, cache=False).load()
    tokenizer = tmp_path / minilm.TOKENIZER_FILE
    tokenizer.write_bytes(tokenizer.read_bytes().replace(b'"[UNK]"', b'"[unk]"', 1))
    with pytest.raises(EmbedderError, match=r"tokenizer\.json has SHA-256 .*, expected be50c362"):
        MiniLMEmbedder(tmp_path, cache=False).load()


def test_model_files_from_a_directory_load_like_the_archive_even_with_no_cache(
    tmp_path: Path, embedder: MiniLMEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    copy_model_files(tmp_path, minilm.TOKENIZER_FILE, minilm.WEIGHTS_FILE)
    not_a_directory = tmp_path / "cache"
    not_a_directory.write_text("a file where the cache directory should be")
    from_directory = MiniLMEmbedder(tmp_path, cache_dir=not_a_directory)
    assert np.array_equal(from_directory.embed(["in the beginning"]), embedder.embed(["in the beginning"]))
    assert "cannot cache the embedder's graph" in caplog.text


def test_the_built_graph_is_cached_and_checked_before_use(
    tmp_path: Path, embedder: MiniLMEmbedder, minilm_cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert not embedder.graph_from_cache  # the fixture built it...
    for name in (minilm.GRAPH_NAME, f"{minilm.GRAPH_NAME}.sha256"):  # ...and stored it
        shutil.copy(minilm_cache_dir / name, tmp_path / name)
    cached = MiniLMEmbedder(cache_dir=tmp_path)
    started = time.perf_counter()
    cached.load()
    assert cached.graph_from_cache
    logging.getLogger(__name__).info("load from the cache: %.2f s", time.perf_counter() - started)
    assert np.array_equal(cached.embed(["in the beginning"]), embedder.embed(["in the beginning"]))

    graph = tmp_path / minilm.GRAPH_NAME
    with graph.open("r+b") as file:  # damage it
        file.seek(graph.stat().st_size // 2)
        file.write(b"\xff" * 16)
    rebuilt = MiniLMEmbedder(cache_dir=tmp_path)
    rebuilt.load()
    assert not rebuilt.graph_from_cache
    assert "does not match its recorded SHA-256: building it again" in caplog.text
    assert np.array_equal(rebuilt.embed(["in the beginning"]), embedder.embed(["in the beginning"]))
    assert (minilm_cache_dir / minilm.GRAPH_NAME).read_bytes() == graph.read_bytes()  # repaired


# ---------------------------------------------------------------- int8


def test_int8_vectors_stay_near_the_stored_fp32_ones(minilm_int8_embedder: MiniLMEmbedder,
                                                    sample_bits: SampleBits) -> None:
    some = slice(None, None, 4)  # a quarter of the bits: enough to see a broken graph, quick
    int8 = minilm_int8_embedder.embed(sample_bits.texts[some])
    similarity = cosines(int8, sample_bits.vectors[some])
    # docs/importing.md: min 0.997 over all 397; int8 kernels differ a little between CPUs.
    assert similarity.min() >= 0.99 and np.median(similarity) >= 0.997
    assert similarity.min() < 0.9999  # and it is not the fp32 graph under another name
    (query,) = minilm_int8_embedder.embed(["a great fish swallowed the prophet"])
    assert sample_bits.titles[top(sample_bits.vectors, query, k=1)[0]].startswith("Jonah 1:")


def test_int8_counts_tokens_as_fp32_does(minilm_int8_embedder: MiniLMEmbedder, embedder: MiniLMEmbedder) -> None:
    assert [minilm_int8_embedder.count_tokens(text) for text in QUERIES] == [embedder.count_tokens(t) for t in QUERIES]


def test_the_int8_graph_is_cached_with_its_hash_and_a_damaged_one_is_rebuilt_never_run(
    tmp_path: Path, minilm_int8_embedder: MiniLMEmbedder, minilm_cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = minilm.int8_graph_name()
    assert not minilm_int8_embedder.graph_from_cache  # the fixture built it...
    built = (minilm_cache_dir / name).read_bytes()  # ...and stored it, beside the fp32 graph, with its hash
    assert (minilm_cache_dir / f"{name}.sha256").read_text() == hashlib.sha256(built).hexdigest()
    assert (minilm_cache_dir / minilm.GRAPH_NAME).exists()
    for file in (name, f"{name}.sha256"):
        shutil.copy(minilm_cache_dir / file, tmp_path / file)
    cached = MiniLMEmbedder(cache_dir=tmp_path, precision="int8")
    cached.load()
    assert cached.graph_from_cache
    assert np.array_equal(cached.embed(["in the beginning"]), minilm_int8_embedder.embed(["in the beginning"]))

    graph = tmp_path / name
    with graph.open("r+b") as file:  # one byte flipped: still a loadable graph, with one weight wrong
        file.seek(graph.stat().st_size // 2)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0x01]))
    rebuilt = MiniLMEmbedder(cache_dir=tmp_path, precision="int8")
    rebuilt.load()
    assert not rebuilt.graph_from_cache
    assert "does not match its recorded SHA-256: building it again" in caplog.text
    assert graph.read_bytes() == built  # the build is deterministic: the same graph again
    assert np.array_equal(rebuilt.embed(["in the beginning"]), minilm_int8_embedder.embed(["in the beginning"]))


@pytest.mark.parametrize(("precision", "device", "message"), [
    ("int4", "cpu", "embedder precision must be one of fp32, int8, not 'int4'"),
    ("fp32", "tpu", "embedder device must be one of cpu, cuda, not 'tpu'"),
    ("int8", "cuda", "int8 runs on the CPU only"),
])
def test_a_precision_or_device_it_cannot_run_is_refused_in_one_line(precision: str, device: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MiniLMEmbedder(precision=precision, device=device)


def test_cuda_embeds_as_the_cpu_does_where_a_cuda_device_is_present(
    embedder: MiniLMEmbedder, sample_bits: SampleBits, minilm_cache_dir: Path
) -> None:
    import onnxruntime  # type: ignore[import-untyped]

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        # Not a CI component: CI machines have no GPU. Skipped wherever onnxruntime-gpu or CUDA is absent.
        pytest.skip("needs onnxruntime-gpu and a CUDA device")
    cuda = MiniLMEmbedder(cache_dir=minilm_cache_dir, device="cuda")
    similarity = cosines(cuda.embed(sample_bits.texts[:50]), embedder.embed(sample_bits.texts[:50]))
    assert similarity.min() > 0.99999


def test_without_a_cuda_device_cuda_is_one_clear_error(minilm_cache_dir: Path) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this machine has onnxruntime-gpu")
    with pytest.raises(EmbedderError, match=r"device cuda needs onnxruntime-gpu .* and a CUDA device"):
        MiniLMEmbedder(cache_dir=minilm_cache_dir, device="cuda").load()


def test_a_missing_model_file_is_one_clear_error(tmp_path: Path) -> None:
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "model.zip")
    with pytest.raises(EmbedderError, match=r"cannot read the sentence-transformers:all-MiniLM-L6-v2 model files"):
        MiniLMEmbedder(tmp_path / "model.zip", cache=False).load()
    with pytest.raises(EmbedderError, match=r"tokenizer\.json"):
        MiniLMEmbedder(tmp_path, cache=False).load()


# ---------------------------------------------------------------- the safetensors reader


def safetensors_bytes(header: dict[str, object], data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def test_safetensors_tensors_come_back_as_views_with_their_shapes() -> None:
    weights = np.arange(6, dtype="<f4")
    data = safetensors_bytes(
        {"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
         "ids": {"dtype": "I64", "shape": [1], "data_offsets": [24, 32]}},
        weights.tobytes() + np.array([7], "<i8").tobytes(),
    )
    tensors = read_safetensors(data)
    assert tensors["w"].shape == (2, 3) and tensors["w"][1, 2] == 5.0
    assert tensors["ids"].tolist() == [7]
    assert not tensors["w"].flags.writeable  # a view of the bytes, never a copy


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01", "shorter than its 8-byte header"),
        (struct.pack("<Q", 999) + b"{}", "exceeds the file"),
        (struct.pack("<Q", 3) + b"{x}", "bad JSON header"),
        (safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, bytes(8)), "'w'"),
        (safetensors_bytes({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "'w'"),
        (safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)), "'w'"),
    ],
)
def test_malformed_safetensors_are_refused_with_one_line(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_safetensors(data)
