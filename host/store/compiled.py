"""The compiled form of a library: memory-mapped numpy arrays and msgpack records.

A library file is parsed once and written to its own folder in the cache:

    embeddings.npy      (bits, dimension) float32, C-contiguous: opened with mmap, so the pages
                        are shared by every worker and only read when a query touches them
    token_counts.npy    (bits,) int32
    tag_ids.npy         (bits,) uint16, an index into meta["tags"] (0 means public)
    ids.npy             (bits,) S32, raw SHA-256 canonical ids
    sign_codes.npy      (words, bits) uint64, the signs of each embedding, for approximate search
    records.bin         one msgpack map per bit ({"text", "info"}), back to back
    record_offsets.npy  (bits + 1,) int64, where each record starts and ends
    text_index.bin      words and values of each bit's text and info fields, for constraints and
    text_index.json     term scores: arrays packed in one file, and their layout (host/constraints)
    meta.json           written last: the source's cache key, the shapes above, the largest
                        embedding norm (which bounds the rounding error of a float32 dot product)
                        and a digest of the public bits (a reload shows only if they changed)

A library of at least `CLUSTER_FROM` bits (host/store/clusters.py) is stored clustered: every file
above holds its rows sorted by cluster (rows of a cluster in file order), and three more say how:

    source_rows.npy     (bits,) int64, the row in the library file of each stored row
    centroids.npy       (clusters, dimension) float32, unit length
    cluster_offsets.npy (clusters + 1,) int64, cluster c is stored at rows [offsets[c], offsets[c + 1])

Rows are only ever addressed by stored row; `source_rows` breaks ties (file order, as without a
layout) and gives the file order back when a library is published.

The folder is built under a temporary name and renamed into place, so a reader never sees a
half-written one; a folder whose files disagree with meta.json is rebuilt, not trusted.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from host.constraints.text_index import TextIndex, build_text_index, open_text_index, save_text_index
from host.library.format import LibraryFormatError, ParsedLibrary, parse_json, parse_library
from host.library.visibility import PUBLIC, allowed_tag_ids
from host.store.clusters import CLUSTER_FROM, plan_layout
from host.store.sign_codes import sign_codes, words_for

STORE_FORMAT = 6  # 3: max_norm; 4: public_digest; 5: text_index.bin/.json; 6: the clustered layout
ROW_BLOCK = 1 << 14  # rows copied at a time when writing a permuted matrix (no second full copy)
DEFAULT_MAX_SOURCE_BYTES = 8 << 30
log = logging.getLogger("polymath_host.store")


@dataclass(frozen=True)
class SourceKey:
    """What identifies a library file's contents without parsing it."""

    size: int
    mtime_ns: int
    sha256: str

    def matches_stat(self, stat: os.stat_result) -> bool:
        return self.size == stat.st_size and self.mtime_ns == stat.st_mtime_ns


@dataclass(frozen=True)
class CompiledLibrary:
    """One library as read-only arrays. Cheap to open: nothing is parsed or copied."""

    name: str
    source: Path
    embedding_model: str
    embeddings: np.ndarray
    token_counts: np.ndarray
    tag_ids: np.ndarray
    tags: tuple[str, ...]
    ids: np.ndarray
    sign_codes: np.ndarray  # (words, bits) uint64, word-major: see host/store/sign_codes.py
    records: np.ndarray  # uint8 memory map of records.bin
    record_offsets: np.ndarray
    details: dict[str, Any]
    source_key: SourceKey
    max_norm: float = 1.0  # the largest embedding's L2 norm
    public_digest: str = ""  # changes exactly when what an anonymous caller may see of it changes
    text_index: TextIndex | None = None  # None only for libraries made in memory, without records
    source_rows: np.ndarray | None = None  # stored row -> its row in the file; None: stored in file order
    centroids: np.ndarray | None = None  # (clusters, dimension) float32 of a clustered library
    cluster_offsets: np.ndarray | None = None  # (clusters + 1,) int64: where each cluster's rows start

    @property
    def bit_count(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.embeddings.shape[1])

    def record(self, row: int) -> dict[str, Any]:
        start, end = self.record_offsets[row], self.record_offsets[row + 1]
        record: dict[str, Any] = msgpack.unpackb(self.records[start:end])
        return record

    def bit_id(self, row: int) -> str:
        # numpy's S32 drops trailing zero bytes on read; pad them back.
        return bytes(self.ids[row]).ljust(32, b"\0").hex()

    def visible_rows(self, granted: frozenset[str]) -> np.ndarray:
        return np.isin(self.tag_ids, allowed_tag_ids(self.tags, granted))

    def rows_in_file_order(self) -> np.ndarray:
        """Every stored row, in the order of the library file."""
        if self.source_rows is None:
            return np.arange(self.bit_count)
        return np.argsort(self.source_rows)

    def visible_bit_count(self, granted: frozenset[str]) -> int:
        """Without a pass over the rows: its cost never tells a private library from an unknown one."""
        return int(sum(self._tag_counts[tag_id] for tag_id in allowed_tag_ids(self.tags, granted)))

    @cached_property
    def _tag_counts(self) -> list[int]:
        return [int(count) for count in np.bincount(self.tag_ids, minlength=len(self.tags))]



class StoreError(Exception):
    """A compiled folder that cannot be used (missing, stale or corrupt)."""


def read_library_file(path: Path, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> Any:
    size = path.stat().st_size
    if size > max_bytes:
        raise LibraryFormatError(
            f"file is {size:,} bytes, over the {max_bytes:,}-byte limit (raise --max-library-bytes)"
        )
    try:
        # Decoded text, not bytes: json.loads(bytes) would hold the bytes, their decoded copy and
        # the objects at once. The text is freed as soon as the objects exist.
        with path.open(encoding="utf-8-sig") as handle:
            return parse_json(handle.read())
    except UnicodeDecodeError:
        raise LibraryFormatError("not valid JSON: not UTF-8 text") from None
    except ValueError as problem:
        raise LibraryFormatError(str(problem)) from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_compiled(library: ParsedLibrary, folder: Path, source_key: SourceKey, name: str, *,
                   cluster_from: int = CLUSTER_FROM) -> None:
    """Write `library` to `folder` atomically: build beside it, then rename into place.

    From `cluster_from` bits the rows are stored in a clustered layout (host/store/clusters.py).
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        tags = (PUBLIC, *sorted({tag for tag in library.access_tags if tag}))
        tag_index = {tag: index for index, tag in enumerate(tags)}
        tag_ids = np.array([tag_index[tag or PUBLIC] for tag in library.access_tags], np.uint16)
        packed = [msgpack.packb(record) for record in library.records]
        layout = plan_layout(library.embeddings, tag_ids == 0) if len(packed) >= max(cluster_from, 1) else None
        order = None if layout is None else layout.order
        stored_packed = packed if order is None else [packed[row] for row in order.tolist()]
        offsets = np.zeros(len(packed) + 1, dtype=np.int64)
        np.cumsum([len(item) for item in stored_packed], out=offsets[1:])

        def arranged(array: np.ndarray) -> np.ndarray:
            return array if order is None else array[order]

        arrays = {
            "token_counts": arranged(library.token_counts.astype(np.int32)),
            "tag_ids": arranged(tag_ids),
            "ids": arranged(np.array([bytes.fromhex(bit_id) for bit_id in library.ids], dtype="S32")),
            "record_offsets": offsets,
            "sign_codes": sign_codes(library.embeddings, order),
        }
        if layout is not None:
            arrays.update(source_rows=layout.order, centroids=layout.centroids, cluster_offsets=layout.offsets)
        _write_synced(building / "embeddings.npy", lambda handle: _save_rows(handle, library.embeddings, order))
        for array_name, array in arrays.items():
            _write_synced(building / f"{array_name}.npy", lambda handle, a=array: np.save(handle, a))
        _write_synced(building / "records.bin", lambda handle: handle.writelines(stored_packed))
        save_text_index(build_text_index(library.records if order is None else
                                         [library.records[row] for row in order.tolist()]), building)
        meta = {
            "store_format": STORE_FORMAT,
            "name": name,
            "source": source_key.__dict__,
            "embedding_model": library.embedding_model,
            "bits": len(library.ids),
            "dimension": library.dimension,
            "tags": list(tags),
            "details": library.details,
            "records_bytes": int(offsets[-1]),
            "max_norm": largest_norm(library.embeddings),
            "public_digest": public_digest(library, packed),
            "clusters": 0 if layout is None else layout.clusters,
        }
        _write_synced(building / "meta.json", lambda handle: handle.write(json.dumps(meta).encode()))
        _replace_folder(building, folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _save_rows(handle: Any, embeddings: np.ndarray, order: np.ndarray | None) -> None:
    """`np.save` of `embeddings[order]`, written block by block: never a second full copy."""
    if order is None:
        np.save(handle, np.asarray(embeddings, dtype="<f4"))
        return
    header = {"descr": "<f4", "fortran_order": False, "shape": tuple(embeddings.shape)}
    np.lib.format.write_array_header_1_0(handle, header)
    for start in range(0, len(order), ROW_BLOCK):
        handle.write(np.ascontiguousarray(embeddings[order[start : start + ROW_BLOCK]], dtype="<f4").tobytes())


def public_digest(library: ParsedLibrary, packed_records: list[bytes]) -> str:
    """A digest of everything an anonymous caller may see: the public bits, whole, and the message.

    Computed at compile time so that telling whether a reload changed the public view costs
    nothing; private bits never enter it, so their changes never show.
    """
    digest = hashlib.sha256()
    message = library.details.get("message")
    digest.update(message.encode() if isinstance(message, str) else b"\0")
    for row, tag in enumerate(library.access_tags):
        if not tag:
            digest.update(bytes.fromhex(library.ids[row]) + library.token_counts[row].tobytes())
            digest.update(library.embeddings[row].tobytes() + packed_records[row])
    return digest.hexdigest()


def largest_norm(embeddings: np.ndarray, block: int = 1 << 14) -> float:
    """The largest row norm, computed in float64 block by block (no full-size temporary)."""
    largest = 0.0
    for start in range(0, len(embeddings), block):
        rows = embeddings[start : start + block].astype(np.float64)
        largest = max(largest, float(np.sqrt(np.einsum("ij,ij->i", rows, rows).max())))
    return largest


def _write_synced(path: Path, write: Any) -> None:
    with path.open("wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())


def _replace_folder(new: Path, target: Path) -> None:
    # Readers hold open memory maps, which survive the old files being unlinked.
    retired = None
    if target.exists():
        retired = target.with_name(f".{target.name}.retired-{os.getpid()}-{os.urandom(4).hex()}")
        target.rename(retired)
    new.rename(target)
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)


def open_compiled(folder: Path, source: Path) -> CompiledLibrary:
    """Open a compiled folder, checking every file against meta.json; raises StoreError."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("store_format") != STORE_FORMAT:
            raise StoreError(f"{folder}: store format {meta.get('store_format')!r} is not {STORE_FORMAT}")
        bits, dimension = meta["bits"], meta["dimension"]

        def array(name: str, dtype: str, shape: tuple[int, ...], mmap: bool = True) -> np.ndarray:
            loaded: np.ndarray = np.load(folder / f"{name}.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
            if loaded.dtype != np.dtype(dtype) or loaded.shape != shape:
                raise StoreError(f"{folder}/{name}.npy: expected {dtype} {shape}, found {loaded.dtype} {loaded.shape}")
            return loaded

        # np.asarray drops the memmap subclass (whose operators are slower) but keeps the mapping.
        embeddings = np.asarray(array("embeddings", "<f4", (bits, dimension)))
        offsets = array("record_offsets", "<i8", (bits + 1,), mmap=False)
        records_path = folder / "records.bin"
        if records_path.stat().st_size != meta["records_bytes"] or offsets[-1] != meta["records_bytes"]:
            raise StoreError(f"{records_path}: size does not match meta.json")
        records = (
            np.memmap(records_path, dtype=np.uint8, mode="r")
            if meta["records_bytes"]
            else np.zeros(0, dtype=np.uint8)
        )
        tag_ids = array("tag_ids", "<u2", (bits,), mmap=False)
        if bits and int(tag_ids.max()) >= len(meta["tags"]):
            raise StoreError(f"{folder}/tag_ids.npy: tag id out of range")
        clusters = int(meta["clusters"])
        source_rows = centroids = cluster_offsets = None
        if clusters:
            source_rows = array("source_rows", "<i8", (bits,), mmap=False)
            centroids = array("centroids", "<f4", (clusters, dimension), mmap=False)
            cluster_offsets = array("cluster_offsets", "<i8", (clusters + 1,), mmap=False)
            _check_layout(folder, source_rows, cluster_offsets, bits)
        return CompiledLibrary(
            name=meta["name"],
            source=source,
            embedding_model=meta["embedding_model"],
            embeddings=embeddings,
            token_counts=array("token_counts", "<i4", (bits,), mmap=False),
            tag_ids=tag_ids,
            tags=tuple(meta["tags"]),
            ids=array("ids", "|S32", (bits,), mmap=False),
            sign_codes=np.asarray(array("sign_codes", "<u8", (words_for(dimension), bits))),
            records=records,
            record_offsets=offsets,
            details=meta["details"],
            source_key=SourceKey(**meta["source"]),
            max_norm=float(meta["max_norm"]),
            public_digest=meta["public_digest"],
            text_index=open_text_index(folder, bits),
            source_rows=source_rows,
            centroids=centroids,
            cluster_offsets=cluster_offsets,
        )
    except StoreError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as problem:
        raise StoreError(f"{folder}: unreadable compiled library ({problem})") from None


def _check_layout(folder: Path, source_rows: np.ndarray, cluster_offsets: np.ndarray, bits: int) -> None:
    """A layout is trusted only if every row is stored once and the clusters tile the rows."""
    if cluster_offsets[0] != 0 or cluster_offsets[-1] != bits or np.any(np.diff(cluster_offsets) < 0):
        raise StoreError(f"{folder}/cluster_offsets.npy: clusters do not tile the rows")
    if bits and (source_rows.min() < 0 or source_rows.max() >= bits
                 or np.bincount(source_rows, minlength=bits).max() != 1):
        raise StoreError(f"{folder}/source_rows.npy: not a permutation of the rows")


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise compilation of one library across processes (workers start together)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_library(
    source: Path,
    folder: Path,
    *,
    name: str,
    access_tag: str | None = None,
    max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
) -> tuple[CompiledLibrary, bool]:
    """The compiled library for `source`, compiling it first if needed.

    Returns (library, compiled_now). An unchanged source (same size and mtime) is opened
    without reading it; a touched but identical one (same SHA-256) is not recompiled either.
    Raises LibraryFormatError (with no file name: the caller adds it) or OSError.
    """
    with _locked(folder):
        stat = source.stat()
        existing = _try_open(folder, source)
        if existing is not None and existing.source_key.matches_stat(stat):
            return existing, False
        sha256 = file_sha256(source)
        key = SourceKey(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=sha256)
        if existing is not None and existing.source_key.sha256 == sha256:
            _rewrite_source_key(folder, key)
            return open_compiled(folder, source), False
        parsed = parse_library(read_library_file(source, max_bytes), access_tag=access_tag, consume=True)
        if not key.matches_stat(source.stat()):
            # Rewritten while we read it: the hash may not be of the bytes parsed, and one version's
            # content must never be filed under another's hash. The next look reads it again.
            raise OSError("the file changed while it was being read")
        write_compiled(parsed, folder, key, name)
        return open_compiled(folder, source), True


def _try_open(folder: Path, source: Path) -> CompiledLibrary | None:
    if not (folder / "meta.json").exists():
        return None
    try:
        return open_compiled(folder, source)
    except StoreError as problem:
        log.warning("rebuilding %s: %s", folder, problem)
        return None


def _rewrite_source_key(folder: Path, key: SourceKey) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    meta["source"] = key.__dict__
    temporary = folder / "meta.json.tmp"
    _write_synced(temporary, lambda handle: handle.write(json.dumps(meta).encode()))
    os.replace(temporary, folder / "meta.json")


def install_compiled(files: dict[str, Path], folder: Path) -> None:
    """Put a compiled store made elsewhere (its files by name, e.g. downloaded by a replica) at
    `folder`, atomically and under the lock compilation takes: readers see the old store or the new one.
    The files are hard-linked (copied across file systems); nothing checks them here: `open_compiled` does."""
    with _locked(folder):
        building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            for name, path in files.items():
                try:
                    os.link(path, building / name)
                except OSError:
                    shutil.copyfile(path, building / name)
            _replace_folder(building, folder)
        finally:
            shutil.rmtree(building, ignore_errors=True)
