"""Publisher folders: a folder of libraries holding its own access file keeps the keys to its own door.

A host of many writers gives each a folder under `libraries/`. A folder that holds an access file
(`access.SECRET.json`, the same format as the host's: host/access) is a *scope*: the tokens its
file verifies grant tags only to the libraries under it (host/library/visibility.py), never to
another publisher's libraries with a tag of the same name; the host's own access file (`serve
--access`) stays the operator's and grants everywhere. A library is in the scope of the nearest
folder above it with an access file; the top folder itself is never a scope (the host's).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

PUBLISHER_ACCESS_FILE = "access.SECRET.json"


def find_scopes(root: Path) -> list[str]:
    """The publisher folders under `root` (relative, "/"-separated, sorted): those holding an access file."""
    if not root.is_dir():
        return []
    return sorted(path.parent.relative_to(root).as_posix() for path in root.rglob(PUBLISHER_ACCESS_FILE)
                  if path.is_file() and path.parent != root
                  and not any(part.startswith(".") for part in path.relative_to(root).parts))


def scope_of(name: str, scopes: Collection[str]) -> str:
    """The scope of the library `name` (a path without ".json"): its nearest folder in `scopes`, or ""."""
    folder = name.rpartition("/")[0]
    while folder:
        if folder in scopes:
            return folder
        folder = folder.rpartition("/")[0]
    return ""
