"""The text index's word numbering (host/constraints/numbering.py): the C type built in CI, and the
same text index, byte for byte, whether it or the Python fallback numbered the words."""

from __future__ import annotations

import os

import numpy as np
import pytest
from compiled_or_not import compiled_or_not

from host.constraints import numbering
from host.constraints.numbering import Numbering
from host.constraints.text_index import TextIndexBuilder
from host.constraints.words import words

IN_CI = os.environ.get("CI") == "true"
needs_compiled = pytest.mark.skipif(not numbering.BUILT and not IN_CI, reason="host/constraints/_numbering.c was not built here")


@pytest.fixture(params=["compiled", "python"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    compiled_or_not(request.param, numbering, "host/constraints/_numbering.c", monkeypatch)
    return str(request.param)


def keys_in_order(numbered: Numbering) -> list[str]:
    """Every key, by number."""
    data, offsets, renumber = numbered.sorted_keys()
    ordered = [bytes(data[offsets[place] : offsets[place + 1]]).decode("utf-8", "surrogatepass")
               for place in range(len(offsets) - 1)]
    return [ordered[place] for place in renumber.tolist()]


def test_the_compiled_numbering_is_built_in_ci() -> None:
    if not IN_CI:
        pytest.skip("checked in CI, where .ci/run installs a C compiler")
    assert numbering.BUILT, "host/constraints/_numbering.c did not build: pip install -e . printed why"


def test_ascii_words_are_numbered_in_order_of_first_sight(way: str) -> None:
    numbered = Numbering("\0")
    numbers = numbered.number_ascii_words("Hello, World\0e-mail C++ HELLO_1 hello\0\0")
    assert keys_in_order(numbered) == ["\0", "hello", "world", "e", "mail", "c", "hello_1"]
    assert numbers.tolist() == [1, 2, 0, 3, 4, 5, 6, 1, 0, 0]
    assert numbers.dtype == np.int32 and len(numbered) == 7


@pytest.mark.parametrize("text", [
    "The quick brown fox, jumps over 13 lazy_dogs!",
    "a\tb\nc\x1fd\x7fe~f`g",
    "",
    "   ",
    "x" * 5000 + " y",
    "".join(map(chr, range(1, 128))),
])
def test_ascii_words_are_the_words_of_words_py(way: str, text: str) -> None:
    numbered = Numbering()
    numbers = numbered.number_ascii_words(text)
    keys = keys_in_order(numbered)
    assert [keys[number] for number in numbers.tolist()] == words(text)


def test_strings_are_keyed_by_their_utf8(way: str) -> None:
    numbered = Numbering()
    strings = ["", "é", "e\u0301", "日本", "\U0001f600", "\ud800", "é", "", "\ud800"]
    assert numbered.number_strings(strings).tolist() == [0, 1, 2, 3, 4, 5, 1, 0, 5]
    data, offsets, renumber = numbered.sorted_keys()
    encoded = sorted(string.encode("utf-8", "surrogatepass") for string in set(strings))
    assert bytes(data) == b"".join(encoded)
    assert offsets.tolist() == np.cumsum([0, *map(len, encoded)]).tolist()
    assert sorted(set(strings)) == sorted(set(strings), key=lambda string: string.encode("utf-8", "surrogatepass"))
    assert renumber.tolist() == [encoded.index(string.encode("utf-8", "surrogatepass")) for string in strings[:6]]


@pytest.mark.parametrize("strings", [
    ["https://example.com/b", "https://example.com/a", "https://example.com/", "https://example.com",
     "a\0", "a", "a\0b", "abcdefgh", "abcdefghi", "abcdefg\xff", "abcdefg", "\U0001f600", "\uffff", ""],
    # every key begins alike, one is that beginning alone, and some differ only past 8 more bytes
    ["https://example.com/bits/" + tail for tail in ("", "10", "9", "100000000a", "100000000", "100000000\0",
                                                     "0", "\u00e9t\u00e9", "12345678z", "12345678y")],
], ids=["mixed", "shared beginning"])
def test_keys_sort_by_all_their_bytes(way: str, strings: list[str]) -> None:
    numbered = Numbering()
    numbered.number_strings(strings)
    data, offsets, _ = numbered.sorted_keys()
    keys = [bytes(data[offsets[place] : offsets[place + 1]]) for place in range(len(offsets) - 1)]
    assert keys == sorted(string.encode() for string in strings)


def test_the_first_key_is_left_out_only_if_it_sorts_first(way: str) -> None:
    numbered = Numbering("\0", "b", "a")
    data, offsets, renumber = numbered.sorted_keys(skip_first=True)
    assert bytes(data) == b"ab" and offsets.tolist() == [0, 1, 2] and renumber.tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match="key 0 does not sort first"):
        Numbering("b", "a").sorted_keys(skip_first=True)


def test_many_distinct_words_grow_the_table(way: str) -> None:
    numbered = Numbering()
    text = " ".join(f"w{number}" for number in range(50_000))
    numbers = numbered.number_ascii_words(text + " " + text)
    assert numbers.tolist() == list(range(50_000)) * 2
    _, offsets, renumber = numbered.sorted_keys()
    assert len(offsets) == 50_001 and sorted(renumber.tolist()) == list(range(50_000))


RECORDS = [
    {"text": "Hello World, hello again", "info": {"url": "https://a.example/1", "title": "One", "description": "12.5"}},
    {"text": "Straße STRASSE \ufb01ne \uff26\uff55\uff4c\uff4c width",
     "info": {"url": "https://a.example/2", "title": "Ünïcödé"}},
    {"text": "a NUL\0inside", "info": {"url": "https://a.example/3", "title": "nan", "description": " 7 "}},
    {"text": "", "info": {"url": "", "title": "", "image_url": "x"}},
    {"text": "emoji \U0001f600 and 日本語 text; e-mail C++", "info": {"url": "https://a.example/1", "description": "inf"}},
    {"text": "lone \ud800 surrogate", "info": {"title": "One", "description": "-3e2"}},
]


def built(records: list[dict], order: np.ndarray | None) -> dict[str, np.ndarray]:
    builder = TextIndexBuilder()
    builder.add(records)
    return builder.finish(order)


@pytest.mark.parametrize("stored", ["fed order", "shuffled"])
def test_the_text_index_is_the_same_either_way(monkeypatch: pytest.MonkeyPatch, stored: str) -> None:
    if not numbering.BUILT:
        pytest.skip("host/constraints/_numbering.c was not built here")
    records = RECORDS * 700 + [{"text": f"row {row} of many", "info": {"url": f"u{row}"}} for row in range(5000)]
    order = np.random.default_rng(9).permutation(len(records)) if stored == "shuffled" else None
    compiled = built(records, order)
    monkeypatch.setattr(numbering, "compiled", None)
    python = built(records, order)
    assert compiled.keys() == python.keys()
    for name, array in compiled.items():
        assert array.dtype == python[name].dtype, name
        assert np.array_equal(array, python[name], equal_nan=array.dtype.kind == "f"), name


@needs_compiled
def test_positions_that_do_not_agree_are_refused_before_anything_is_written() -> None:
    compiled = numbering.compiled
    assert compiled is not None
    terms, lengths, offsets = np.array([0, 1, 0], np.int32), np.array([2, 1], np.int64), np.array([0, 2, 3], np.int64)
    out = np.full(3, -1, np.int32)
    compiled.positions_by_word(terms, lengths, np.array([1, 0], np.int64), offsets, 1, out)
    assert out.tolist() == [0b00, 0b10, 0b11]  # word 0: stored row 0 (fed row 1) place 0, row 1 place 0; word 1: row 1 place 1
    for bad in ({"terms": np.array([0, 2, 0], np.int32)}, {"lengths": np.array([2, 2], np.int64)},
                {"order": np.array([1, 1], np.int64)}, {"order": np.array([0, 2], np.int64)},
                {"offsets": np.array([0, 1, 3], np.int64)}, {"shift": 0}, {"out": np.empty(2, np.int32)}):
        arguments = {"terms": terms, "lengths": lengths, "order": np.array([1, 0], np.int64), "offsets": offsets,
                     "shift": 1, "out": np.empty(3, np.int32)} | bad
        with pytest.raises(ValueError, match="do not agree"):
            compiled.positions_by_word(arguments["terms"], arguments["lengths"], arguments["order"], arguments["offsets"],
                                       arguments["shift"], arguments["out"])
    with pytest.raises(TypeError, match="term_ids"):
        compiled.positions_by_word(terms.astype(np.int64), lengths, None, offsets, 1, out)
