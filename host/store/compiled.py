"""The compiled form of library files, a *segment*: memory-mapped numpy arrays and msgpack records.

A segment holds one library file or many small ones packed together (host/store/members.py: a host
of ten thousand writers keeps a few sets of arrays, not ten thousand, and a query reads a few,
whatever the number of files). Its folder in the cache:

    embeddings.npy      (bits, dimension) float32, C-contiguous: opened with mmap, so the pages
                        are shared by every worker and only read when a query touches them
    token_counts.npy    (bits,) int32
    tag_ids.npy         (bits,) uint16, an index into meta["tags"] (0 means public)
    ids.npy             (bits,) S32, raw SHA-256 canonical ids
    id_heads.npy        (bits,) uint64, the first 8 bytes of each id, sorted (shared bits across libraries)
    sign_codes.npy      (words, bits) uint64, the signs of each embedding, for approximate search
    records.bin         one msgpack map per bit ({"text", "info"}), back to back
    record_offsets.npy  (bits + 1,) int64, where each record starts and ends
    text_index.bin      words and values of each bit's text and info fields, for constraints, and
    text_index.json     the keyword postings: arrays packed in one file, and their layout
    meta.json           written last: the shapes above, the largest embedding norm (which bounds
                        the rounding error of a float32 dot product), and its members: each library
                        file's rows, source key, details and public digest (host/store/members.py)

A segment of at least `CLUSTER_FROM` bits (host/store/clusters.py) is stored clustered: every file
above holds its rows sorted by cluster (rows of a cluster in file order), and three more say how:

    source_rows.npy     (bits,) int64, the row in file order of each stored row
    centroids.npy       (clusters, dimension) float32, unit length
    cluster_offsets.npy (clusters + 1,) int64, cluster c is stored at rows [offsets[c], offsets[c + 1])
    codes.npy           (bits, dimension) uint8: each value as one of 256 levels of its dimension, a
    code_scale.npy      quarter of the floats, what approximate search scans (host/store/codes.py);
                        (2, dimension) float32: each dimension's lowest level and the step between levels

"File order" is the order the members were added in, each file's bits in its own order. Rows are
only ever addressed by stored row; `source_rows` breaks ties (file order, as without a layout) and
gives a member's file order back when it is published. Every array is opened as a memory map:
opening a segment reads nothing but meta.json, and every worker shares the pages.

Compiling streams the library file (host/store/writer.py): memory stays far below the size of the
vectors whatever the size of the file. Small files are packed (host/store/packing.py).

The folder is built under a temporary name and renamed into place, so a reader never sees a
half-written one; a folder whose files disagree with meta.json is refused, not trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from host.constraints.text_index import TextIndex, array_names, assemble_text_index, open_packed, text_index_in_memory
from host.keywords import postings
from host.keywords.index import KeywordIndex, open_keyword_index
from host.keywords.memory import keyword_index_in_memory
from host.library.bit_checks import BLOCK, BitBlock
from host.library.format import BitSink, LibraryHeader, ParsedLibrary
from host.library.language import DEFAULT_LANGUAGE
from host.library.problems import LibraryFormatError
from host.library.stream import read_whole, stream_library
from host.library.visibility import allowed_tag_ids, scoped_tag
from host.service.allocator import garbage_collector_paused
from host.store.clusters import CLUSTER_FROM
from host.store.members import Member, SourceKey
from host.store.progress import CompileProgress
from host.store.sign_codes import words_for
from host.store.writer import STORE_FORMAT as STORE_FORMAT  # re-exported: what callers compare folders with
from host.store.writer import StoreWriter

DEFAULT_MAX_SOURCE_BYTES = 256 << 30  # a policy, not a memory limit: files are streamed
log = logging.getLogger("polymath_host.store")



def decode_record(packed: Any) -> dict[str, Any]:
    """A row's record (text and info) from its msgpack bytes (host/store/writer.py packs them with
    msgspec): msgspec reads a 10-bit answer's records in 7 µs where msgpack took 10."""
    record: dict[str, Any] = _RECORD_DECODER.decode(packed)
    return record


_RECORD_DECODER = msgspec.msgpack.Decoder()

@dataclass(frozen=True, eq=False)  # compared and hashed as the object: one segment, one set of maps
class Segment:
    """Library files compiled as read-only arrays. Cheap to open: nothing is parsed or copied."""

    name: str  # its folder's name in the cache
    embedding_model: str
    embeddings: np.ndarray
    token_counts: np.ndarray
    tag_ids: np.ndarray
    tags: tuple[str, ...]
    ids: np.ndarray
    sign_codes: np.ndarray  # (words, bits) uint64, word-major: see host/store/sign_codes.py
    records: np.ndarray  # uint8 memory map of records.bin
    record_offsets: np.ndarray
    members: tuple[Member, ...]  # its library files, in file order
    max_norm: float = 1.0  # the largest embedding's L2 norm
    text_index: TextIndex | None = None  # None only for segments made in memory, without records
    keywords: KeywordIndex | None = None  # likewise
    source_rows: np.ndarray | None = None  # stored row -> its row in file order; None: stored in file order
    centroids: np.ndarray | None = None  # (clusters, dimension) float32 of a clustered segment
    cluster_offsets: np.ndarray | None = None  # (clusters + 1,) int64: where each cluster's rows start
    codes: np.ndarray | None = None  # (bits, dimension) uint8 of a clustered segment (host/store/codes.py)
    code_scale: np.ndarray | None = None  # (2, dimension) float32: lowest level, step
    id_heads: np.ndarray | None = None  # (bits,) uint64: the first 8 bytes of each id, sorted

    @property
    def bit_count(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def language(self) -> str:
        return DEFAULT_LANGUAGE if self.keywords is None else self.keywords.language

    def record(self, row: int) -> dict[str, Any]:
        start, end = self.record_offsets[row], self.record_offsets[row + 1]
        return decode_record(self.records[start:end])

    def bit_id(self, row: int) -> str:
        # numpy's S32 drops trailing zero bytes on read; pad them back.
        return bytes(self.ids[row]).ljust(32, b"\0").hex()

    def visible_rows(self, granted: frozenset[str]) -> np.ndarray:
        return np.isin(self.tag_ids, allowed_tag_ids(self.tags, granted))

    @cached_property
    def stored_rows_in_file_order(self) -> np.ndarray:
        """Every stored row, in file order (the keyword postings keep this map already)."""
        if self.source_rows is None:
            return np.arange(self.bit_count)
        if self.keywords is not None and self.keywords.stored_rows is not None:
            return self.keywords.stored_rows
        return np.argsort(self.source_rows)

    def member_rows(self, member: int) -> np.ndarray:
        """The stored rows of one member, in its file's order."""
        found = self.members[member]
        if self.source_rows is None:
            return np.arange(found.first, found.stop)
        return self.stored_rows_in_file_order[found.first : found.stop]

    @cached_property
    def owners(self) -> np.ndarray:
        """Each stored row's member (int32): which library file it comes from."""
        sizes = [member.bit_count for member in self.members]
        in_file_order = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
        return in_file_order if self.source_rows is None else in_file_order[self.source_rows]


def text_index_of(segment: Segment) -> TextIndex:
    """The segment's text index; one made in memory without records (tests) has an empty one."""
    if segment.text_index is not None:
        return segment.text_index
    return text_index_in_memory([{}] * segment.bit_count)


def keywords_of(segment: Segment) -> KeywordIndex:
    """The segment's keyword postings; one made in memory without records (tests) has empty ones."""
    if segment.keywords is not None:
        return segment.keywords
    return keyword_index_in_memory([""] * segment.bit_count, [""] * segment.bit_count, segment.tag_ids)


class StoreError(Exception):
    """A compiled folder that cannot be used (missing, stale or corrupt)."""


def read_library_file(path: Path, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> Any:
    """A whole library file decoded at once (small files and tests; compiling streams instead)."""
    return read_whole(path, max_bytes)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_compiled(library: ParsedLibrary, folder: Path, source_key: SourceKey, name: str, *,
                   cluster_from: int = CLUSTER_FROM, scope: str = "") -> Member:
    """Write a library held in memory to `folder` atomically, as a segment of one member (as
    compiling its file would). From `cluster_from` bits the rows are stored in a clustered layout
    (host/store/clusters.py). Its tags are the publisher folder `scope`'s (host/library/visibility.py)."""
    with _building(folder) as building:
        writer = StoreWriter(building)
        try:
            writer.begin_member()
            for start in range(0, len(library.ids), BLOCK):
                stop = start + BLOCK
                records = library.records[start:stop]
                writer.add(in_scope(BitBlock(
                    library.embeddings[start:stop], library.token_counts[start:stop].tolist(),
                    [bytes.fromhex(bit_id) for bit_id in library.ids[start:stop]], [record["text"] for record in records],
                    [record["info"] for record in records], library.access_tags[start:stop]), scope))
            header = LibraryHeader(library.embedding_model, library.details, library.sort, library.dimension,
                                   len(library.ids) + library.duplicates_dropped, library.duplicates_dropped,
                                   library.language)
            writer.end_member(header, name, source_key, scope=scope)
            [member] = writer.finish(library.embedding_model, library.dimension, library.language, name,
                                     cluster_from=cluster_from)
        finally:
            writer.close()
        _replace_folder(building, folder)
    return member


def compile_library(source: Path, folder: Path, *, name: str, access_tag: str | None = None, scope: str = "",
                    cluster_from: int = CLUSTER_FROM, progress: CompileProgress | None = None) -> Member:
    """Compile the library file `source` into `folder` as a segment of one member, streaming it
    (host/library/stream.py); the segment and its member are both called `name`.

    The folder is built beside `folder` and renamed into place only when whole, so a file that
    turns out bad (or cut short) leaves the previous compiled version as it was. Returns the
    member (its source key's SHA-256 taken on the same read). Raises LibraryFormatError (with no
    file name: the caller adds it) or OSError.
    """
    with _building(folder) as building, garbage_collector_paused():
        writer = StoreWriter(building)
        try:
            writer.begin_member()
            header, key = stream_member(source, writer, access_tag=access_tag, scope=scope,
                                        progress=progress.read if progress else None)
            writer.end_member(header, name, key, scope=scope, access_tag=access_tag)
            [member] = writer.finish(header.embedding_model, header.dimension, header.language, name,
                                     cluster_from=cluster_from, step=progress.step if progress else None)
        finally:
            writer.close()  # files closed, and a text index process still running stopped
        _replace_folder(building, folder)
    return member


def stream_member(source: Path, sink: BitSink, *, access_tag: str | None, scope: str,
                  progress: Callable[[int], None] | None = None) -> tuple[LibraryHeader, SourceKey]:
    """Stream the library file `source` into `sink`, its tags scoped to `scope`; its header and
    source key. Raises LibraryFormatError (the first problem, without the file name) or OSError."""
    stat = source.stat()
    streamed = stream_library(source, _Scoped(sink, scope) if scope else sink, access_tag=access_tag,
                              problem_limit=1, progress=progress)
    if streamed.problems:
        raise LibraryFormatError(streamed.problems[0])
    assert streamed.header is not None  # no problem: the top level was checked
    if not SourceKey(stat.st_size, stat.st_mtime_ns, "").matches_stat(source.stat()):
        # Rewritten while we read it: the hash may not be of the bytes parsed, and one version's
        # content must never be filed under another's hash. The next look reads it again.
        raise OSError("the file changed while it was being read")
    return streamed.header, SourceKey(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=streamed.sha256)


def in_scope(block: BitBlock, scope: str) -> BitBlock:
    """`block` with its tags scoped to the publisher folder `scope` (host/library/visibility.py)."""
    if not scope or not any(block.tags):
        return block
    return replace(block, tags=[scoped_tag(scope, tag) if tag else None for tag in block.tags])


class _Scoped:
    """A BitSink handing blocks on with their tags scoped."""

    def __init__(self, sink: BitSink, scope: str) -> None:
        self.sink, self.scope = sink, scope

    def add(self, block: BitBlock) -> None:
        self.sink.add(in_scope(block, self.scope))


@contextmanager
def _building(folder: Path) -> Iterator[Path]:
    """A temporary folder beside `folder`, removed afterwards whatever happens."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        yield building
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _replace_folder(new: Path, target: Path) -> None:
    # Readers hold open memory maps, which survive the old files being unlinked.
    retired = None
    if target.exists():
        retired = target.with_name(f".{target.name}.retired-{os.getpid()}-{os.urandom(4).hex()}")
        target.rename(retired)
    new.rename(target)
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)


def open_segment(folder: Path) -> Segment:
    """Open a compiled folder, checking every file against meta.json; raises StoreError."""
    try:
        meta = read_meta(folder)
        bits, dimension = meta.bits, meta.dimension

        def array(name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
            loaded: np.ndarray = np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
            if loaded.dtype != np.dtype(dtype) or loaded.shape != shape:
                raise StoreError(f"{folder}/{name}.npy: expected {dtype} {shape}, found {loaded.dtype} {loaded.shape}")
            # np.asarray drops the memmap subclass (whose operators are slower) but keeps the mapping.
            return np.asarray(loaded)

        embeddings = array("embeddings", "<f4", (bits, dimension))
        offsets = array("record_offsets", "<i8", (bits + 1,))
        records_path = folder / "records.bin"
        if records_path.stat().st_size != meta.records_bytes or offsets[-1] != meta.records_bytes:
            raise StoreError(f"{records_path}: size does not match meta.json")
        records = (
            np.memmap(records_path, dtype=np.uint8, mode="r")
            if meta.records_bytes
            else np.zeros(0, dtype=np.uint8)
        )
        tag_ids = array("tag_ids", "<u2", (bits,))
        if bits and int(tag_ids.max()) >= len(meta.tags):
            raise StoreError(f"{folder}/tag_ids.npy: tag id out of range")
        members = tuple(meta.members)
        if not _tiled(members, bits):
            raise StoreError(f"{folder}/meta.json: its members do not tile the rows")
        names, load = open_packed(folder)
        if names != {*array_names(), *postings.array_names()}:
            raise StoreError(f"{folder}/text_index.json: not the arrays of a text index and keyword postings")
        clusters = meta.clusters
        source_rows = centroids = cluster_offsets = codes = code_scale = None
        if clusters:
            source_rows = array("source_rows", "<i8", (bits,))
            centroids = np.array(array("centroids", "<f4", (clusters, dimension)))  # read by every query
            cluster_offsets = np.array(array("cluster_offsets", "<i8", (clusters + 1,)))
            _check_layout(folder, source_rows, cluster_offsets, bits)
            codes = array("codes", "|u1", (bits, dimension))
            code_scale = np.array(array("code_scale", "<f4", (2, dimension)))
        return Segment(
            name=meta.name,
            embedding_model=meta.embedding_model,
            embeddings=embeddings,
            token_counts=array("token_counts", "<i4", (bits,)),
            tag_ids=tag_ids,
            tags=tuple(meta.tags),
            ids=array("ids", "|S32", (bits,)),
            id_heads=array("id_heads", "<u8", (bits,)),
            sign_codes=array("sign_codes", "<u8", (words_for(dimension), bits)),
            records=records,
            record_offsets=offsets,
            members=members,
            max_norm=meta.max_norm,
            text_index=assemble_text_index(load, bits),
            keywords=open_keyword_index(load, bits, meta.keywords["language"]),
            source_rows=source_rows,
            centroids=centroids,
            cluster_offsets=cluster_offsets,
            codes=codes,
            code_scale=code_scale,
        )
    except StoreError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as problem:
        raise StoreError(f"{folder}: unreadable compiled segment ({problem})") from None


def _tiled(members: tuple[Member, ...], rows: int) -> bool:
    """Whether the members' rows follow one another from the first row to the last, none empty-handed."""
    reached = 0
    for member in members:
        if member.first != reached or member.stop < member.first:
            return False
        reached = member.stop
    return reached == rows


class SegmentMeta(msgspec.Struct):
    """A segment's meta.json (host/store/writer.py writes it)."""

    store_format: int
    name: str
    embedding_model: str
    bits: int
    dimension: int
    tags: list[str]
    records_bytes: int
    max_norm: float
    clusters: int
    keywords: dict[str, str]
    members: list[Member]


def read_meta(folder: Path) -> SegmentMeta:
    """A segment's meta.json, checked to be of this store format; StoreError otherwise."""
    body = (folder / "meta.json").read_bytes()
    try:
        meta = msgspec.json.decode(body, type=SegmentMeta)
    except msgspec.ValidationError as problem:
        found = _store_format(body)
        if found != STORE_FORMAT:
            raise StoreError(f"{folder}: store format {found!r} is not {STORE_FORMAT}") from None
        raise StoreError(f"{folder}/meta.json: {problem}") from None
    except msgspec.DecodeError as problem:
        raise StoreError(f"{folder}/meta.json: not JSON ({problem})") from None
    if meta.store_format != STORE_FORMAT:
        raise StoreError(f"{folder}: store format {meta.store_format!r} is not {STORE_FORMAT}")
    return meta


def _store_format(body: bytes) -> object:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document.get("store_format") if isinstance(document, dict) else None


def _check_layout(folder: Path, source_rows: np.ndarray, cluster_offsets: np.ndarray, bits: int) -> None:
    """A layout is trusted only if every row is stored once and the clusters tile the rows."""
    if cluster_offsets[0] != 0 or cluster_offsets[-1] != bits or np.any(np.diff(cluster_offsets) < 0):
        raise StoreError(f"{folder}/cluster_offsets.npy: clusters do not tile the rows")
    if bits and (source_rows.min() < 0 or source_rows.max() >= bits
                 or np.bincount(source_rows, minlength=bits).max() != 1):
        raise StoreError(f"{folder}/source_rows.npy: not a permutation of the rows")


def install_segment(files: dict[str, Path], folder: Path) -> None:
    """Put a segment made elsewhere (its files by name, e.g. downloaded by a replica) at `folder`,
    atomically: readers see no segment or the whole of it. The files are hard-linked (copied across
    file systems); nothing checks them here: `open_segment` does."""
    with _building(folder) as building:
        for name, path in files.items():
            try:
                os.link(path, building / name)
            except OSError:
                shutil.copyfile(path, building / name)
        _replace_folder(building, folder)
