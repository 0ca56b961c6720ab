"""Heading anchors as GitHub makes them (github-slugger), so `#anchor` links land where they should.

GitHub lowercases the heading's text, drops every character that is not a letter, a mark, a
number, a space, `-` or `_`, and turns each space into `-`. A repeated slug gets `-1`, `-2`, ...
in the order the headings appear (and a heading whose own slug is taken that way moves on too).
"""

from __future__ import annotations

import unicodedata


def slug(text: str) -> str:
    kept = (
        character
        for character in text.lower()
        if character in " -_" or unicodedata.category(character)[0] in "LMN"
    )
    return "".join(kept).replace(" ", "-")


class Slugger:
    """Unique slugs for the headings of one document, in order."""

    def __init__(self) -> None:
        self._occurrences: dict[str, int] = {}

    def slug(self, text: str) -> str:
        original = result = slug(text)
        while result in self._occurrences:
            self._occurrences[original] += 1
            result = f"{original}-{self._occurrences[original]}"
        self._occurrences[result] = 0
        return result
