"""The result library a client reads (SPEC §3): omit forms, values, cut text, no access tags."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from librarian import TEST_MODEL, make_bit, unit_vectors, write_library

from host.catalog.generations import load_catalog
from host.catalog.model_index import ModelIndex
from host.library.canonical import canonical_id
from host.library.omit import parse_omit
from host.results.answers import build_result
from host.results.bits import cut_text_to_tokens
from host.search.engine import Selection, rank

untimed = settings(deadline=None)  # a cold first example may be slow on a busy machine; only answers matter

DIMENSION = 8
VECTORS = unit_vectors(6, DIMENSION, seed=21)
QUERY = unit_vectors(1, DIMENSION, seed=22)[0]
TOKEN_COUNTS = [12, 7, 30, 4, 9, 15]
TAGS = [None, "team", None, None, "team", None]
WHOLE_BIT = {"text", "embedding", "token_count", "similarity", "info"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    """Six bits, two of them tagged `team`."""
    folder = tmp_path_factory.mktemp("results")
    bits = [make_bit(row, vector, tokens, **({"access_tag": tag} if tag else {}))
            for row, (vector, tokens, tag) in enumerate(zip(VECTORS, TOKEN_COUNTS, TAGS))]
    write_library(folder / "libraries" / "six.json", {"version": 1, "embedding_model": TEST_MODEL, "bits": bits})
    return load_catalog(folder / "libraries", cache_dir=folder / "compiled").models[TEST_MODEL]


def everything(index: ModelIndex) -> Selection:
    """All six bits, best first, as a caller granted `team` would get them."""
    return rank(index, QUERY, granted=frozenset({"team"}), count=6, count_type="bit")


# ---- omit ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("omit", "omitted", "wire"), [
    ("", set(), ""),
    ([], set(), ""),
    ("embedding", {"embedding"}, "embedding"),
    ("similarity", {"similarity"}, "similarity"),
    ("token_count", {"token_count"}, "token_count"),
    ("info", {"info"}, "info"),
    ("text", {"text"}, "text"),
    ("access_tag", set(), "access_tag"),  # bits never carry it anyway
    ("similarity,embedding", {"similarity", "embedding"}, ["embedding", "similarity"]),
    (" info , text ", {"info", "text"}, ["text", "info"]),
    (["similarity", "embedding"], {"similarity", "embedding"}, ["embedding", "similarity"]),
    (["token_count"], {"token_count"}, "token_count"),
    ("text,embedding,token_count,similarity,info", WHOLE_BIT, ["text", "embedding", "token_count", "similarity", "info"]),
])
def test_bits_carry_exactly_the_keys_not_omitted(index: ModelIndex, omit: object, omitted: set[str], wire: object) -> None:
    result = build_result(index, everything(index), parse_omit(omit))

    assert result["omit"] == wire
    assert len(result["bits"]) == 6
    assert all(set(bit) == (WHOLE_BIT - omitted) | {"id"} for bit in result["bits"])


@pytest.mark.parametrize("omit", ["*", ["*"], " * "])
def test_omitting_everything_leaves_no_bits_but_counts_them(index: ModelIndex, omit: object) -> None:
    result = build_result(index, everything(index), parse_omit(omit))

    assert result["omit"] == "*"
    assert result["bits"] == []
    assert result["details"]["counts"]["bits"] == 6


def test_a_result_is_a_version_1_library_sorted_by_similarity(index: ModelIndex) -> None:
    result = build_result(index, everything(index), parse_omit("embedding"))

    assert result["version"] == 1 and type(result["version"]) is int
    assert result["embedding_model"] == TEST_MODEL
    assert result["sort"] == "similarity"
    assert result["details"] == {"counts": {"bits": 6}}
    similarities = [bit["similarity"] for bit in result["bits"]]
    assert similarities == sorted(similarities, reverse=True)


def test_bits_never_carry_an_access_tag(index: ModelIndex) -> None:
    result = build_result(index, everything(index), parse_omit(""))

    assert all("access_tag" not in bit for bit in result["bits"])
    assert {bit["info"]["url"] for bit in result["bits"]} == {f"https://example.com/{row}" for row in range(6)}


# ---- values -------------------------------------------------------------------------------------------


def test_similarity_is_the_dot_product_as_a_float(index: ModelIndex) -> None:
    selection = everything(index)

    result = build_result(index, selection, parse_omit(""))

    for bit, row in zip(result["bits"], selection.rows.tolist()):
        assert type(bit["similarity"]) is float
        assert bit["similarity"] == pytest.approx(float(VECTORS[row] @ QUERY), abs=1e-6)
        embedding = np.frombuffer(base64.b64decode(bit["embedding"]), dtype="<f4")
        assert bit["similarity"] == pytest.approx(float(embedding @ QUERY), abs=1e-6)


def test_embeddings_are_the_stored_float32_vectors(index: ModelIndex) -> None:
    selection = everything(index)

    as_base64 = build_result(index, selection, parse_omit(""))
    as_bytes = build_result(index, selection, parse_omit(""), binary_embeddings=True)

    for text_bit, binary_bit, row in zip(as_base64["bits"], as_bytes["bits"], selection.rows.tolist()):
        assert base64.b64decode(text_bit["embedding"]) == VECTORS[row].astype("<f4").tobytes()
        assert binary_bit["embedding"] == VECTORS[row].astype("<f4").tobytes()
        assert {k: v for k, v in text_bit.items() if k != "embedding"} == {
            k: v for k, v in binary_bit.items() if k != "embedding"}


def test_text_token_count_and_info_are_the_library_s(index: ModelIndex) -> None:
    selection = everything(index)

    result = build_result(index, selection, parse_omit("embedding"))

    for bit, row in zip(result["bits"], selection.rows.tolist()):
        written = make_bit(row, VECTORS[row], TOKEN_COUNTS[row])
        assert bit["text"] == written["text"]
        assert bit["token_count"] == TOKEN_COUNTS[row] and type(bit["token_count"]) is int
        assert bit["info"] == written["info"]


def test_the_first_bit_cut_to_the_budget_says_so(index: ModelIndex) -> None:
    ranked = everything(index)
    first = int(ranked.rows[0])
    selection = Selection(rows=ranked.rows[:1], scores=ranked.scores[:1], first_bit_cut_to=3, restricted=0)

    (bit,) = build_result(index, selection, parse_omit("embedding"))["bits"]

    whole = make_bit(first, VECTORS[first], TOKEN_COUNTS[first])["text"]
    assert bit["token_count"] == 3
    assert bit["text"] == cut_text_to_tokens(whole, TOKEN_COUNTS[first], 3)
    assert whole.startswith(bit["text"]) and len(bit["text"]) < len(whole)


def test_restricted_count_and_message_are_opt_in(index: ModelIndex) -> None:
    ranked = everything(index)
    held_back = Selection(rows=ranked.rows, scores=ranked.scores, first_bit_cut_to=None, restricted=2)
    none_held = Selection(rows=ranked.rows, scores=ranked.scores, first_bit_cut_to=None, restricted=0)
    omit = parse_omit("embedding")

    assert "restricted" not in build_result(index, held_back, omit)["details"]["counts"]
    assert build_result(index, held_back, omit, restricted_count=True)["details"]["counts"]["restricted"] == 2
    assert build_result(index, none_held, omit, restricted_count=True)["details"]["counts"]["restricted"] == 0
    assert build_result(index, held_back, omit, restricted_message="Ask for access.")["details"]["message"] == (
        "Restricted results were omitted. Ask for access.")
    assert "message" not in build_result(index, none_held, omit, restricted_message="Ask for access.")["details"]


# ---- cutting text -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "token_count", "budget", "expected"), [
    ("one two three four five six seven eight nine ten", 10, 3, "one two three"),
    ("one two three four five six seven eight nine ten", 20, 3, "one"),  # 10 words * 3 / 20 = 1.5 -> 1
    ("alpha beta gamma delta", 8, 4, "alpha beta"),
    ("  spaced   out\ttext here ", 4, 2, "  spaced   out"),
    ("unbreakable", 50, 10, ""),  # less than one whole word fits
    ("short text", 2, 2, "short text"),  # fits: untouched
    ("short text", 2, 5, "short text"),
])
def test_cut_text_keeps_whole_words_in_proportion(text: str, token_count: int, budget: int, expected: str) -> None:
    assert cut_text_to_tokens(text, token_count, budget) == expected


words = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=8),
                 min_size=1, max_size=40)


@untimed
@given(words=words, separator=st.sampled_from([" ", "  ", "\n", "\t "]),
       token_count=st.integers(1, 500), share=st.floats(0, 1))
def test_cut_text_is_a_prefix_of_whole_words(words: list[str], separator: str, token_count: int, share: float) -> None:
    text = separator.join(words)
    budget = int(token_count * share)

    cut = cut_text_to_tokens(text, token_count, budget)

    assert text.startswith(cut)
    kept = re.findall(r"\S+", cut)
    all_words = re.findall(r"\S+", text)
    assert kept == all_words[: len(kept)]
    assert len(kept) == (len(all_words) if budget >= token_count else len(all_words) * budget // token_count)


def test_every_bit_carries_its_canonical_id(index: ModelIndex) -> None:
    result = build_result(index, everything(index), parse_omit(""))

    for bit in result["bits"]:
        assert bit["id"] == canonical_id(bit["info"]["url"], bit["text"])
