"""Sorted strings: a text index's vocabularies and value dictionaries, searched without decoding.

Distinct UTF-8 strings in ascending byte order (which is code point order), concatenated into one
uint8 array, with an int64 array of where each string starts (and the last one ends). Both are
plain arrays, memory-mapped from the compiled store, so opening a library copies nothing.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np


class SortedStrings(Sequence[bytes]):
    """Distinct UTF-8 strings in ascending byte order (which is code point order), concatenated.

    Indexing returns bytes; lookups are binary searches (a few dozen small reads), so nothing is
    decoded or copied when a library is opened.
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        return self.data[int(self.offsets[index]) : int(self.offsets[index + 1])].tobytes()

    def __iter__(self) -> Iterator[bytes]:
        return (self[position] for position in range(len(self)))

    @functools.cached_property
    def byte_counts(self) -> np.ndarray:
        """How often each byte value occurs (for substring search: anchor on the rarest byte)."""
        return np.bincount(self.data, minlength=256)

    def bound(self, key: bytes, *, right: bool = False) -> int:
        """Where `key` would be inserted: before equal strings, or after them with `right`."""
        return (bisect.bisect_right if right else bisect.bisect_left)(self, key)

    def find(self, key: bytes) -> int | None:
        position = self.bound(key)
        return position if position < len(self) and self[position] == key else None

    def prefix_range(self, prefix: bytes) -> tuple[int, int]:
        """The range [lo, hi) of strings that start with `prefix` (contiguous, since sorted)."""
        if not prefix:
            return 0, len(self)
        # UTF-8 never holds the byte 0xFF, so the last byte can always be incremented.
        return self.bound(prefix), self.bound(prefix[:-1] + bytes([prefix[-1] + 1]))
