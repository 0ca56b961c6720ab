"""An export's files, whether the service's zip or the folder it unzips to, read by name.

Exports (Substack's, Medium's, an X archive) arrive as a zip, and many people unzip them first
(Safari does it on download). `open_archive` gives either as an `Archive`: member names with `/`
separators relative to the export's root, and their bytes. A zip whose members all sit in one top
folder (a zip of the unzipped folder) is read from inside that folder when the layout's marker
file is found there; macOS's `__MACOSX/` and hidden members are never listed. A member's bytes
are checked as the zip is read (zipfile checks each member's CRC-32): a damaged member is an
ImporterError naming it, the others still read.
Nothing is ever extracted to disk, so a member's name cannot reach outside the export.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from abc import ABC, abstractmethod
from pathlib import Path

from host.importer.errors import ImporterError

# A member larger than this is refused rather than read into memory (an X archive's tweets.js of a
# prolific account is ~100 MB; a zip bomb's member is many GB).
MEMBER_LIMIT = 1 << 30


class Archive(ABC):
    """The files of an export, by `/`-separated name relative to its root: a zip or a folder."""

    @abstractmethod
    def names(self) -> list[str]:
        """Every file's name, sorted."""

    @abstractmethod
    def has(self, name: str) -> bool:
        """Whether `name` is a file of the export, or a folder when `name` ends in `/`."""

    @abstractmethod
    def read(self, name: str) -> bytes:
        """The member's bytes; ImporterError (naming it) when it is missing, damaged or too large."""

    def first_in(self, folder: str, suffix: str) -> str | None:
        """The first file (by name) directly in `folder` (ending in `/`) whose name ends in `suffix`."""
        return next((name for name in self.names() if name.startswith(folder) and "/" not in name[len(folder):]
                     and name.endswith(suffix)), None)

    def close(self) -> None:  # noqa: B027 - a folder has nothing to release; a zip overrides it
        """Release the file; an archive is closed once its export has been read."""


def _listed(name: str) -> bool:
    parts = name.split("/")
    return parts[0] != "__MACOSX" and not any(part.startswith(".") for part in parts if part)


def _holds(members: dict[str, zipfile.ZipInfo], name: str) -> bool:
    """Whether `name` is one of `members`, or a folder of them when it ends in `/`."""
    return any(member.startswith(name) for member in members) if name.endswith("/") else name in members


class ZipArchive(Archive):
    """A zip's members. When they all sit in one top folder and the layout's `marker` (a file, or a
    folder ending in `/`) is found inside it rather than at the top, names are read from inside it."""

    def __init__(self, path: Path, marker: str | None = None) -> None:
        try:
            self._zip = zipfile.ZipFile(path)
        except zipfile.BadZipFile as problem:
            raise ImporterError(f"not a readable zip file ({problem})") from None
        members = {info.filename: info for info in self._zip.infolist() if not info.is_dir() and _listed(info.filename)}
        tops = {name.split("/", 1)[0] for name in members}
        if marker is not None and len(tops) == 1 and all("/" in name for name in members) and not _holds(members, marker):
            top = f"{tops.pop()}/"
            inside = {name[len(top):]: info for name, info in members.items()}
            members = inside if _holds(inside, marker) else members
        self._members = members

    def names(self) -> list[str]:
        return sorted(self._members)

    def has(self, name: str) -> bool:
        return _holds(self._members, name)

    def read(self, name: str) -> bytes:
        info = self._members.get(name)
        if info is None:
            raise ImporterError(f"{name}: not in the export")
        if info.file_size > MEMBER_LIMIT:
            raise ImporterError(f"{name}: {info.file_size:,} bytes, more than the {MEMBER_LIMIT:,} read from one member")
        try:
            with self._zip.open(info) as member:
                data = member.read(MEMBER_LIMIT + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError) as problem:
            raise ImporterError(f"{name}: damaged in the zip ({problem})") from None
        # zipfile raises RuntimeError for an encrypted member, NotImplementedError for a compression it lacks
        except (RuntimeError, NotImplementedError) as problem:
            raise ImporterError(f"{name}: cannot be read from the zip ({problem})") from None
        if len(data) > MEMBER_LIMIT:
            raise ImporterError(f"{name}: larger than the {MEMBER_LIMIT:,} bytes read from one member")
        return data

    def close(self) -> None:
        self._zip.close()


class FolderArchive(Archive):
    """An unzipped export: its files under `root`, hidden ones (and `.SECRET.` ones) left out."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._listing: list[str] | None = None

    def names(self) -> list[str]:
        if self._listing is None:
            found: list[str] = []
            for folder, subfolders, files in os.walk(self._root):
                subfolders[:] = [name for name in subfolders if _listed(name) and ".SECRET." not in name]
                relative = Path(folder).relative_to(self._root).as_posix()
                prefix = "" if relative == "." else f"{relative}/"
                found.extend(prefix + name for name in files if _listed(name) and ".SECRET." not in name)
            self._listing = sorted(found)
        return self._listing

    def has(self, name: str) -> bool:
        # Tested on the disk, without listing the folder: detection asks this of every folder walked.
        if any(not _listed(part) for part in name.rstrip("/").split("/")):
            return False
        target = self._root / name
        return target.is_dir() if name.endswith("/") else target.is_file()

    def first_in(self, folder: str, suffix: str) -> str | None:
        # One folder listed, not the whole tree: detection asks this of folders it walks.
        try:
            names = sorted(entry.name for entry in os.scandir(self._root / folder) if entry.is_file()
                           and entry.name.endswith(suffix) and _listed(entry.name))
        except OSError:
            return None
        return folder + names[0] if names else None

    def read(self, name: str) -> bytes:
        target = self._root / name
        try:
            if target.stat().st_size > MEMBER_LIMIT:
                raise ImporterError(f"{name}: more than the {MEMBER_LIMIT:,} bytes read from one file")
            return target.read_bytes()
        except FileNotFoundError:
            raise ImporterError(f"{name}: not in the export") from None
        except OSError as problem:
            raise ImporterError(f"{name}: cannot be read ({problem.strerror or problem})") from None


def open_archive(path: Path, marker: str | None = None) -> Archive:
    """The export at `path`: a folder, or a zip file (ImporterError when it is neither). `marker`: a
    file (or folder, ending in `/`) of the export's layout, which says where a zip's root is."""
    if path.is_dir():
        return FolderArchive(path)
    return ZipArchive(path, marker)
