"""What is wrong with a library file: one line each, raised at the first or all collected.

Every problem is reported as one `LibraryFormatError` line naming the file, the bit and the
field, so a publisher can fix a file without reading our code.
"""

from __future__ import annotations


class LibraryFormatError(ValueError):
    """A library file (or an `omit` argument) that breaks the format; the message is one line."""


class Problems:
    """Where the checks report: `parse_library` raises the first problem, `library_problems` keeps all.

    One set of checks serves both, so the first problem `library_problems` lists is always the very
    message `parse_library` raises. `limit` bounds what is kept of a file with millions of bad bits
    (the count goes on).
    """

    def __init__(self, *, collect: bool, limit: int | None = None) -> None:
        self.collect = collect
        self.limit = limit
        self.found: list[str] = []
        self.count = 0

    def report(self, message: str) -> None:
        if not self.collect:
            raise LibraryFormatError(message)
        self.count += 1
        if self.limit is None or len(self.found) < self.limit:
            self.found.append(message)

    def __bool__(self) -> bool:
        return self.count > 0
