"""Embedders: text -> vectors of a library's `embedding_model` (SPEC §7).

- `base.Embedder`: the interface (model id, dimension, token counter, `embed`).
- `minilm.MiniLMEmbedder`: the built-in local `sentence-transformers:all-MiniLM-L6-v2` (extra `embed`).
- `openai_http.OpenAIEmbedder`: any OpenAI-compatible `/v1/embeddings` service.
- `service.Embedders`: the host's registry, model id -> embedder, with the async query path
  (worker threads, bounded concurrency, time limit, LRU cache, stats for /metrics).

Nothing here imports `host.web`; the heavy libraries load only when a local model loads.
"""

from host.embedders.base import Embedder
from host.embedders.errors import EmbedderError, EmbedderTimeout, NoEmbedder

__all__ = ["Embedder", "EmbedderError", "EmbedderTimeout", "NoEmbedder"]
