"""The arguments of `POST /` (SPEC §3), read from any body type into one typed value."""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from host.catalog.selection import BadName, check_name
from host.constraints import ConstraintError, Node, parse_constraint
from host.library.format import FORMAT_VERSION
from host.library.omit import Omit, parse_omit
from host.library.problems import LibraryFormatError
from host.search.engine import CountType
from host.search.query import MODES, Mode
from host.web.errors import bad_request

DEFAULT_COUNT = 1000
DEFAULT_OMIT = "embedding"
COUNT_TYPES: tuple[CountType, ...] = ("token", "bit")
DEFAULT_OMIT_KEYS = parse_omit(DEFAULT_OMIT)
MAX_QUERY_CHARACTERS = 10_000  # far past what an embedder reads (MiniLM: 256 tokens)
MAX_QUERY_MAGNITUDE = 1e6  # larger values overflow float32 dot products into inf/NaN
MAX_LIBRARY_NAMES = 1000  # names in `libraries` (a folder's name selects any number of libraries)


@dataclass(frozen=True)
class QueryArgs:
    version: int = FORMAT_VERSION
    query_embedding: bytes | None = None  # raw bytes: float32 or float64, told apart by the model's dimension
    query: str | None = None  # text, embedded by the host (SPEC §7)
    model: str | None = None
    count: int = DEFAULT_COUNT
    count_type: CountType = "token"
    omit: Omit = DEFAULT_OMIT_KEYS
    access_token: str | None = None
    similarity_threshold: float | None = None  # SPEC §10: the list ends at the first bit below it
    constraint: Node | None = None  # SPEC §10: a query expression the bits must match
    mode: Mode | None = None  # None: hybrid for a text query, else vector (`effective_mode`)
    keyword_weight: float | None = None  # hybrid's share of the keyword score (None: the default)
    score_threshold: float | None = None  # only bits whose rank score reaches it (vector: the similarity)
    libraries: tuple[str, ...] | None = None  # only bits of what these names select (libraries or folders)

    @property
    def effective_mode(self) -> Mode:
        """The mode asked for, or the default: hybrid for text, vector for a vector or nothing."""
        if self.mode is not None:
            return self.mode
        return "hybrid" if self.query is not None else "vector"


def parse_query_args(fields: Mapping[str, Any], *, max_count: int, max_embedding_bytes: int) -> QueryArgs:
    """Validate the arguments; raises HTTPError(400) naming the argument and the value."""
    version = _positive_int(fields, "version", FORMAT_VERSION)
    if version < FORMAT_VERSION:
        raise bad_request(f"version must be >= {FORMAT_VERSION}, got {version}")
    count = _positive_int(fields, "count", min(DEFAULT_COUNT, max_count))  # a lower --max-count caps the default
    if count > max_count:
        raise bad_request(f"count must be at most {max_count}, got {count!s:.40}")
    count_type = _text(fields, "count_type") or "token"
    if count_type not in COUNT_TYPES:
        raise bad_request(f"count_type must be 'token' or 'bit', got {count_type!r:.40}")
    omit_value = fields.get("omit", DEFAULT_OMIT)
    try:
        omit = parse_omit(omit_value)
    except LibraryFormatError as problem:
        raise bad_request(str(problem)) from None
    query = _text(fields, "query") or None
    embedding = _embedding_bytes(fields.get("query_embedding"), max_embedding_bytes)
    mode = _mode(fields)
    if query is not None and embedding is not None and mode not in ("keyword", "hybrid"):
        raise bad_request("send either query (text) or query_embedding (a vector), not both "
                          "(both go together only with mode=hybrid or keyword: the vector, and the words)")
    if mode in ("keyword", "hybrid") and query is None:
        raise bad_request(f"mode={mode} ranks by the query's words: send query (text)")
    weight = keyword_weight(fields.get("keyword_weight"))
    if weight is not None and (mode or ("hybrid" if query is not None else "vector")) != "hybrid":
        raise bad_request("keyword_weight weighs keywords against meaning: it applies only to mode=hybrid "
                          "(the default for a text query)")
    if query is not None and len(query) > MAX_QUERY_CHARACTERS:
        raise bad_request(f"query is {len(query):,} characters long; at most {MAX_QUERY_CHARACTERS:,} are read")
    try:
        constraint = parse_constraint(fields["constraint"]) if fields.get("constraint") not in (None, "") else None
    except ConstraintError as problem:
        raise bad_request(f"constraint: {problem}") from None
    return QueryArgs(
        version=version,
        query_embedding=embedding,
        query=query,
        similarity_threshold=similarity_threshold(fields.get("similarity_threshold")),
        score_threshold=_optional_number(fields.get("score_threshold"), "score_threshold"),
        constraint=constraint,
        model=_text(fields, "query_embedding_model") or None,
        count=count,
        count_type=count_type,
        omit=omit,
        access_token=_text(fields, "access_token") or None,
        mode=mode,
        keyword_weight=weight,
        libraries=library_names(fields.get("libraries")),
    )


def library_names(value: Any) -> tuple[str, ...] | None:
    """`libraries`: a name or a list of names, each a library's or a folder's (host/catalog/selection.py),
    well-formed and each once; None or "": every library. In a form, a field holds one name."""
    if value is None or value == "":
        return None
    given = [value] if isinstance(value, str) else value
    if not isinstance(given, list) or not all(isinstance(name, str) for name in given):
        raise bad_request("libraries must be a library name (or a folder's) or a list of them")
    if not given:
        raise bad_request("libraries is an empty list: name a library or a folder of libraries, or leave it out")
    if len(given) > MAX_LIBRARY_NAMES:
        raise bad_request(f"libraries holds {len(given):,} names; at most {MAX_LIBRARY_NAMES:,} "
                          "(a folder's name selects every library in it)")
    try:
        return tuple(dict.fromkeys(check_name(name, "library name in libraries") for name in given))
    except BadName as problem:
        raise bad_request(str(problem)) from None


def _mode(fields: Mapping[str, Any]) -> Mode | None:
    value = _text(fields, "mode") or None
    if value is not None and value not in MODES:
        raise bad_request(f"mode must be one of {', '.join(MODES)}, got {value!r:.40}")
    return value  # one of MODES


def keyword_weight(value: Any) -> float | None:
    """A number from 0 (meaning alone) to 1 (keywords alone); "" or None: the default."""
    if value is None or value == "":
        return None
    number = _number(value, "keyword_weight")
    if not 0 <= number <= 1:
        raise bad_request(f"keyword_weight must be between 0 and 1, got {value!r:.40}")
    return number


def similarity_threshold(value: Any) -> float | None:
    """A finite number (dot-product similarities of unit vectors lie in [-1, 1]); "" or None: none."""
    return _optional_number(value, "similarity_threshold")


def _optional_number(value: Any, name: str) -> float | None:
    return None if value is None or value == "" else _number(value, name)


def _number(value: Any, name: str) -> float:
    """A finite number, from JSON or a form's string."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise bad_request(f"{name} must be a number, got {value!r:.40}")
    try:
        number = float(value)
    except ValueError:
        raise bad_request(f"{name} must be a number, got {value!r:.40}") from None
    if not math.isfinite(number):
        raise bad_request(f"{name} must be a finite number, got {value!r:.40}")
    return number


def _text(fields: Mapping[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return value.strip() if value else value
    raise bad_request(f"{name} must be a string, got {type(value).__name__}")


def _positive_int(fields: Mapping[str, Any], name: str, default: int) -> int:
    value = fields.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise bad_request(f"{name} must be a positive integer, got {value!r:.40}")
    try:
        number = int(value)
    except ValueError:
        raise bad_request(f"{name} must be a positive integer, got {value!r:.40}") from None
    if number < 1:
        raise bad_request(f"{name} must be a positive integer, got {number!s:.40}")
    return number


def _embedding_bytes(value: Any, max_bytes: int) -> bytes | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise bad_request("query_embedding must be a base64 string of little-endian float32 or float64 values")
    if len(value) > max_bytes * 4 // 3 + 4:
        raise bad_request(f"query_embedding is too long ({len(value)} characters)")
    # A form-encoded `+` arrives as a space (what `curl -d` does); base64 has no spaces, so it is a `+`.
    value = value.replace(" ", "+")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("query_embedding is not valid base64") from None


def query_vector(raw: bytes, dimension: int, model: str) -> np.ndarray:
    """Float32 (the Python client) or float64 (the JavaScript client), told apart by byte length."""
    if len(raw) == dimension * 4:
        vector = np.frombuffer(raw, dtype="<f4")
    elif len(raw) == dimension * 8:
        vector = np.frombuffer(raw, dtype="<f8")
    else:
        raise bad_request(
            f"query_embedding has {len(raw)} bytes, but {model} needs {dimension} values "
            f"({dimension * 4} bytes as float32 or {dimension * 8} as float64)"
        )
    if not np.isfinite(vector).all() or np.abs(vector).max() > MAX_QUERY_MAGNITUDE:
        raise bad_request(f"query_embedding values must be finite numbers of magnitude at most {MAX_QUERY_MAGNITUDE:g}")
    return vector.astype(np.float32, copy=False)  # float32 arrives as it is: a read-only view of the request's bytes
