"""What the soak publishes, and the requests the well-behaved load makes.

Each published version is checkable from an answer alone. Against the query e0 (or -e0), bit i of
library L in version V has similarity s = 0.9 - 0.02 i - 0.002 L - 0.0001 (V mod 10), and its text
says "soak L=<L> V=<V> i=<i> T=<pub|priv>"; version V has 12 + V mod 5 bits. Libraries 0-3 are
public (0 is replaced and broken, never deleted); library 4 is private, in `access/unpublished/`.
scripts/soak/check.lua repeats `bits_in_version` and `similarity`: the two must agree.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

MODEL = "soak:32"
DIMENSION = 32
PUBLIC_LIBRARIES = (0, 1, 2, 3)
PRIVATE = 4  # libraries/access/unpublished/private.json
TEXT = re.compile(r"^soak L=(\d+) V=(\d+) i=(\d+) T=(pub|priv)\b")
# What the number of bits in an answer says about the request that got it (see request_set):
# bits -> (caller, count_type, count).
KINDS = {12: ("anonymous", "bit", 12), 6: ("anonymous", "token", 65),
         13: ("token", "bit", 13), 7: ("token", "token", 75)}
E0 = np.eye(DIMENSION, dtype=np.float32)[0]


def bits_in_version(version: int) -> int:
    return 12 + version % 5


def similarity(library: int, version: int, row: int) -> float:
    return 0.9 - 0.02 * row - 0.002 * library - 0.0001 * (version % 10)


def b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def library_file(library: int, version: int) -> dict[str, Any]:
    """Version `version` of library `library`, as its file holds it."""
    bits = []
    for row in range(bits_in_version(version)):
        s = similarity(library, version, row)
        vector = np.zeros(DIMENSION, dtype=np.float64)
        vector[0], vector[1 + library] = s, np.sqrt(1 - s * s)
        kind = "priv" if library == PRIVATE else "pub"
        bits.append({
            "text": f"soak L={library} V={version} i={row} T={kind} " + " ".join(f"w{n}" for n in range(8)),
            "embedding": b64(vector),
            "token_count": 10,
            "info": {"url": f"https://soak.example/{library}/{version}/{row}", "title": f"L{library} V{version}"},
        })
    return {"version": 1, "embedding_model": MODEL, "bits": bits}


def library_path(root: Path, library: int) -> Path:
    if library == PRIVATE:
        return root / "access" / "unpublished" / "private.json"
    return root / f"lib{library}.json"


def library_name(library: int) -> str:
    """Its name in URLs: /libraries/<name>.json."""
    return "access/unpublished/private" if library == PRIVATE else f"lib{library}"


def request_set(token: str) -> list[dict[str, Any]]:
    """Six requests; the number of bits each returns tells which it was (KINDS).

    Each names its model: the host also serves the abuser's model (scripts/soak/ballast.py), and
    a query that names none is then a 400.
    """
    requests = []
    for caller in ("anonymous", "token"):
        headers = {"Content-Type": "application/json"}
        if caller == "token":
            headers["Authorization"] = f"Bearer {token}"
        extra = 1 if caller == "token" else 0
        for vector, count_type, count in ((E0, "bit", 12 + extra), (-E0, "bit", 12 + extra),
                                          (E0, "token", 65 + 10 * extra)):
            body = json.dumps({"query_embedding": b64(vector), "query_embedding_model": MODEL, "count": count,
                               "count_type": count_type})
            requests.append({"headers": headers, "body": body, "caller": caller})
    return requests
