"""Distinct strings numbered in order of first sight: the words and values of a text index.

Numbering every word of a library is most of building its text index (host/constraints/text_index.py):
a 1M-bit library has tens of millions of words and a million distinct ones. In Python each word is
a str object and a dict lookup; the C type (host/constraints/_numbering.c, built where the package
was installed with a C compiler) splits ASCII text into words itself and keeps the distinct ones
as bytes in a hash table of its own, several times faster and a fraction of the memory. Without
it, `Numbering` does the same with a dict. Either way the text index built is the same, byte for
byte: the numbers given depend only on the order of first sight, and the keys come back sorted
by their UTF-8 bytes, which is the order of their code points (str's order). The extension also
groups a finished index's positions by word in one counting pass (`positions_by_word`, used by
word_index.py's `WordIndexBuilder.finish`), where numpy sorts 8-byte keys.

Callers read `compiled` when a `Numbering` is made (the text index, when it prepares and finishes),
so tests run both ways.
"""

from __future__ import annotations

import numpy as np

try:
    import host.constraints._numbering as compiled
except ImportError:  # installed without a C compiler
    compiled = None  # type: ignore[assignment]

BUILT = compiled is not None
__all__ = ["BUILT", "Numbering", "compiled"]
# On ASCII text a word is a run of [A-Za-z0-9_] (host/constraints/words.py): one character for
# one, so that str.translate keeps its fast path; NUL stays (a token of its own, spaced first).
_ASCII_SPLIT = str.maketrans({chr(code): " " for code in range(1, 128) if not (chr(code).isalnum() or chr(code) == "_")})


class Numbering:
    """Strings numbered 0, 1, 2... in order of first sight; `keys` are numbered first, in order."""

    def __init__(self, *keys: str) -> None:
        self._compiled = compiled.Numbering() if compiled is not None else None
        self._numbers: dict[str, int] = {}
        if keys:
            self.number_strings(list(keys))

    def __len__(self) -> int:
        return len(self._compiled) if self._compiled is not None else len(self._numbers)

    def number_ascii_words(self, text: str) -> np.ndarray:
        """The numbers (int32) of the words of `text` (ASCII), in order: a word is a run of
        [A-Za-z0-9_], lowered; each NUL is a token of its own (the string "\\0")."""
        if self._compiled is not None:
            return np.frombuffer(self._compiled.number_ascii_words(text), dtype=np.int32)
        found = text.replace("\0", " \0 ").lower().translate(_ASCII_SPLIT).split()
        return self.number_strings(found)

    def number_strings(self, strings: list[str]) -> np.ndarray:
        """The number (int32) of each of `strings`."""
        if self._compiled is not None:
            return np.frombuffer(self._compiled.number_strings(strings), dtype=np.int32)
        numbers = self._numbers
        for string in strings:
            if string not in numbers:
                numbers[string] = len(numbers)
        return np.fromiter(map(numbers.__getitem__, strings), dtype=np.int32, count=len(strings))

    def sorted_keys(self, *, skip_first: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The keys sorted: their UTF-8 bytes concatenated (uint8), where each starts (int64, one
        more than there are keys) and each number's place among them (int64). With `skip_first`,
        key 0 (which must sort first: the row break) is left out and keeps place 0."""
        if self._compiled is not None:
            data, offsets, renumber = self._compiled.sorted_keys(skip_first)
            return (np.frombuffer(data, dtype=np.uint8), np.frombuffer(offsets, dtype=np.int64),
                    np.frombuffer(renumber, dtype=np.int64))
        keys = list(self._numbers)  # in the order of their numbers: each took the next
        places = sorted(range(len(keys)), key=keys.__getitem__)
        if skip_first:
            if not places or places[0] != 0:
                raise ValueError("key 0 does not sort first")
            places = places[1:]
        renumber = np.zeros(len(keys), dtype=np.int64)
        renumber[np.array(places, dtype=np.int64)] = np.arange(len(places))
        encoded = [keys[place].encode("utf-8", "surrogatepass") for place in places]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
        return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets, renumber
