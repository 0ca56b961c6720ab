"""What detection looks at to tell a file's kind (see `kinds`), read only as far as a sniff asks."""

from __future__ import annotations

import functools
from pathlib import Path

from host.importer.archive import Archive, open_archive
from host.importer.errors import ImporterError

SNIFF_BYTES = 4096


class Probe:
    """What detection may look at, read only when a sniff asks: a file's first bytes, or the names
    and members of a zip or folder. Detection never fails: what cannot be read is not recognised."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._archives: dict[str, Archive | None] = {}

    @functools.cached_property
    def head(self) -> bytes:
        """The file's first SNIFF_BYTES (b"" for a folder, or a file that cannot be read)."""
        try:
            with self.path.open("rb") as handle:
                return handle.read(SNIFF_BYTES)
        except OSError:
            return b""

    def archive(self, marker: str) -> Archive | None:
        """The zip file or folder, to look into for a layout of which `marker` is a file (or folder,
        ending in `/`); None when it is neither."""
        if marker not in self._archives:
            try:
                self._archives[marker] = open_archive(self.path, marker)
            except (ImporterError, OSError):
                self._archives[marker] = None
        return self._archives[marker]

    def member_head(self, marker: str, name: str) -> bytes:
        """A member's first SNIFF_BYTES (b"" when it is missing or cannot be read)."""
        archive = self.archive(marker)
        if archive is None:
            return b""
        try:
            return archive.read(name)[:SNIFF_BYTES]
        except ImporterError:
            return b""

    def close(self) -> None:
        for archive in self._archives.values():
            if archive is not None:
                archive.close()
