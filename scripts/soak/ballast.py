"""The abuser's own model, `ballast:256`: a library large enough for answers that hurt, and a target.

- `ballast.json`: 3,000 bits of 256 dimensions and ~1 KB of text each (a 7.8 MB file), never
  changed. Each of its bits with its embedding is ~2.6 KB of JSON, so `count` alone sets an
  answer's size: the oversized answers, the ones just under `--max-answer-bytes`, the slow
  readers' answers (larger than the kernel's send buffer, or not).
- `target.json`: 4 bits, republished in numbered versions and replaced by hostile files; its text
  names its version ("target V=<V> i=<i>"), so a download tells which version is served.

Both are published in every run, with abuse or without, so the two runs' memory compares like with
like. The well-behaved load never asks this model (each of its requests names `soak:32`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from .model import b64
from .publisher import write_atomically

BALLAST_MODEL = "ballast:256"
BALLAST_DIMENSION = 256
BALLAST_BITS = 3000
TARGET = "target"
TARGET_TEXT = re.compile(r"^target V=(\d+) i=(\d+)$")


def ballast_library(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((BALLAST_BITS, BALLAST_DIMENSION))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    filler = " ".join(f"ballast{n:04d}" for n in range(84))  # ~1 KB
    bits = [{"text": f"ballast {row:04d} {filler}", "embedding": b64(vector), "token_count": 250,
             "info": {"url": f"https://soak.example/ballast/{row}"}} for row, vector in enumerate(vectors)]
    return {"version": 1, "embedding_model": BALLAST_MODEL, "bits": bits}


def target_library(version: int) -> dict[str, Any]:
    axes = np.eye(BALLAST_DIMENSION, dtype=np.float32)
    bits = [{"text": f"target V={version} i={row}", "embedding": b64(axes[row]), "token_count": 10,
             "info": {"url": f"https://soak.example/target/{version}/{row}"}} for row in range(4)]
    return {"version": 1, "embedding_model": BALLAST_MODEL, "bits": bits}


def publish_ballast(root: Path, seed: int) -> None:
    write_atomically(root / "ballast.json", json.dumps(ballast_library(seed)))
    write_atomically(root / f"{TARGET}.json", json.dumps(target_library(1)))


def random_query(seed: int) -> str:
    """A random unit query for the ballast model: each gives a distinct answer (and cache entry)."""
    vector = np.random.default_rng(seed).standard_normal(BALLAST_DIMENSION)
    return b64(vector / np.linalg.norm(vector))
