"""The library file format (SPEC §2): what a publisher may write, and what each mistake is called.

Every problem is one `LibraryFormatError` line naming the bit and the field, so these tests
check the wording a publisher would read, not just that something was refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from librarian import TEST_MODEL, b64, make_bit, make_library, unit_vectors

from host.library.canonical import canonical_id
from host.library.embeddings import ADA_002, decode_embedding
from host.library.format import ParsedLibrary, parse_library
from host.library.omit import Omit, parse_omit
from host.library.problems import LibraryFormatError


def three_bit_library(**top: Any) -> dict[str, Any]:
    return make_library(unit_vectors(3), **top)


def problem_with(library: Any) -> str:
    """The one-line message `parse_library` refuses `library` with."""
    with pytest.raises(LibraryFormatError) as refused:
        parse_library(library)
    message = str(refused.value)
    assert "\n" not in message
    return message


def with_second_bit(**changes: Any) -> dict[str, Any]:
    """A good library whose bits[1] has `changes` applied (a value of ... deletes the key)."""
    library = three_bit_library()
    bit = library["bits"][1]
    for key, value in changes.items():
        if value is ...:
            del bit[key]
        else:
            bit[key] = value
    return library


# ---- a good file ---------------------------------------------------------------------------


def test_a_version_1_library_parses_into_arrays_and_records():
    vectors = unit_vectors(3)
    parsed = parse_library(make_library(vectors, [5, 0, 12], details={"message": "hello"}, sort="manual"))

    assert isinstance(parsed, ParsedLibrary)
    assert parsed.embedding_model == TEST_MODEL
    assert parsed.dimension == 8
    assert parsed.embeddings.dtype == np.float32 and parsed.embeddings.flags.c_contiguous
    np.testing.assert_array_equal(parsed.embeddings, vectors)
    assert parsed.token_counts.tolist() == [5, 0, 12]
    assert parsed.records[0] == {"text": make_bit(0, vectors[0], 5)["text"],
                                 "info": {"url": "https://example.com/0", "title": "Bit 0"}}
    assert parsed.access_tags == [None, None, None]
    assert parsed.details == {"message": "hello"}
    assert parsed.sort == "manual"
    assert parsed.duplicates_dropped == 0


def test_ada_002_library_of_1536_dimensions_parses():
    library = make_library(unit_vectors(2, dimension=1536), model=ADA_002)
    assert parse_library(library).dimension == 1536


def test_empty_bits_list_is_a_valid_library():
    parsed = parse_library({"version": 1, "embedding_model": TEST_MODEL, "bits": []})
    assert parsed.ids == [] and parsed.embeddings.shape[0] == 0


def test_embedding_decodes_as_little_endian_float32():
    vector = np.array([1.5, -2.0, 0.25], dtype="<f4")
    assert decode_embedding(b64(vector)).tolist() == [1.5, -2.0, 0.25]
    # The same numbers written big-endian are different numbers, not the same vector.
    assert decode_embedding(b64(vector, dtype=">f4")).tolist() != [1.5, -2.0, 0.25]


# ---- one message per problem, naming the bit and the field ---------------------------------


def test_missing_text_names_the_bit_and_field():
    assert problem_with(with_second_bit(text=...)).startswith("bits[1].text: must be a string")


@pytest.mark.parametrize("token_count", [-1, 1.5, 87.0, True, "87", None, 2**31, 3_000_000_000, 2**63, 10**30])
def test_token_count_must_be_an_integer_the_compiled_form_holds_exactly(token_count):
    message = problem_with(with_second_bit(token_count=token_count))
    assert message == f"bits[1].token_count: must be an integer from 0 to 2147483647, got {token_count!r:.40}"


def test_the_largest_token_count_the_compiled_form_holds_is_accepted():
    assert parse_library(with_second_bit(token_count=2**31 - 1)).token_counts[1] == 2**31 - 1


@pytest.mark.parametrize("value", [3e38, -2e6, 1e6 * 1.0001])
def test_embedding_values_that_would_overflow_a_dot_product_are_refused(value):
    vector = np.zeros(8, dtype=np.float32)
    vector[3] = value
    message = problem_with(with_second_bit(embedding=b64(vector)))
    assert message.startswith("bits[1].embedding: has a value of magnitude ")
    assert message.endswith("values must be at most 1e+06 (dot products would overflow)")


def test_zero_token_count_is_allowed():
    assert parse_library(with_second_bit(token_count=0)).token_counts[1] == 0


def test_missing_info_url_names_the_bit_and_field():
    message = problem_with(with_second_bit(info={"title": "no url"}))
    assert message.startswith("bits[1].info.url: must be a non-empty string")


def test_missing_info_names_the_bit_and_field():
    assert problem_with(with_second_bit(info=...)).startswith("bits[1].info: must be an object with a url")


def test_non_string_info_field_names_the_key():
    message = problem_with(with_second_bit(info={"url": "https://x", "title": 7}))
    assert message == "bits[1].info.title: must be a string, got 7"


@pytest.mark.parametrize(
    ("embedding", "complaint"),
    [
        ("not base64!", "is not valid base64"),
        ("AAAA", "decodes to 3 bytes, not a whole number of float32 values"),
        ("", "decodes to 0 bytes"),
        ([0.1, 0.2], "must be a base64 string, got list"),
    ],
)
def test_bad_embedding_names_the_bit_and_what_is_wrong(embedding, complaint):
    message = problem_with(with_second_bit(embedding=embedding))
    assert message.startswith("bits[1].embedding: ") and complaint in message


def test_every_bit_must_share_the_first_bits_dimension():
    library = with_second_bit(embedding=b64(np.ones(7)))
    assert problem_with(library) == f"bits[1].embedding: has 7 dimensions, expected 8 for {TEST_MODEL}"


def test_ada_002_embeddings_must_have_1536_dimensions_even_in_the_first_bit():
    library = make_library(unit_vectors(2, dimension=1024), model=ADA_002)
    assert problem_with(library) == f"bits[0].embedding: has 1024 dimensions, expected 1536 for {ADA_002}"


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_non_finite_embedding_values_are_refused(bad_value):
    vector = unit_vectors(1)[0]
    vector[3] = bad_value
    assert problem_with(with_second_bit(embedding=b64(vector))) == "bits[1].embedding: contains NaN or infinity"


def test_unknown_bit_key_is_named():
    assert problem_with(with_second_bit(embeddings="typo")) == "bits[1]: unknown key 'embeddings'"


@pytest.mark.parametrize(("bit", "kind"), [("text", "str"), (["a"], "list"), (None, "NoneType")])
def test_bits_must_be_objects(bit, kind):
    library = three_bit_library()
    library["bits"][2] = bit
    assert problem_with(library) == f"bits[2]: must be an object, got {kind}"


def test_bits_must_be_a_list():
    assert problem_with(three_bit_library(bits={"a": {}})) == "bits: must be a list"


def test_empty_access_tag_in_a_bit_is_refused():
    assert problem_with(with_second_bit(access_tag="")) == "bits[1].access_tag: must be a non-empty string, got ''"


def test_first_problem_in_file_order_is_the_one_reported():
    library = three_bit_library()
    del library["bits"][2]["text"]
    library["bits"][1]["token_count"] = -5
    assert problem_with(library).startswith("bits[1].token_count")


# ---- the top level -------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, -1, "1", None, True, 1.0])
def test_version_must_be_0_or_1(version):
    assert problem_with(three_bit_library(version=version)) == f"version: expected 0 or 1, got {version!r}"


def test_a_library_must_be_a_json_object():
    assert problem_with([1, 2]) == "a library must be a JSON object, got list"


@pytest.mark.parametrize("model", ["", "   ", None, 1536])
def test_embedding_model_must_be_named(model):
    assert problem_with(three_bit_library(embedding_model=model)).startswith("embedding_model: must be a non-empty string")


@pytest.mark.parametrize("sort", ["any", "similarity", "manual", "random"])
def test_each_sort_type_is_accepted(sort):
    assert parse_library(three_bit_library(sort=sort)).sort == sort


def test_missing_sort_means_any():
    assert parse_library(three_bit_library()).sort == "any"


@pytest.mark.parametrize("sort", ["newest", "", {"type": "manual"}])
def test_unknown_sort_is_refused_with_the_choices(sort):
    message = problem_with(three_bit_library(sort=sort))
    assert message == f"sort: expected one of any, similarity, manual, random, got {sort!r}"


def test_details_must_be_an_object():
    assert problem_with(three_bit_library(details="hi")) == "details: must be an object, got 'hi'"


def test_a_hosted_library_may_not_omit_what_queries_need():
    message = problem_with(three_bit_library(omit=["embedding", "info"]))
    assert message == "omit: a hosted library needs every bit whole, but this file omits embedding, info"


def test_a_hosted_library_may_declare_it_omits_similarity():
    assert len(parse_library(three_bit_library(omit="similarity")).ids) == 3


# ---- omit ----------------------------------------------------------------------------------


@pytest.mark.parametrize("nothing", ["", None, [], [""]])
def test_omit_nothing(nothing):
    assert parse_omit(nothing) == Omit()
    assert parse_omit(nothing).to_wire() == ""


@pytest.mark.parametrize("everything", ["*", ["*"]])
def test_omit_star_means_whole_bits_are_gone(everything):
    omit = parse_omit(everything)
    assert omit.everything and "text" in omit and "info" in omit
    assert omit.to_wire() == "*"


def test_omit_a_single_key():
    omit = parse_omit("embedding")
    assert "embedding" in omit and "text" not in omit
    assert omit.to_wire() == "embedding"


def test_omit_a_comma_list_with_spaces():
    omit = parse_omit("embedding, similarity")
    assert omit.keys == {"embedding", "similarity"}
    assert omit.to_wire() == ["embedding", "similarity"]


def test_omit_a_list_of_keys():
    assert parse_omit(["info", "access_tag"]).keys == {"info", "access_tag"}


def test_omit_unknown_key_is_named():
    with pytest.raises(LibraryFormatError, match="omit: unknown key 'embeding'"):
        parse_omit("text,embeding")


@pytest.mark.parametrize("value", ["*,text", ["text", "*"], "text,", ["text", ""], ",text"])
def test_omit_nothing_or_everything_must_stand_alone(value):
    with pytest.raises(LibraryFormatError, match="must stand alone"):
        parse_omit(value)


@pytest.mark.parametrize("value", [3, {"embedding": True}, ["text", 1]])
def test_omit_must_be_a_string_or_list_of_strings(value):
    with pytest.raises(LibraryFormatError, match="omit must be a string or a list of strings"):
        parse_omit(value)


# ---- version 0 ------------------------------------------------------------------------------


def version_0(ids: list[str], sort: Any = None) -> dict[str, Any]:
    vectors = unit_vectors(len(ids))
    library: dict[str, Any] = {
        "version": 0,
        "embedding_model": TEST_MODEL,
        "content": {bit_id: make_bit(index, vectors[index]) for index, bit_id in enumerate(ids)},
    }
    if sort is not None:
        library["sort"] = sort
    return library


def urls(parsed: ParsedLibrary) -> list[str]:
    return [record["info"]["url"] for record in parsed.records]


def test_version_0_bits_come_in_content_key_order():
    parsed = parse_library(version_0(["c", "a", "b"]))
    assert urls(parsed) == ["https://example.com/0", "https://example.com/1", "https://example.com/2"]
    assert parsed.sort == "any"


def test_version_0_sort_ids_set_the_order_and_type_becomes_the_sort_string():
    parsed = parse_library(version_0(["c", "a", "b"], sort={"type": "manual", "ids": ["b", "c", "a"]}))
    assert urls(parsed) == ["https://example.com/2", "https://example.com/0", "https://example.com/1"]
    assert parsed.sort == "manual"


def test_version_0_bits_left_out_of_sort_ids_follow_in_key_order():
    parsed = parse_library(version_0(["a", "b", "c"], sort={"type": "manual", "ids": ["c"]}))
    assert urls(parsed) == ["https://example.com/2", "https://example.com/0", "https://example.com/1"]


def test_version_0_sort_without_ids_keeps_key_order():
    parsed = parse_library(version_0(["x", "y"], sort={"type": "random"}))
    assert urls(parsed) == ["https://example.com/0", "https://example.com/1"] and parsed.sort == "random"


def test_version_0_sort_ids_must_be_keys_of_content():
    message = problem_with(version_0(["a", "b"], sort={"type": "manual", "ids": ["a", "zzz"]}))
    assert message == "sort.ids: must list ids that are keys of content"


def test_version_0_unknown_sort_type_is_refused():
    assert problem_with(version_0(["a"], sort={"type": "newest"})).startswith("sort: expected one of")


def test_version_0_needs_content():
    assert problem_with({"version": 0, "embedding_model": TEST_MODEL, "bits": []}).startswith("content:")


def test_version_0_bits_are_validated_like_version_1_bits():
    library = version_0(["a", "b"])
    del library["content"]["b"]["token_count"]
    assert problem_with(library).startswith("bits[1].token_count:")


# ---- identity and duplicates ----------------------------------------------------------------


def test_parsed_ids_are_canonical_whatever_id_the_file_gives():
    library = with_second_bit(id="publisher-chosen")
    bit = library["bits"][1]
    assert parse_library(library).ids[1] == canonical_id(bit["info"]["url"], bit["text"])


def test_duplicate_bits_collapse_and_the_first_wins():
    library = three_bit_library()
    copy = dict(library["bits"][0], text="  " + library["bits"][0]["text"] + "\n",
                token_count=99, info={"url": "https://example.com/0 ", "title": "the copy"})
    library["bits"].insert(2, copy)

    parsed = parse_library(library)

    assert len(parsed.ids) == 3 and parsed.duplicates_dropped == 1
    assert parsed.records[0]["info"]["title"] == "Bit 0"
    assert parsed.token_counts.tolist() == [10, 10, 10]
    assert parsed.embeddings.shape == (3, 8)
    assert urls(parsed) == ["https://example.com/0", "https://example.com/1", "https://example.com/2"]


def test_a_private_copy_before_a_public_one_keeps_both_for_each_caller_to_get_one():
    library = three_bit_library()
    library["bits"].insert(0, dict(library["bits"][1], access_tag="staff"))

    parsed = parse_library(library)

    assert len(parsed.ids) == 4 and parsed.ids[0] == parsed.ids[2]
    assert parsed.access_tags == ["staff", None, None, None]


def test_same_text_at_another_url_is_another_bit():
    library = three_bit_library()
    library["bits"].append(dict(library["bits"][0], info={"url": "https://elsewhere.example/0"}))
    assert len(parse_library(library).ids) == 4


# ---- info and access tags -------------------------------------------------------------------


def test_null_info_fields_are_dropped():
    library = with_second_bit(info={"url": "https://x", "title": None, "image_url": None, "description": "d"})
    assert parse_library(library).records[1]["info"] == {"url": "https://x", "description": "d"}


def test_access_tag_comes_from_the_bit_without_a_folder_tag():
    parsed = parse_library(with_second_bit(access_tag="staff"))
    assert parsed.access_tags == [None, "staff", None]


def test_folder_access_tag_overrides_every_bit():
    parsed = parse_library(with_second_bit(access_tag="staff"), access_tag="unpublished")
    assert parsed.access_tags == ["unpublished"] * 3


def test_access_tag_is_not_part_of_the_record():
    assert "access_tag" not in parse_library(with_second_bit(access_tag="staff")).records[1]


def test_a_consuming_parse_gives_the_same_library_and_lets_each_bit_go():
    kept, consumed = three_bit_library(), three_bit_library()

    expected = parse_library(kept)
    parsed = parse_library(consumed, consume=True)

    assert parsed.ids == expected.ids and parsed.records == expected.records
    assert np.array_equal(parsed.embeddings, expected.embeddings)
    assert consumed["bits"] == [None, None, None]  # their base64 strings can be freed at once
    assert all(bit is not None for bit in kept["bits"])
