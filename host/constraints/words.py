"""What a word is, for the text index, constraints and term scores alike.

A word is a maximal run of Unicode word characters (`\\w+`: letters, digits, marks and the
underscore, in any script) of the text after case folding and NFKC normalisation. So matching
is case-insensitive ("Bible" = "BIBLE"), width-insensitive (full-width letters are their ASCII
letters) and treats ligatures and compatibility forms as their plain letters; punctuation only
separates words ("e-mail" is the two words "e", "mail"; "C++" is "c").

Every part of the package tokenizes through `words()`, so an index built at compile time and a
query parsed at request time always agree on what the words are.
"""

from __future__ import annotations

import re
import unicodedata

WORD = re.compile(r"\w+")
# On ASCII text `\w` is [A-Za-z0-9_], folding is lower(), and splitting at everything else is
# 3-4x faster than the regular expression (it is most of compiling a text index).
_ASCII_SEPARATORS = str.maketrans({chr(code): " " for code in range(128)
                                   if not (chr(code).isalnum() or chr(code) == "_")})

# Bit fields that constraints may name. `library` is the library's name (one value per library);
# the others are the bit's `text` and its `info` fields.
INFO_FIELDS = ("title", "url", "description", "image_url")
INDEXED_FIELDS = ("text", *INFO_FIELDS)
LABELS = ("title", "url", "description", "image_url", "library", "text")
ROW_BREAK = "\0"  # between two rows' texts, where they are joined: a token of its own (not a word character)


def fold(text: str) -> str:
    """Case-folded, NFKC-normalised text: the form every comparison of this package uses."""
    return unicodedata.normalize("NFKC", text.casefold())


def words(text: str) -> list[str]:
    """The words of `text`, folded, in order."""
    if text.isascii():
        return text.lower().translate(_ASCII_SEPARATORS).split()
    return WORD.findall(fold(text))


def field_value(record: dict[str, object], field: str, library: str) -> str:
    """The string a bit holds in `field` ("" when the bit has none)."""
    if field == "library":
        return library
    if field == "text":
        value = record.get("text")
    else:
        info = record.get("info")
        value = info.get(field) if isinstance(info, dict) else None
    return value if isinstance(value, str) else ""
