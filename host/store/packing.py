"""Many library files compiled into few segments: small files packed together, large ones alone.

A host of ten thousand writers holds ten thousand small files. Compiled one folder each, they
would hold ten thousand sets of open files and memory maps, and a query would visit them one by
one. The `Packer` instead writes the files it is given into one segment per (model, language) —
one StoreWriter, each file a member (host/store/members.py), in the order given — so a query reads
a few arrays whatever the number of files, and the compile costs what one file of the same bits
costs. A file of more than `PACK_FILES_UP_TO` bytes is compiled as a segment of its own, streamed
(host/store/compiled.py): packing it would gain nothing, and a problem found halfway through it
could not be taken back out of a pack.

A small file is read whole and checked before any of its bits reaches a pack, so a bad file is
one problem for its caller and leaves the pack as it was.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from host.library.bit_checks import BitBlock
from host.library.format import LibraryHeader
from host.library.problems import LibraryFormatError
from host.library.stream import read_small
from host.service.allocator import garbage_collector_paused
from host.store.clusters import CLUSTER_FROM
from host.store.compiled import compile_library, in_scope, stream_member
from host.store.members import Member, SourceKey
from host.store.progress import CompileProgress
from host.store.writer import StoreWriter

PACK_FILES_UP_TO = 64 << 20  # bytes: a larger library file is a segment of its own


@dataclass(frozen=True)
class FileToCompile:
    path: Path
    name: str  # the library's name (its path under the libraries folder, without ".json")
    access_tag: str | None  # the tag its folder gives every bit
    scope: str  # the publisher folder whose access file grants its tags ("" for the host's)
    size: int  # bytes, when it was found


@dataclass(frozen=True)
class CompiledSegment:
    name: str  # the segment's folder under the Packer's folder
    members: tuple[Member, ...]


class _Collector:
    def __init__(self) -> None:
        self.blocks: list[BitBlock] = []

    def add(self, block: BitBlock) -> None:
        self.blocks.append(block)


def read_member(file: FileToCompile) -> tuple[LibraryHeader, SourceKey, list[BitBlock]]:
    """A small file read whole and checked: its header, source key and bits (tags scoped), at once
    where it is plainly whole (`read_small`), else streamed with the careful checks (whose first
    problem is raised: LibraryFormatError, or OSError)."""
    before = file.path.stat()
    body = file.path.read_bytes()
    read = read_small(body, file.access_tag)
    if read is None:
        collector = _Collector()
        header, key = stream_member(file.path, collector, access_tag=file.access_tag, scope=file.scope)
        return header, key, collector.blocks
    if not SourceKey(before.st_size, before.st_mtime_ns, "").matches_stat(file.path.stat()) or len(body) != before.st_size:
        raise OSError("the file changed while it was being read")
    header, blocks = read
    key = SourceKey(before.st_size, before.st_mtime_ns, hashlib.sha256(body).hexdigest())
    return header, key, [in_scope(block, file.scope) for block in blocks]


class _Pack:
    """One segment being written: the files of one model and language."""

    def __init__(self, building: Path, model: str, language: str, cluster_from: int) -> None:
        self.building = building
        self.model, self.language = model, language
        self.dimension: int | None = None
        self.first_name = ""
        self.cluster_from = cluster_from
        self.writer = StoreWriter(building)

    def take(self, file: FileToCompile, header: LibraryHeader, blocks: list[BitBlock], member_key: Member) -> None:
        if header.dimension is not None:
            if self.dimension is not None and header.dimension != self.dimension:
                raise LibraryFormatError(f"dimension {header.dimension} differs from {self.dimension} of "
                                         f"{self.first_name}, the first library of {self.model}")
            if self.dimension is None:
                self.dimension, self.first_name = header.dimension, file.name
        self.writer.begin_member()
        for block in blocks:
            self.writer.add(block)
        self.writer.end_member(header, file.name, member_key.source, scope=file.scope, access_tag=file.access_tag)


class Packer:
    """Compiles library files into segments under `folder`, each named by `new_name()`.

    `add` each file (in the order they should be ranked in on equal scores); a bad file raises
    LibraryFormatError or OSError (without its name: the caller adds it) and takes nothing with it.
    `finish` writes the packs and returns every segment made; `close` drops what was not finished.
    """

    def __init__(self, folder: Path, new_name: Callable[[], str], *, cluster_from: int = CLUSTER_FROM,
                 pack_files_up_to: int = PACK_FILES_UP_TO, bars: bool = False) -> None:
        self.folder = folder
        self.new_name = new_name
        self.cluster_from = cluster_from
        self.pack_files_up_to = pack_files_up_to
        self.bars = bars
        self._packs: dict[tuple[str, str], _Pack] = {}
        self._made: list[CompiledSegment] = []
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, file: FileToCompile) -> None:
        if file.size > self.pack_files_up_to:
            self._made.append(self._alone(file))
            return
        header, key, blocks = read_member(file)
        pack = self._packs.get((header.embedding_model, header.language))
        if pack is None:
            building = Path(tempfile.mkdtemp(prefix=".pack.", dir=self.folder))
            pack = self._packs[header.embedding_model, header.language] = _Pack(
                building, header.embedding_model, header.language, self.cluster_from)
        pack.take(file, header, blocks, Member(file.name, key, 0, 0))

    def _alone(self, file: FileToCompile) -> CompiledSegment:
        name = self.new_name()
        bar = CompileProgress(file.name, file.size) if self.bars else None
        try:
            member = compile_library(file.path, self.folder / name, name=file.name, access_tag=file.access_tag,
                                     scope=file.scope, cluster_from=self.cluster_from, progress=bar)
        finally:
            if bar is not None:
                bar.close()
        return CompiledSegment(name, (member,))

    def finish(self, step: Callable[[str, float], None] | None = None) -> list[CompiledSegment]:
        """Write every pack (a few seconds a million bits) and return every segment made."""
        with garbage_collector_paused():
            while self._packs:
                _, pack = self._packs.popitem()
                try:
                    if not pack.writer.member_count:
                        continue
                    name = self.new_name()
                    members = pack.writer.finish(pack.model, pack.dimension, pack.language, name,
                                                 cluster_from=self.cluster_from, step=step)
                    pack.writer.close()
                    pack.building.rename(self.folder / name)
                    self._made.append(CompiledSegment(name, tuple(members)))
                finally:
                    pack.writer.close()
                    shutil.rmtree(pack.building, ignore_errors=True)
        made, self._made = self._made, []
        return made

    def close(self) -> None:
        """Drop the packs not finished (a compile that failed): nothing of them stays on disk."""
        for pack in self._packs.values():
            pack.writer.close()
            shutil.rmtree(pack.building, ignore_errors=True)
        self._packs.clear()
