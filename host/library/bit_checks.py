"""A library file's bits checked block by block, the first copy of each kept as a `BitBlock`.

Two paths give the same result: a fast one over whole blocks (exact types, one numeric check of
all their vectors), and, at the first doubt, the field-by-field checks that name every problem
(`Problems`, host/library/problems.py).
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import msgspec
import numpy as np
import pybase64

from host.library.canonical import canonical_digest, canonical_digests
from host.library.embeddings import KNOWN_DIMENSIONS, MAX_EMBEDDING_MAGNITUDE, decode_embedding
from host.library.omit import OMITTABLE_KEYS
from host.library.problems import Problems
from host.library.visibility import SCOPE_MARK

MAX_TOKEN_COUNT = 2**31 - 1  # the compiled form holds token counts as int32
BIT_KEYS = frozenset({"id", *OMITTABLE_KEYS})


@dataclass
class BitBlock:
    """Whole bits in file order, the first copy of each kept: what a compiled store is made of."""

    vectors: np.ndarray  # (bits, dimension) float32
    token_counts: list[int]
    ids: list[bytes]  # raw SHA-256 canonical ids
    texts: list[str]
    infos: list[dict[str, str | None]]  # a None value is a field the bit does not have
    tags: list[str | None]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def records(self) -> list[dict[str, Any]]:
        """Each bit's record, {"text": ..., "info": {...}} (the store packs them from the columns)."""
        return [{"text": text, "info": info if None not in info.values() else
                 {key: value for key, value in info.items() if value is not None}}
                for text, info in zip(self.texts, self.infos, strict=True)]


class WholeBit(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A bit as the streaming reader's fast path decodes it (host/library/stream.py): only exact
    JSON types, no unknown key. Whatever does not decode as one (or fails `check_decoded`) is
    parsed again by the standard library and goes through every check, so it never changes a
    result; msgspec refuses all that the standard library refuses here (over-long numbers, NaN,
    lone surrogates, nesting), and keeps the last of duplicate keys as it does."""

    text: str
    embedding: msgspec.Raw  # its JSON, undecoded: a base64 string in quotes is decoded at once (`_decoded_matrix`)
    token_count: int
    info: dict[str, str | None]
    access_tag: str | None = None
    id: str | None = None  # ignored, as by the full checks
    similarity: float | None = None  # ignored


QUOTE = ord('"')
BLOCK = 1024  # bits checked at a time: numeric checks run on the block, a problem re-checks it bit by bit


class BitChecker:
    """Checks bits in file order, block by block, and keeps the first copy of each (id, tag).

    A block is first read on the fast path (exact types, one numeric check for all its vectors).
    Any doubt sends the whole block through the bit-by-bit path, which names every problem; so
    the fast path never changes a result, it only skips work on blocks with nothing to say.
    """

    def __init__(self, model: str, folder_tag: str | None, problems: Problems) -> None:
        self.model = model
        self.folder_tag = folder_tag
        self.problems = problems
        self.dimension: int | None = KNOWN_DIMENSIONS.get(model)
        self.read = 0
        self.dropped = 0
        self._seen: set[bytes] = set()  # id, or id + tag: 32-byte keys cost a third of hex strings

    def check(self, bits: list[Any]) -> BitBlock:
        """The whole, new bits of the next `bits` of the file (reporting the others' problems)."""
        first = self.read
        self.read += len(bits)
        fast = self._fast(bits)
        if fast is not None:
            return self._keep(fast)
        return self._keep([self._one(bit, f"bits[{first + offset}]") for offset, bit in enumerate(bits)])

    def check_decoded(self, bits: list[WholeBit]) -> BitBlock | None:
        """The next `bits`, decoded as `WholeBit`s, checked column by column; None (nothing counted)
        when any of them needs the full checks: the caller then parses them again for `check`.

        Each check runs over a whole column at a time (a comprehension, `in`, `min`), not bit by
        bit: at a million bits the per-bit steps of a loop were a third of reading the file."""
        if not bits:
            return None
        counts = [bit.token_count for bit in bits]
        tags: list[str | None] = ([bit.access_tag for bit in bits] if self.folder_tag is None
                                  else [self.folder_tag] * len(bits))
        infos = [bit.info for bit in bits]
        urls = [info.get("url") for info in infos]
        if None in urls or min(counts) < 0 or max(counts) > MAX_TOKEN_COUNT or "" in tags:
            return None
        if self.folder_tag is None and any(tag and SCOPE_MARK in tag for tag in tags):
            return None  # the careful path says what is wrong
        present = cast("list[str]", urls)  # None is refused above
        if "" in [url.strip() for url in present]:
            return None
        texts = [bit.text for bit in bits]
        try:
            ids = canonical_digests(present, texts)
            matrix = self._decoded_matrix([bit.embedding for bit in bits])
        except (binascii.Error, ValueError):  # bad base64, or text that is not UTF-8 (a lone surrogate)
            return None
        if matrix is None:
            return None
        self.read += len(bits)
        kept = self._new(ids, tags)
        if len(kept) == len(bits):
            return BitBlock(matrix, counts, ids, texts, infos, tags)
        return BitBlock(matrix[kept], [counts[row] for row in kept], [ids[row] for row in kept],
                        [texts[row] for row in kept], [infos[row] for row in kept], [tags[row] for row in kept])

    def _new(self, ids: list[bytes], tags: list[str | None]) -> list[int]:
        """Which of these bits are first copies (of their id and tag), remembering them.

        One copy per tag: which copy a caller gets is decided per caller (ModelIndex), so a private
        copy listed first never hides a public one."""
        seen = self._seen
        keys = (ids if tags.count(None) == len(tags) else
                [bit_id if tag is None else bit_id + tag.encode() for bit_id, tag in zip(ids, tags, strict=True)])
        fresh = set(keys)
        if len(fresh) == len(keys) and seen.isdisjoint(fresh):  # the usual block: no copy at all
            seen |= fresh
            return list(range(len(keys)))
        kept = []
        for row, key in enumerate(keys):
            if key in seen:
                self.dropped += 1
                continue
            seen.add(key)
            kept.append(row)
        return kept

    def _fast(self, bits: list[Any]) -> list[_Bit] | None:
        checked: list[_Bit] = []
        vectors: list[bytes] = []
        folder_tag = self.folder_tag
        for bit in bits:
            if type(bit) is not dict or not bit.keys() <= BIT_KEYS:
                return None
            text, token_count, info, encoded = bit.get("text"), bit.get("token_count"), bit.get("info"), bit.get("embedding")
            if (type(text) is not str or type(token_count) is not int or not 0 <= token_count <= MAX_TOKEN_COUNT
                    or type(info) is not dict or type(encoded) is not str):
                return None
            url = info.get("url")
            if type(url) is not str or not url.strip():
                return None
            if any(value is not None and type(value) is not str for value in info.values()):
                return None
            tag = folder_tag if folder_tag is not None else bit.get("access_tag")
            if tag is not None and (type(tag) is not str or not tag or SCOPE_MARK in tag):
                return None
            try:
                raw = pybase64.b64decode(encoded, validate=True)
                bit_id = canonical_digest(url, text)
            except (binascii.Error, ValueError):  # bad base64, or text that is not UTF-8 (a lone surrogate)
                return None
            vectors.append(raw)
            checked.append(_Bit(None, token_count, bit_id, text, info, tag))
        matrix = self._matrix(vectors)
        if matrix is None:
            return None
        return [bit._replace(vector=matrix[row]) for row, bit in enumerate(checked)]

    def _decoded_matrix(self, embeddings: list[msgspec.Raw]) -> np.ndarray | None:
        """`_matrix` of the embeddings as their JSON: base64 in quotes, or else None (any other
        value, or a string with an escape in it, is left to the full checks). Where a vector's
        base64 has no padding (4 x dimension a multiple of 3: 384, 768, 1536...), strings of the
        right length joined are one matrix of characters, checked for their quotes and decoded in
        one call; a bad character or a `=` anywhere fails it as it fails a string alone."""
        dimension = self.dimension or 0
        width = 16 * dimension // 3 + 2
        quoted = cast("list[bytes]", embeddings)  # a Raw is a buffer of the value's JSON
        if dimension and 4 * dimension % 3 == 0 and set(map(len, quoted)) == {width}:
            characters = np.frombuffer(b"".join(quoted), dtype=np.uint8).reshape(len(quoted), width)
            if not ((characters[:, 0] == QUOTE).all() and (characters[:, -1] == QUOTE).all()):
                return None
            raw = pybase64.b64decode(np.ascontiguousarray(characters[:, 1:-1]).data, validate=True)
            return self._checked(raw, len(quoted), dimension) if len(raw) == 4 * dimension * len(quoted) else None
        views = [memoryview(text) for text in quoted]
        if any(len(view) < 2 or view[0] != QUOTE or view[-1] != QUOTE for view in views):
            return None
        decode = pybase64.b64decode
        return self._matrix([decode(view[1:-1], validate=True) for view in views])

    def _matrix(self, raws: list[bytes]) -> np.ndarray | None:
        """The decoded vectors as one matrix, if all have the model's dimension and finite values
        within the limit (the dimension is learnt from the first when not known yet); else None."""
        dimension = self.dimension or (len(raws[0]) // 4 if raws else 0)
        if not dimension or any(len(raw) != 4 * dimension for raw in raws):
            return None
        return self._checked(b"".join(raws), len(raws), dimension)

    def _checked(self, raw: bytes, rows: int, dimension: int) -> np.ndarray | None:
        matrix = np.frombuffer(raw, dtype="<f4").reshape(rows, dimension)
        # max and min carry a NaN through and fail the comparisons; infinities exceed the limit.
        if rows and not (float(matrix.max()) <= MAX_EMBEDDING_MAGNITUDE and float(matrix.min()) >= -MAX_EMBEDDING_MAGNITUDE):
            return None
        self.dimension = dimension
        return matrix

    def _one(self, bit: Any, where: str) -> _Bit | None:
        """One bit checked field by field, every problem reported; None unless it is whole."""
        problems = self.problems
        if not isinstance(bit, dict):
            problems.report(f"{where}: must be an object, got {type(bit).__name__}")
            return None
        whole = True  # no problem found in this bit yet; only whole bits are kept
        for unknown in sorted(set(bit) - BIT_KEYS):
            problems.report(f"{where}: unknown key {unknown!r}")
            whole = False
        text = bit.get("text")
        if not isinstance(text, str):
            problems.report(f"{where}.text: must be a string, got {text!r:.40}")
            whole = False
        token_count = bit.get("token_count")
        if not isinstance(token_count, int) or isinstance(token_count, bool) or not 0 <= token_count <= MAX_TOKEN_COUNT:
            problems.report(
                f"{where}.token_count: must be an integer from 0 to {MAX_TOKEN_COUNT}, got {token_count!r:.40}")
            whole = False
        info = _parse_info(bit.get("info"), where, problems)
        vector = _parse_embedding(bit.get("embedding"), where, self.model, self.dimension, problems)
        if vector is not None and self.dimension is None:
            self.dimension = len(vector)
        tag = self.folder_tag if self.folder_tag is not None else bit.get("access_tag")
        if tag is not None and (not isinstance(tag, str) or not tag):
            problems.report(f"{where}.access_tag: must be a non-empty string, got {tag!r}")
            whole = False
        elif tag is not None and SCOPE_MARK in tag:
            problems.report(f"{where}.access_tag: must not hold a NUL character, got {tag!r:.80}")
            whole = False
        if not whole or info is None or vector is None:
            return None
        url = info["url"]
        assert isinstance(text, str) and isinstance(token_count, int) and isinstance(url, str)  # checked above
        return _Bit(vector, int(token_count), canonical_digest(url, text), text, info, tag)

    def _keep(self, bits: Sequence[_Bit | None]) -> BitBlock:
        whole = [bit for bit in bits if bit is not None]
        kept = [whole[row] for row in self._new([bit.id for bit in whole], [bit.tag for bit in whole])]
        vectors = np.empty((len(kept), self.dimension or 0), dtype="<f4")
        for row, bit in enumerate(kept):
            vectors[row] = bit.vector
        return BitBlock(vectors, [bit.token_count for bit in kept], [bit.id for bit in kept],
                        [bit.text for bit in kept], [bit.info for bit in kept], [bit.tag for bit in kept])


class _Bit(NamedTuple):
    vector: np.ndarray | None
    token_count: int
    id: bytes
    text: str
    info: dict[str, str | None]
    tag: str | None


def _parse_embedding(
    encoded: Any, where: str, model: str, expected_dimension: int | None, problems: Problems
) -> np.ndarray | None:
    """The bit's vector, or None after reporting why it is not one of `expected_dimension` finite floats."""
    try:
        vector = decode_embedding(encoded)
    except ValueError as problem:
        problems.report(f"{where}.embedding: {problem}")
        return None
    if expected_dimension is not None and len(vector) != expected_dimension:
        problems.report(f"{where}.embedding: has {len(vector)} dimensions, expected {expected_dimension} for {model}")
        return None
    if not np.isfinite(vector).all():
        problems.report(f"{where}.embedding: contains NaN or infinity")
        return None
    largest = np.abs(vector).max()
    if largest > MAX_EMBEDDING_MAGNITUDE:
        problems.report(f"{where}.embedding: has a value of magnitude {largest:.3g}; "
                        f"values must be at most {MAX_EMBEDDING_MAGNITUDE:g} (dot products would overflow)")
        return None
    return vector


def _parse_info(info: Any, where: str, problems: Problems) -> dict[str, str | None] | None:
    """`url` is required; other keys (image_url, title, description, ...) are optional strings."""
    if not isinstance(info, dict):
        problems.report(f"{where}.info: must be an object with a url, got {info!r:.40}")
        return None
    whole = True
    url = info.get("url")
    if not isinstance(url, str) or not url.strip():
        problems.report(f"{where}.info.url: must be a non-empty string, got {url!r:.40}")
        whole = False
    for key, value in info.items():
        if value is not None and not isinstance(value, str) and key != "url":
            problems.report(f"{where}.info.{key}: must be a string, got {value!r:.40}")
            whole = False
    if not whole:
        return None
    # Published files carry `null` for absent optional fields; absent is what clients expect.
    return {key: value for key, value in info.items() if value is not None}
