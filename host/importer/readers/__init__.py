"""One reader per kind of writing; each turns a file's bytes into `Document`s (a feed into many).

A reader raises `ImporterError` naming what is wrong with the file, or `Draft` for a page its
author marked unpublished; it never reads anything but the bytes it is given. Which reader reads
which file is the table in `host.importer.kinds`. A reader that reads slowly (OCR) yields its
documents as it goes, with `SLOW_STEP`s and `Unreadable` pages among them (`document.Read`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import PurePath

from host.importer.document import Read

Reader = Callable[[bytes, str], Iterable[Read]]


def fallback_title(path: PurePath) -> str:
    """A title from a file name: `2024-05-01-my_first-post.md` -> `2024 05 01 my first post`."""
    return re.sub(r"[\s_-]+", " ", path.stem).strip() or path.name
