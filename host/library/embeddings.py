"""A bit's embedding as a library file holds it: base64 of little-endian float32 values.

Also what the format knows of the values: the dimension of the models it names, and the largest
magnitude a value may have.
"""

from __future__ import annotations

import binascii
from typing import Any

import numpy as np
import pybase64

MAX_EMBEDDING_MAGNITUDE = 1e6  # larger values overflow float32 dot products into inf/NaN
ADA_002 = "openai.com:text-embedding-ada-002"
KNOWN_DIMENSIONS = {ADA_002: 1536}


def decode_embedding(encoded: Any) -> np.ndarray:
    """Base64 of little-endian float32 -> a float32 vector; raises ValueError on bad input."""
    if not isinstance(encoded, str):
        raise ValueError(f"must be a base64 string, got {type(encoded).__name__}")
    try:
        raw = pybase64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None
    if not raw or len(raw) % 4:
        raise ValueError(f"decodes to {len(raw)} bytes, not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4")


def encode_embedding(vector: np.ndarray) -> str:
    """A float32 vector as base64 of its little-endian bytes. pybase64 reads the array's own buffer
    (no `tobytes` copy): 0.35 µs for 1,536 values against 8 µs with the standard library's base64,
    which was 80 µs of a 10-bit answer (docs/performance.md, "Query speed")."""
    return pybase64.b64encode_as_string(np.ascontiguousarray(vector, dtype="<f4").data)
