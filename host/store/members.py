"""The library files a segment holds: each one's rows, what its file said, and who may see what.

A segment (host/store/compiled.py) is the compiled form of one library file or of many small ones
packed together, so that a host of ten thousand writers keeps a few sets of arrays, not ten
thousand. Each library file in it is a *member*: its rows are the segment's file rows
[first, stop) (the order the files were added in, each file's bits in its own order; a clustered
segment stores them in another order and maps them back with `source_rows`). What the catalog
needs to serve a member without reading its rows is kept here, in the segment's meta.json:

- `source`: the file's size, mtime and SHA-256 when it was compiled (`SourceKey`): whether the file
  on disk is still the one compiled;
- `scope` and `access_tag`: the publisher folder whose access file grants its tags, and the tag its
  folder gives every bit (host/library/visibility.py); both are compiled into the rows' tags;
- `details` and `sort`, as the file says them;
- `tag_rows`: its rows per tag (the public tag is ""), so counts never need a pass over rows;
- `public_digest`: changes exactly when what an anonymous caller may see of it changes.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec


class SourceKey(msgspec.Struct, frozen=True):
    """What identifies a library file's contents without parsing it."""

    size: int
    mtime_ns: int
    sha256: str

    def matches_stat(self, stat: os.stat_result) -> bool:
        return self.size == stat.st_size and self.mtime_ns == stat.st_mtime_ns


class Member(msgspec.Struct, frozen=True):
    """One library file's rows in a segment (see the module docstring); meta.json holds it as it is:
    ten thousand of them are read in a few milliseconds (msgspec)."""

    name: str  # the library's name: its path under the libraries folder, without ".json"
    source: SourceKey
    first: int  # its file rows in the segment: [first, stop)
    stop: int
    scope: str = ""  # "" is the host's own access file; otherwise a publisher folder's
    access_tag: str | None = None  # the tag its folder gives every bit, as compiled
    details: msgspec.Raw = msgspec.Raw(b"{}")  # the file's `details` as JSON: read only when asked (`details_of`)
    sort: str = "any"
    tag_rows: dict[str, int] | None = None  # rows of each tag (scoped names; "" is public)
    public_digest: str = ""

    @property
    def bit_count(self) -> int:
        return self.stop - self.first


def details_of(member: Member) -> dict[str, Any]:
    details: dict[str, Any] = msgspec.json.decode(member.details)
    return details


def as_details(details: dict[str, Any]) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(details))


def tag_rows(names: Sequence[str], tags: Sequence[str | None]) -> dict[str, int]:
    """Rows of each tag among the rows' `tags` (None: public), in the order of `names`, for `Member.tag_rows`."""
    counted = Counter(tag or "" for tag in tags)
    return {name: counted[name] for name in names if counted[name]}
