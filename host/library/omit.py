"""`omit`: which keys of a bit a library or an answer leaves out (SPEC §3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from host.library.problems import LibraryFormatError

OMITTABLE_KEYS = ("text", "embedding", "token_count", "similarity", "score", "info", "access_tag")
OMIT_NOTHING = ""
OMIT_ALL = "*"


@dataclass(frozen=True)
class Omit:
    """Which keys are left out of bits. `everything` means whole bits are gone (`"*"`)."""

    keys: frozenset[str] = frozenset()
    everything: bool = False

    def __contains__(self, key: str) -> bool:
        return self.everything or key in self.keys

    def to_wire(self) -> str | list[str]:
        """`""`, `"*"`, one key as a string, or several keys as a list (SPEC §3)."""
        if self.everything:
            return OMIT_ALL
        ordered = [key for key in OMITTABLE_KEYS if key in self.keys]
        if not ordered:
            return OMIT_NOTHING
        return ordered[0] if len(ordered) == 1 else ordered


def parse_omit(value: Any) -> Omit:
    """Read an omit value: `""`, `"*"`, a key, a comma list, or a list of keys."""
    if value is None:
        return Omit()
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
        if parts == [""]:
            return Omit()
        if parts == [OMIT_ALL]:
            return Omit(everything=True)
    elif isinstance(value, list) and all(isinstance(part, str) for part in value):
        parts = [part.strip() for part in value]
        if parts == [OMIT_ALL]:
            return Omit(everything=True)
        if parts == [] or parts == [""]:
            return Omit()
    else:
        raise LibraryFormatError(f"omit must be a string or a list of strings, got {value!r:.80}")
    for part in parts:
        if part in (OMIT_ALL, ""):
            raise LibraryFormatError(f"omit: {part!r} must stand alone, got {value!r:.80}")
        if part not in OMITTABLE_KEYS:
            raise LibraryFormatError(
                f"omit: unknown key {part!r:.40}; expected one of {', '.join(OMITTABLE_KEYS)}, '' or '*'"
            )
    return Omit(keys=frozenset(parts))
