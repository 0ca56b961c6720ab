"""What a host answers, as frozen dataclasses, and the functions that read them from its JSON.

Readers take the decoded JSON and return data; a body that is not what the host sends is a
HostError naming what was missing, never a KeyError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from polymath_host_client.errors import HostError

INFO_KEYS = ("url", "title", "description", "image_url")


@dataclass(frozen=True)
class Library:
    """A library the caller may see (`GET /libraries`): `bits` is how many of its bits they may see."""

    name: str
    url: str
    embedding_model: str
    dimension: int
    bits: int


@dataclass(frozen=True)
class Bit:
    """One bit of a query's answer (`POST /`), best first. `similarity` is the cosine (None: a keyword
    query ranked without the query's vector); `score` the rank score when the answer is not ranked
    by similarity (BM25 in keyword mode, the fused 0-1 score in hybrid mode)."""

    id: str
    text: str
    token_count: int
    similarity: float | None
    url: str
    title: str | None = None
    description: str | None = None
    image_url: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    score: float | None = None


@dataclass(frozen=True)
class Answer:
    """`POST /`'s answer: the bits within the budget, and what the host said about them."""

    embedding_model: str
    bits: list[Bit]
    message: str | None = None  # details.message: e.g. that restricted bits were held back
    notes: tuple[str, ...] = ()  # details.notes: how the answer was made, e.g. "ranked by meaning alone"
    sort: str = "similarity"  # "manual" when ranked by keywords or fused: the bits' order is the host's
    best_score: float | None = None  # details.best_score: the best bit's score, kept by a threshold or not


@dataclass(frozen=True)
class Passage:
    """A passage retrieved for a question, with the library it came from and a score from 0 to 1."""

    text: str
    score: float
    bit_id: str
    library: str
    url: str
    title: str
    token_count: int
    metadata: Mapping[str, Any] = field(default_factory=dict)  # url, title, description, image_url, library, ...


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise HostError(200, f"the host's answer has no valid {name!r} in {what}")
    return value


def _object(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise HostError(200, f"the host's answer is not a JSON object where {what} should be")
    return data


def read_libraries(data: Any) -> list[Library]:
    listed = _field(_object(data, "the library list"), "libraries", list, "the library list")
    libraries = []
    for entry in listed:
        entry = _object(entry, "a library")
        libraries.append(Library(_field(entry, "name", str, "a library"), _field(entry, "url", str, "a library"),
                                 _field(entry, "embedding_model", str, "a library"),
                                 _field(entry, "dimension", int, "a library"), _field(entry, "bits", int, "a library")))
    return libraries


def read_answer(data: Any) -> Answer:
    answer = _object(data, "a query's answer")
    bits = []
    for raw in _field(answer, "bits", list, "the answer"):
        raw = _object(raw, "a bit")
        info: Mapping[str, Any] = raw["info"] if isinstance(raw.get("info"), Mapping) else {}
        similarity, score = raw.get("similarity"), raw.get("score")
        bits.append(Bit(
            id=_field(raw, "id", str, "a bit"), text=raw.get("text", "") if isinstance(raw.get("text"), str) else "",
            token_count=raw["token_count"] if isinstance(raw.get("token_count"), int) else 0,
            similarity=float(similarity) if isinstance(similarity, int | float) else None,
            url=str(info.get("url", "")), **_info_strings(info, ("title", "description", "image_url")), info=info,
            score=float(score) if isinstance(score, int | float) else None))
    details = answer.get("details")
    details = details if isinstance(details, Mapping) else {}
    message, notes, sort = details.get("message"), details.get("notes"), answer.get("sort")
    best = details.get("best_score")
    return Answer(_field(answer, "embedding_model", str, "the answer"), bits,
                  message if isinstance(message, str) else None,
                  tuple(note for note in notes if isinstance(note, str)) if isinstance(notes, list) else (),
                  sort if isinstance(sort, str) else "similarity",
                  float(best) if isinstance(best, int | float) and not isinstance(best, bool) else None)


def read_records(data: Any) -> list[Passage]:
    """The records of `POST /dify/retrieval` (the host's retrieval door that names each passage's library)."""
    passages = []
    for raw in _field(_object(data, "the retrieval's answer"), "records", list, "the retrieval's answer"):
        raw = _object(raw, "a record")
        metadata = _object(raw.get("metadata"), "a record's metadata")
        passages.append(Passage(
            text=_field(raw, "content", str, "a record"), score=float(_field(raw, "score", (int, float), "a record")),
            bit_id=_field(metadata, "bit_id", str, "a record's metadata"),
            library=_field(metadata, "library", str, "a record's metadata"),
            url=str(metadata.get("url", "")), title=_field(raw, "title", str, "a record"),
            token_count=metadata["token_count"] if isinstance(metadata.get("token_count"), int) else 0,
            metadata=dict(metadata)))
    return passages


def _info_strings(info: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, str | None]:
    return {key: info[key] if isinstance(info.get(key), str) else None for key in keys}


def error_message(data: Any, fallback: str) -> str:
    """The host's one-line message in an error body: `{"error": ...}` (and OpenAI's form), or Dify's `error_msg`."""
    if isinstance(data, Mapping):
        error = data.get("error")
        if isinstance(error, str):
            return error
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(data.get("error_msg"), str):
            return str(data["error_msg"])
    return fallback


def framework_metadata(passage: Passage) -> dict[str, Any]:
    """A passage's metadata as the framework retrievers give it: url, title, library, bit_id, score,
    token_count, and description and image_url when the bit has them."""
    extra = {key: passage.metadata[key] for key in ("description", "image_url")
             if isinstance(passage.metadata.get(key), str)}
    return {"url": passage.url, "title": passage.title, "library": passage.library, "bit_id": passage.bit_id,
            "score": passage.score, "token_count": passage.token_count, **extra}
