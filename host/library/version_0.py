"""Version 0 of the library format, upgraded to version 1 as it is read: nothing is lost."""

from __future__ import annotations

from typing import Any

from host.library.problems import LibraryFormatError


def upgrade_version_0(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 kept bits in `content: {id: bit}` with an optional `sort: {type, ids}`."""
    content = data.get("content")
    if not isinstance(content, dict):
        raise LibraryFormatError("content: a version 0 library needs an object of bits")
    sort = data.get("sort")
    sort_type = "any"
    order = list(content)
    if isinstance(sort, dict):
        sort_type = sort.get("type", "any")
        if "ids" in sort:
            ids = sort["ids"]
            if not isinstance(ids, list) or any(key not in content for key in ids):
                raise LibraryFormatError("sort.ids: must list ids that are keys of content")
            # Bits the list leaves out follow it in key order: an upgrade loses nothing.
            order = list(dict.fromkeys([*ids, *content]))
    elif sort is not None:
        raise LibraryFormatError(f"sort: a version 0 sort must be an object, got {sort!r}")
    upgraded = {key: value for key, value in data.items() if key not in ("content", "sort")}
    upgraded.update(version=1, sort=sort_type, bits=[content[key] for key in order])
    return upgraded
