"""The arguments of `POST /` (SPEC §3): defaults, strings for numbers, and one clear 400 per mistake."""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from librarian import TEST_MODEL, b64

from host.library.omit import parse_omit
from host.web.errors import HTTPError
from host.web.query_args import MAX_QUERY_MAGNITUDE, QueryArgs, parse_query_args, query_vector

untimed = settings(deadline=None)  # a cold first example may be slow on a busy machine; only answers matter

MAX_COUNT = 100_000
MAX_EMBEDDING_BYTES = 1 << 20
DIMENSION = 8


def parse(**fields: Any) -> QueryArgs:
    return parse_query_args(fields, max_count=MAX_COUNT, max_embedding_bytes=MAX_EMBEDDING_BYTES)


def refusal(**fields: Any) -> str:
    """The 400 message for these fields."""
    with pytest.raises(HTTPError) as refused:
        parse(**fields)
    assert refused.value.status == 400
    return refused.value.message


def vector_refusal(raw: bytes) -> str:
    with pytest.raises(HTTPError) as refused:
        query_vector(raw, DIMENSION, TEST_MODEL)
    assert refused.value.status == 400
    return refused.value.message


# ---- defaults and accepted forms -------------------------------------------------------------------


def test_no_arguments_mean_the_defaults() -> None:
    args = parse()

    assert args.version == 1
    assert args.count == 1000
    assert args.count_type == "token"
    assert args.omit == parse_omit("embedding")
    assert args.query_embedding is None  # a random query
    assert args.model is None  # the host's only model
    assert args.access_token is None


def test_empty_strings_mean_the_defaults() -> None:
    # The Python client posts access_token="" when it has no token.
    assert parse(version="", count="", count_type="", query_embedding="", query_embedding_model="",
                 access_token="") == parse()


def test_numbers_may_arrive_as_strings() -> None:
    assert parse(version="1", count="250") == parse(version=1, count=250)
    assert parse(count=" 42 ").count == 42


def test_a_client_reading_a_newer_version_is_answered() -> None:
    assert parse(version="2").version == 2


def test_arguments_are_read_as_given() -> None:
    args = parse(count="7", count_type="bit", omit="similarity,embedding", query_embedding_model=TEST_MODEL,
                 access_token=" sk_token ", query_embedding=b64(np.ones(DIMENSION)))

    assert (args.count, args.count_type, args.model, args.access_token) == (7, "bit", TEST_MODEL, "sk_token")
    assert args.omit == parse_omit(["similarity", "embedding"])
    assert args.query_embedding == np.ones(DIMENSION, "<f4").tobytes()


def test_unknown_arguments_are_ignored() -> None:
    # The JavaScript client may send `sort`.
    assert parse(sort="similarity", anything="else") == parse()


@pytest.mark.parametrize("omit", ["", "*", "text", "similarity,embedding", ["info", "token_count"], []])
def test_every_omit_form_is_accepted(omit: Any) -> None:
    assert parse(omit=omit).omit == parse_omit(omit)


# ---- refusals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "shown"), [
    (0, "0"), ("0", "0"), (-1, "-1"), ("-1", "-1"), ("1.5", "'1.5'"), (1.5, "1.5"), ("abc", "'abc'"),
    (True, "True"), (False, "False"), ([5], "[5]"), ({"n": 5}, "{'n': 5}"),
])
def test_count_must_be_a_positive_integer(count: Any, shown: str) -> None:
    assert refusal(count=count) == f"count must be a positive integer, got {shown}"


def test_count_has_a_ceiling() -> None:
    assert parse(count=MAX_COUNT).count == MAX_COUNT
    assert refusal(count=MAX_COUNT + 1) == f"count must be at most {MAX_COUNT}, got {MAX_COUNT + 1}"


@pytest.mark.parametrize("version", [0, "0", -3, "one", 1.0])
def test_version_must_be_at_least_1(version: Any) -> None:
    message = refusal(version=version)

    assert message.startswith("version must be")
    assert str(version) in message


@pytest.mark.parametrize("count_type", ["tokens", "bits", "TOKEN", "words"])
def test_count_type_is_token_or_bit(count_type: str) -> None:
    assert refusal(count_type=count_type) == f"count_type must be 'token' or 'bit', got {count_type!r}"


def test_count_type_must_be_a_string() -> None:
    assert refusal(count_type=1) == "count_type must be a string, got int"


@pytest.mark.parametrize(("omit", "named"), [
    ("bogus", "'bogus'"),
    ("embedding,bogus", "'bogus'"),
    (["similarity", "id"], "'id'"),
    ("*,text", "'*' must stand alone"),
    ("text,", "'' must stand alone"),
    (["", "info"], "'' must stand alone"),
    (5, "must be a string or a list of strings"),
    (["text", 5], "must be a string or a list of strings"),
])
def test_a_bad_omit_is_refused_by_name(omit: Any, named: str) -> None:
    message = refusal(omit=omit)

    assert message.startswith("omit")
    assert named in message


@pytest.mark.parametrize("embedding", [[0.1] * DIMENSION, 12, {"values": [1.0]}, True])
def test_query_embedding_must_be_a_base64_string(embedding: Any) -> None:
    assert refusal(query_embedding=embedding) == (
        "query_embedding must be a base64 string of little-endian float32 or float64 values")


@pytest.mark.parametrize("embedding", ["not base64!", "AAAA=AAA", "AAA", "é" * 8])
def test_query_embedding_must_be_valid_base64(embedding: str) -> None:
    assert refusal(query_embedding=embedding) == "query_embedding is not valid base64"


def test_a_query_embedding_longer_than_any_body_is_refused_unread() -> None:
    huge = "A" * (MAX_EMBEDDING_BYTES * 2)

    assert refusal(query_embedding=huge) == f"query_embedding is too long ({len(huge)} characters)"


@pytest.mark.parametrize("name", ["query_embedding_model", "access_token"])
def test_text_arguments_must_be_strings(name: str) -> None:
    assert refusal(**{name: ["x"]}) == f"{name} must be a string, got list"


# ---- the query vector -------------------------------------------------------------------------------


def test_float32_and_float64_are_told_apart_by_byte_length() -> None:
    values = np.linspace(-1, 1, DIMENSION)

    as_float32 = query_vector(values.astype("<f4").tobytes(), DIMENSION, TEST_MODEL)
    as_float64 = query_vector(values.astype("<f8").tobytes(), DIMENSION, TEST_MODEL)

    assert as_float32.dtype == as_float64.dtype == np.float32
    assert as_float32.shape == as_float64.shape == (DIMENSION,)
    np.testing.assert_array_equal(as_float32, values.astype(np.float32))
    np.testing.assert_array_equal(as_float64, values.astype(np.float32))


def test_an_ada_002_query_from_the_python_client_is_6144_bytes() -> None:
    raw = base64.b64decode(b64(np.full(1536, 0.025)))

    assert len(raw) == 6144
    assert query_vector(raw, 1536, "openai.com:text-embedding-ada-002").shape == (1536,)


@pytest.mark.parametrize("length", [0, 4, 28, 33, 36, 48, 72])
def test_a_wrong_length_names_the_dimension(length: int) -> None:
    message = vector_refusal(bytes(length))

    assert message == (
        f"query_embedding has {length} bytes, but {TEST_MODEL} needs {DIMENSION} values "
        f"({DIMENSION * 4} bytes as float32 or {DIMENSION * 8} as float64)"
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, MAX_QUERY_MAGNITUDE * 10, -1e30])
@pytest.mark.parametrize("dtype", ["<f4", "<f8"])
def test_non_finite_or_huge_values_are_refused(bad: float, dtype: str) -> None:
    values = np.zeros(DIMENSION)
    values[3] = bad

    message = vector_refusal(values.astype(dtype).tobytes())

    assert message == "query_embedding values must be finite numbers of magnitude at most 1e+06"


def test_float64_values_beyond_float32_are_refused_not_turned_into_infinity() -> None:
    values = np.zeros(DIMENSION)
    values[0] = 1e300

    assert vector_refusal(values.astype("<f8").tobytes()).startswith("query_embedding values must be finite")


def test_values_up_to_the_magnitude_limit_are_accepted() -> None:
    values = np.full(DIMENSION, MAX_QUERY_MAGNITUDE)

    assert query_vector(values.astype("<f8").tobytes(), DIMENSION, TEST_MODEL).max() == MAX_QUERY_MAGNITUDE


# ---- properties ---------------------------------------------------------------------------------------


@untimed
@given(st.integers(1, MAX_COUNT))
def test_any_positive_integer_string_is_read_as_that_count(count: int) -> None:
    assert parse(count=str(count)).count == count
    assert parse(count=count).count == count


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
ARGUMENTS = ["version", "query_embedding", "query_embedding_model", "count", "count_type", "omit", "access_token"]


@untimed
@given(st.dictionaries(st.sampled_from(ARGUMENTS), st.text() | json_values))
def test_any_arguments_are_either_accepted_or_a_400(fields: dict[str, Any]) -> None:
    try:
        args = parse(**fields)
    except HTTPError as refused:
        assert refused.status == 400
        assert refused.message and "\n" not in refused.message
    else:
        assert args.count >= 1 and args.version >= 1
        assert args.count_type in ("token", "bit")


@untimed
@given(st.binary(max_size=80))
def test_any_query_bytes_are_a_vector_or_a_400(raw: bytes) -> None:
    try:
        vector = query_vector(raw, DIMENSION, TEST_MODEL)
    except HTTPError as refused:
        assert refused.status == 400
    else:
        assert vector.shape == (DIMENSION,) and np.isfinite(vector).all()
