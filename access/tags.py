"""What an access tag may be: the one check the access file, tokens and grant rules share."""

from __future__ import annotations

from typing import Any


def check_tag(tag: Any) -> str | None:
    """What is wrong with an access tag, or None. Tags name folders under libraries/access/."""
    if not isinstance(tag, str) or not tag:
        return "must be a non-empty string"
    if tag != tag.strip():
        return f"{tag!r} has spaces at its ends"
    if any(ch in tag for ch in "/\\") or any(ord(ch) < 32 for ch in tag):
        return f"{tag!r} contains a slash or a control character"
    return None
