"""Session fixtures of the local MiniLM embedder, shared by the embedder test modules
(import them by name into a test module). The graph is built once into a temporary cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from components import unavailable

from host.embedders import minilm


def require_local_embedder() -> None:
    """Skip without the `embed` extra, except in CI, where its absence is a failure."""
    problem = minilm.missing_requirement()
    if problem is not None:
        unavailable(problem)


@pytest.fixture(scope="session")
def minilm_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("graph-cache")


@pytest.fixture(scope="session")
def minilm_embedder(minilm_cache_dir: Path) -> minilm.MiniLMEmbedder:
    """Loaded, graph built (not found in the cache), all cores (these tests embed ~400 passages)."""
    require_local_embedder()
    local = minilm.MiniLMEmbedder(cache_dir=minilm_cache_dir, threads=0)
    local.load()
    return local


@pytest.fixture(scope="session")
def minilm_int8_embedder(minilm_cache_dir: Path) -> minilm.MiniLMEmbedder:
    """The int8 model, its graph built (not found in the cache) into the session's cache."""
    require_local_embedder()
    local = minilm.MiniLMEmbedder(cache_dir=minilm_cache_dir, precision="int8", threads=0)
    local.load()
    return local
