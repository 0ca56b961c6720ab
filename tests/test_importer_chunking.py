"""Chunking follows the text's structure, keeps within the budget, counts exactly, never cuts a word."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.importer.chunking import chunk_document, pack_blocks, tidy
from host.importer.document import Document, Section
from host.importer.slugs import Slugger, slug


def words(text: str) -> int:
    return len(text.split())


def characters_over_four(text: str) -> int:
    """A counter where joining text is not additive (as with BPE tokenizers): ceil(len / 4)."""
    return math.ceil(len(text) / 4)


def sentence(number: int, length: int = 6) -> str:
    return " ".join(f"w{number}x{index}" for index in range(length - 1)) + f" end{number}."


def test_paragraphs_that_fit_together_are_packed_into_one_chunk():
    assert pack_blocks(["one two", "three four five"], 10, words) == [("one two\n\nthree four five", 5)]


def test_a_paragraph_that_does_not_fit_starts_the_next_chunk():
    chunks = pack_blocks(["a b c d", "e f g", "h i"], 7, words)
    assert chunks == [("a b c d\n\ne f g", 7), ("h i", 2)]


def test_a_long_paragraph_is_cut_between_sentences():
    paragraph = " ".join(sentence(number) for number in range(5))  # 5 sentences of 6 words
    chunks = pack_blocks([paragraph], 13, words)
    assert [text for text, _ in chunks] == [
        f"{sentence(0)} {sentence(1)}", f"{sentence(2)} {sentence(3)}", sentence(4),
    ]


def test_lines_of_a_list_are_kept_whole_before_sentences_are_tried():
    block = "- first item here\n- second item here\n- third item here"
    chunks = pack_blocks([block], 8, words)
    assert [text for text, _ in chunks] == ["- first item here\n- second item here", "- third item here"]


def test_a_sentence_longer_than_the_budget_is_cut_between_words():
    chunks = pack_blocks(["one two three four five six seven"], 3, words)
    assert chunks == [("one two three", 3), ("four five six", 3), ("seven", 1)]


def test_a_single_word_longer_than_the_budget_is_kept_whole_on_its_own():
    long_word = "x" * 40
    chunks = pack_blocks([f"short {long_word} tail"], 3, characters_over_four)
    assert chunks == [("short", 2), (long_word, 10), ("tail", 1)]


def test_a_non_additive_counter_never_gets_a_chunk_over_budget():
    blocks = ["ab cd ef gh", "ij kl", "mn op qr", "st"] * 5
    for budget in range(3, 20):
        for text, count in pack_blocks(blocks, budget, characters_over_four):
            assert count == characters_over_four(text) <= budget


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.text(alphabet="abcdefgh.!? \n", min_size=1, max_size=60), min_size=1, max_size=5),
                min_size=1, max_size=4),
       st.integers(min_value=1, max_value=30))
def test_chunks_keep_every_word_in_order_and_each_count_is_exact(sections, budget):
    document = Document("T", [Section(("T", f"s{index}"), None, blocks) for index, blocks in enumerate(sections)])
    chunks = chunk_document(document, budget, words)
    expected = [word for blocks in sections for block in blocks for word in block.split()]
    assert [word for chunk in chunks for word in chunk.text.split()] == expected  # no word cut, lost or moved
    for chunk in chunks:
        assert chunk.token_count == words(chunk.text) <= budget


def test_a_heading_with_its_subsections_is_one_chunk_when_all_of_it_fits():
    document = Document("Post", [
        Section(("Post",), None, ["Intro."]),
        Section(("Post", "Setup"), "setup", ["Install it."]),
        Section(("Post", "Setup", "Linux"), "linux", ["Use apt."]),
        Section(("Post", "Usage"), "usage", ["Run it now please."]),
    ])
    chunks = chunk_document(document, 8, words)
    assert [(chunk.title, chunk.anchor, chunk.text) for chunk in chunks] == [
        ("Post", None, "Intro."),
        ("Post \u203a Setup", "setup", "Install it.\n\nLinux\n\nUse apt."),
        ("Post \u203a Usage", "usage", "Run it now please."),
    ]
    whole = chunk_document(document, 100, words)
    assert len(whole) == 1 and whole[0].text.startswith("Intro.\n\nSetup\n\nInstall it.\n\nLinux")


def test_sections_without_text_give_no_chunks():
    document = Document("Post", [Section(("Post",), None, []), Section(("Post", "Empty"), "empty", ["  "])])
    assert chunk_document(document, 10, words) == []


def test_tidy_keeps_one_space_between_words_no_blank_lines_and_the_indentation():
    assert tidy("a\t b\u00a0 c \n\n\n  d  e ") == "a b c\n  d e"


def test_the_budget_must_be_positive():
    with pytest.raises(ValueError, match="at least 1 token"):
        chunk_document(Document("T", []), 0, words)


# ---- anchors as GitHub makes them ----------------------------------------------------------------


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Hello World", "hello-world"),
    ("What's new in 2.0?", "whats-new-in-20"),
    ("C++ & Rust: a comparison", "c--rust-a-comparison"),
    ("snake_case stays", "snake_case-stays"),
    ("Ünïcödé Straße", "ünïcödé-straße"),
    ("Emoji 🎉 party", "emoji--party"),
    ("  spaced  ", "--spaced--"),
])
def test_slugs_match_githubs(heading, anchor):
    assert slug(heading) == anchor


def test_repeated_slugs_are_numbered_in_order():
    slugger = Slugger()
    assert [slugger.slug(text) for text in ["Setup", "Setup", "Setup-1", "Setup"]] == [
        "setup", "setup-1", "setup-1-1", "setup-2",
    ]
