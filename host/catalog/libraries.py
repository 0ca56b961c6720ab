"""A library as the host serves it: one library file, whose rows are a member of a segment.

The store keeps rows in segments (host/store/compiled.py), many library files to a segment; what
the edge lists, selects, counts and publishes is the library. A `Library` names its member of a
segment and says what the edge asks of it without touching a row: its name, model, details, and how
many bits a caller may see (from the member's rows per tag, host/store/members.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from host.library.visibility import may_see
from host.store.compiled import Segment
from host.store.members import Member, SourceKey, details_of


@dataclass(frozen=True, eq=False)
class Library:
    """One library file, served from `segment`'s member number `member`."""

    name: str  # its path under the libraries folder, without ".json"
    source: Path  # the file
    segment: Segment
    member: int
    source_key: SourceKey  # the file as it is now (size, mtime): its contents are the member's

    @property
    def compiled(self) -> Member:
        return self.segment.members[self.member]

    @property
    def embedding_model(self) -> str:
        return self.segment.embedding_model

    @property
    def dimension(self) -> int:
        return self.segment.dimension

    @cached_property
    def details(self) -> dict[str, Any]:
        return details_of(self.compiled)

    @property
    def scope(self) -> str:
        return self.compiled.scope

    @property
    def public_digest(self) -> str:
        return self.compiled.public_digest

    @property
    def bit_count(self) -> int:
        return self.compiled.bit_count

    @cached_property
    def tags(self) -> tuple[str, ...]:
        """The tags its rows carry (scoped where it is in a publisher's folder), "" for public ones."""
        return tuple((self.compiled.tag_rows or {}).keys())

    def visible_tags(self, granted: frozenset[str]) -> frozenset[str]:
        """The tags of its rows a caller holding `granted` may see, public aside: what they get of it
        depends on these alone (caches and validators are keyed by them, never by the whole grant)."""
        return frozenset(tag for tag in self.tags if tag and may_see(tag, granted))

    def visible_bit_count(self, granted: frozenset[str]) -> int:
        """Without a pass over the rows: its cost never tells a private library from an unknown one."""
        if not granted:
            return self.public_bit_count
        return sum(rows for tag, rows in (self.compiled.tag_rows or {}).items() if may_see(tag, granted))

    @cached_property
    def public_bit_count(self) -> int:
        return (self.compiled.tag_rows or {}).get("", 0)

    def rows(self) -> np.ndarray:
        """Its stored rows in `segment`, in the order of its file."""
        return self.segment.member_rows(self.member)

    def record(self, position: int) -> dict[str, Any]:
        """The record (text and info) of its bit at `position` in its file."""
        return self.segment.record(int(self.rows()[position]))
