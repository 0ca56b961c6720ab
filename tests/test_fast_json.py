"""host/web/fast_json.py: msgspec's speed with exactly the standard library's bytes and values."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.library.json_text import parse_json as parse_json_exactly
from host.web.fast_json import parse_json, render_json


def standard(content: Any) -> bytes:
    """What the host rendered before: the standard library's JSON."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=40,
)


def test_every_unicode_character_renders_as_the_standard_library_renders_it() -> None:
    characters = [chr(point) for point in range(0x110000) if not 0xD800 <= point <= 0xDFFF]
    assert render_json("".join(characters)) == standard("".join(characters))
    for start in range(0, len(characters), 4096):
        assert render_json(characters[start : start + 4096]) == standard(characters[start : start + 4096])


@pytest.mark.parametrize("number", [0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**300, -(10**4000)])
def test_integers_of_any_size_render_as_the_standard_library_renders_them(number: int) -> None:
    assert render_json({"n": number, "list": [number, True, None]}) == standard({"n": number, "list": [number, True, None]})


def test_floats_render_as_python_writes_them_where_msgspec_alone_would_not() -> None:
    # msgspec alone writes 0.00001 for 1e-05 and 1e16 for 1e+16.
    tricky = [0.0, -0.0, 1e-05, 1.2e-05, 1e-07, 2.5e-08, 1e16, 1e+22, 1.2345678901234568e+17, 5e-324,
              1.7976931348623157e+308, 0.1, 1 / 3, -0.9999999403953552]
    assert render_json(tricky) == standard(tricky)
    generator = np.random.default_rng(0)
    # Every similarity is a float32 widened to a Python float: a million of them, of all magnitudes...
    widened = generator.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    widened = widened[np.isfinite(widened)].tolist()
    assert render_json(widened) == standard(widened)
    # ...and the same of float64 bit patterns.
    doubles = [value for value in generator.integers(0, 2**63, 200_000, dtype=np.int64).view(np.float64).tolist()
               if math.isfinite(value)]
    assert render_json([*doubles, *(-value for value in doubles)]) == standard([*doubles, *(-value for value in doubles)])


def test_floats_msgspec_writes_itself_are_those_it_writes_as_python_does() -> None:
    # Magnitudes 1e-4 to 1e16 (and zero) are left to msgspec: every usual similarity is one of them.
    generator = np.random.default_rng(1)
    exponents = generator.uniform(-4, 16, 400_000)
    doubles = (generator.uniform(1, 10, 400_000) * 10.0 ** np.floor(exponents)).tolist()
    singles = np.array(doubles, dtype=np.float32).astype(np.float64).tolist()
    edges = [float(edge) for bound in (1e-4, 1e16) for edge in np.nextafter(bound, [0, np.inf, bound])]
    for values in (doubles, singles, edges, [0.0, -0.0]):
        values = [value for value in values if 1e-4 <= abs(value) < 1e16 or value == 0]
        assert render_json([*values, *(-value for value in values)]) == standard([*values, *(-value for value in values)])
    assert render_json([np.float64(0.5), np.float64(2e-5)]) == standard([np.float64(0.5), np.float64(2e-5)])


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_any_json_value_renders_as_the_standard_library_renders_it(value: Any) -> None:
    assert render_json(value) == standard(value)


@pytest.mark.parametrize("content", [{"x": math.nan}, [math.inf], {"y": [-math.inf]}])
def test_nan_and_infinity_are_refused_as_the_standard_library_refuses_them(content: Any) -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        render_json(content)


def test_what_msgspec_alone_would_render_differently_goes_to_the_standard_library() -> None:
    class Text(str):
        pass

    assert render_json({1: "a", 2.5: "b", None: "c", False: "d"}) == b'{"1":"a","2.5":"b","null":"c","false":"d"}'
    assert render_json([Text("x")]) == standard([Text("x")])
    assert render_json(("a", 1)) == b'["a",1]'
    with pytest.raises(TypeError):
        render_json({"bytes": b"raw"})  # msgspec would have written base64
    with pytest.raises(UnicodeEncodeError):
        render_json({"lone surrogate": "\ud800"})


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.booleans(), st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : ")]))
def test_json_bodies_parse_to_the_values_the_standard_library_gives(value: Any, ascii_only: bool,
                                                                       separators: tuple[str, str]) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only, separators=separators).encode()
    assert parse_json(body) == json.loads(body)
    assert type(parse_json(body)) is type(json.loads(body))


@pytest.mark.parametrize("body", [
    b'{"count": NaN}', b'{"count": Infinity}', b'{"count": 1e400}', b'[' * 100_000 + b']' * 100_000,
    b'{"count": ' + b'7' * 5000 + b'}', b'\xff{}', b'"\\ud800"', b'"\xed\xa0\x80"', b'\xef\xbb\xbf{}',
    '{"query": "\u00e9"}'.encode("utf-16"), b"", b"{", b'{"a": 1,}', b"[1] [2]", b"\x0c{}",
])
def test_bodies_msgspec_refuses_parse_or_fail_as_they_always_did(body: bytes) -> None:
    try:
        expected: Any = ("value", parse_json_exactly(body))
    except ValueError as problem:
        expected = ("error", str(problem))
    try:
        found: Any = ("value", parse_json(body))
    except ValueError as problem:
        found = ("error", str(problem))
    assert found == expected


def test_a_repeated_key_keeps_its_last_value_and_big_integers_stay_exact() -> None:
    assert parse_json(b'{"count": 1, "count": 2}') == {"count": 2}
    assert parse_json(b'{"count": 123456789012345678901234567890}') == {"count": 123456789012345678901234567890}
