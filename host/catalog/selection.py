"""Library names as callers give them: whether a name is well-formed, which libraries a name selects,
a page of names, and the publishers (first folders) they fall in.

A library's name is its file's path under the libraries folder, without ".json", its folders joined
by "/" (host/catalog/generations.py). A name a caller gives (`POST /`'s `libraries`, a dialect's
library id, the name in `/p/{name}/`) selects the library of that name and every library in the
folder of that name: `blog` selects `blog` (blog.json), `blog/a` and `blog/2024/b`, and never
`blog-x` or `blogger`. A publisher is a first folder (or a library outside any folder): `blog` for
all of the above.

A name is only ever compared with the catalog's names, never joined to a path, so nothing a caller
sends can read a file; the checks in `check_name` are there so that a name which tries to leave its
folder (`..`, an absolute path, a backslash, any of those percent-encoded, NUL) is refused in one
line instead of being looked up, the same way at every door.

Everything here is a pure function over the catalog's names sorted by code point (`Catalog.names`):
a selection or a page starts with a bisection, whatever the number of libraries.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

MAX_NAME_CHARACTERS = 1024
MAX_SEGMENT_CHARACTERS = 255  # a file name's limit on every common file system
PERCENT_ROUNDS = 3  # a name decoded this many times over still has to be well-formed


class BadName(ValueError):
    """A name that can name no library: one line saying why."""


def check_name(name: str, what: str = "library name") -> str:
    """`name` without a trailing "/", or BadName naming the problem (`what` says which argument)."""
    problem = _problem(name)
    if problem is None:
        decoded = name
        for _ in range(PERCENT_ROUNDS):
            decoded, before = unquote(decoded), decoded
            if decoded == before:
                break
            if _problem(decoded) is not None:
                problem = f"is percent-encoded: decoded, it {_problem(decoded)}"
                break
    if problem is not None:
        raise BadName(f"the {what} {name[:80]!r}{'…' if len(name) > 80 else ''} {problem}")
    return name.removesuffix("/")


def _problem(name: str) -> str | None:
    if len(name) > MAX_NAME_CHARACTERS:
        return f"is {len(name):,} characters long; a name has at most {MAX_NAME_CHARACTERS:,}"
    if not name.strip("/"):
        return "is empty"
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in name):
        return "holds a control character (NUL, a newline...)"
    if "\\" in name:
        return "holds a backslash: folders are separated by /"
    if name.startswith("/"):
        return "is absolute: a name starts with a folder or a library, never /"
    segments = name.removesuffix("/").split("/")
    if any(segment in (".", "..") for segment in segments):
        return "leaves its folder: . and .. are not names"
    if "" in segments:
        return "has an empty folder name (//)"
    if any(len(segment) > MAX_SEGMENT_CHARACTERS for segment in segments):
        return f"has a folder or file name over {MAX_SEGMENT_CHARACTERS} characters"
    return None


def selected(names: Sequence[str], name: str) -> tuple[str, ...]:
    """The names in `names` (sorted) that `name` selects: itself if it is one, then those in its
    folder, in order. Three bisections, however many names there are."""
    exact = bisect_left(names, name)
    own = (name,) if exact < len(names) and names[exact] == name else ()
    # Every name in the folder starts with name + "/", and "0" is the character after "/".
    start = bisect_left(names, name + "/", exact)
    stop = bisect_left(names, name + "0", start)
    return own + tuple(names[start:stop])


def starting_with(names: Sequence[str], prefix: str = "", after: str | None = None) -> Iterator[str]:
    """The names in `names` (sorted) that start with `prefix`, in order, from the first one after
    `after` (a page's last name: the next page starts after it even if it has gone meanwhile)."""
    start = bisect_left(names, prefix)
    if after is not None:
        start = max(start, bisect_right(names, after))
    for position in range(start, len(names)):
        name = names[position]
        if not name.startswith(prefix):
            return
        yield name


def publisher_of(name: str) -> str:
    """A library's publisher: its first folder, or the library itself outside any folder."""
    return name.partition("/")[0]


@dataclass(frozen=True)
class Publisher:
    """A first folder (or a library outside any folder) as one caller sees it."""

    name: str
    libraries: int  # the libraries in it the caller may see
    bits: int  # their bits the caller may see
    private_bits: int  # of those, the ones only the caller's access shows
    is_library: bool  # it is exactly one library of that name, outside any folder


def publishers(visible: Iterable[tuple[str, int, int]]) -> list[Publisher]:
    """The publishers of the libraries in `visible` ((name, bits, private bits) of each library a
    caller may see), with their counts, in name order."""
    counts: dict[str, list[int]] = {}
    folders: set[str] = set()
    for name, bits, private_bits in visible:
        publisher = publisher_of(name)
        if publisher != name:
            folders.add(publisher)
        total = counts.setdefault(publisher, [0, 0, 0])
        total[0] += 1
        total[1] += bits
        total[2] += private_bits
    return [Publisher(name, libraries, bits, private_bits, name not in folders)
            for name, (libraries, bits, private_bits) in sorted(counts.items())]
