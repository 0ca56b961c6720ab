"""Canonical ids (host/library/canonical.py): SHA-256 of the stripped url, a newline and the
stripped text, the same from the C block function (SHA-NI, built in CI) as from hashlib."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest
from compiled_or_not import compiled_or_not

from host.library import canonical
from host.library.canonical import canonical_digests, canonical_id

IN_CI = os.environ.get("CI") == "true"
CPUINFO = Path("/proc/cpuinfo")
HAS_SHA_NI = CPUINFO.exists() and " sha_ni" in CPUINFO.read_text()
# Unicode whitespace that str.strip() removes (and C's isspace would not), and ASCII's least known.
SPACES = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2003", "\u3000"]


@pytest.fixture(params=["compiled", "python"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "compiled" and not HAS_SHA_NI:
        pytest.skip("this CPU has no SHA instructions: host/library/_canonical.c refuses to load")
    compiled_or_not(request.param, canonical, "host/library/_canonical.c", monkeypatch)
    return str(request.param)


def expected(url: str, text: str) -> bytes:
    return hashlib.sha256(f"{url.strip()}\n{text.strip()}".encode()).digest()


def test_an_id_is_the_sha256_of_the_stripped_url_a_newline_and_the_stripped_text() -> None:
    assert canonical_id("  https://a.example/x\n", "\tSome text.  ") == hashlib.sha256(
        b"https://a.example/x\nSome text.").hexdigest()
    assert canonical_id("u", "café") == hashlib.sha256("u\ncafé".encode()).hexdigest()


def test_a_block_of_ids_is_each_bits_digest(way: str) -> None:
    urls = ["https://a.example/x", "  https://a.example/y \n", "u", "", " "]
    texts = ["Some text.", "\tMore text.  ", "café", "", "\u2003 unicode spaces \u3000"]
    assert canonical_digests(urls, texts) == [expected(url, text) for url, text in zip(urls, texts)]
    assert canonical_digests([], []) == []


@pytest.mark.parametrize("length", [0, 1, 54, 55, 56, 57, 63, 64, 65, 118, 119, 120, 127, 128, 129, 1000, 100_003])
def test_every_length_around_a_sha256_block_boundary_hashes_right(way: str, length: int) -> None:
    """A message of 55 bytes still fits its length in its block; 56 needs a second one."""
    text = "".join(random.Random(length).choice("abc xyz\t") for _ in range(length))
    urls = ["", "u", "https://example.com/" + "p" * 40]
    assert canonical_digests(urls, [text] * 3) == [expected(url, text) for url in urls]


def test_whitespace_is_what_str_strip_removes_ascii_or_not(way: str) -> None:
    for space in SPACES:
        for text in (f"{space}ascii{space}", f"{space}é{space}", f"{space}{space}", f"a{space}b"):
            assert canonical_digests([f"{space}u{space}"], [text]) == [expected(f"{space}u{space}", text)], repr(text)


def test_random_texts_of_any_script_hash_as_hashlib_does(way: str) -> None:
    rng = random.Random(7)
    alphabet = "ab \t\n" + "".join(SPACES) + "é€😀ß中"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(200))) for _ in range(500)]
    urls = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(30))) for _ in range(500)]
    assert canonical_digests(urls, texts) == [expected(url, text) for url, text in zip(urls, texts)]


def test_a_lone_surrogate_raises_as_str_encode_does(way: str) -> None:
    with pytest.raises(UnicodeEncodeError):
        canonical_digests(["u", "u"], ["fine", "lone \ud800"])
    with pytest.raises(UnicodeEncodeError):
        canonical_digests(["\udfff"], ["fine"])


def test_lists_that_do_not_agree_are_refused(way: str) -> None:
    with pytest.raises(ValueError):
        canonical_digests(["u"], ["a", "b"])


def test_the_compiled_ids_are_built_in_ci() -> None:
    if not IN_CI or not HAS_SHA_NI:
        pytest.skip("checked in CI, where .ci/run installs a C compiler, on a CPU with SHA instructions")
    assert canonical.BUILT, "host/library/_canonical.c did not build: pip install -e . printed why"
