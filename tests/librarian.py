"""Builders for small library files whose right answers are known, written to real files."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np

from host.catalog.plan import SEGMENTS, read_plan

TEST_MODEL = "test:unit-8"
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def b64(vector: Any, dtype: str = "<f4") -> str:
    return base64.b64encode(np.asarray(vector, dtype=dtype).tobytes()).decode()


def unit_vectors(count: int, dimension: int = 8, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def make_bit(index: int, vector: Any, token_count: int = 10, **extra: Any) -> dict[str, Any]:
    bit = {
        "text": f"bit number {index} " + " ".join(f"word{index}_{n}" for n in range(token_count)),
        "embedding": b64(vector),
        "token_count": token_count,
        "info": {"url": f"https://example.com/{index}", "title": f"Bit {index}"},
    }
    bit.update(extra)
    return bit


def make_library(vectors: np.ndarray, token_counts: list[int] | None = None, model: str = TEST_MODEL,
                 **top: Any) -> dict[str, Any]:
    counts = token_counts or [10] * len(vectors)
    return {
        "version": 1,
        "embedding_model": model,
        "bits": [make_bit(index, vector, count) for index, (vector, count) in enumerate(zip(vectors, counts))],
        **top,
    }


def write_library(path: Path, library: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(library))
    return path


def exact_dot_products(vectors: Any, query: Any) -> np.ndarray:
    """Similarities as the host defines them: accumulated in float64, rounded to float32."""
    return (np.asarray(vectors, np.float64) @ np.asarray(query, np.float64)).astype(np.float32)


def brute_force_ranking(vectors: np.ndarray, query: np.ndarray, visible: list[bool] | None = None) -> list[int]:
    """The reference order: every visible bit by descending dot product, ties by position."""
    scores = exact_dot_products(vectors, query)
    rows = [row for row in range(len(vectors)) if visible is None or visible[row]]
    return sorted(rows, key=lambda row: (-scores[row], row))


def reference_budget(ranked_tokens: list[int], count: int, count_type: str = "token") -> tuple[int, int | None]:
    """The reference budget rule: (bits taken, budget the first bit is cut to when it overflows alone)."""
    if count_type == "bit":
        return min(count, len(ranked_tokens)), None
    total = taken = 0
    for tokens in ranked_tokens:
        if total + tokens > count:
            break
        total += tokens
        taken += 1
    if taken == 0 and ranked_tokens:
        return 1, count
    return taken, None


def segment_folder(cache: Path, name: str) -> Path:
    """The folder of the segment serving library `name` in a compiled cache (host/catalog/plan.py)."""
    return cache / SEGMENTS / read_plan(cache)[name].segment
