"""Writing a compiled library folder from bits that arrive block by block, in bounded memory.

`StoreWriter` is the one way a compiled folder is made (host/store/compiled.py documents its
files): a library file streamed from disk (host/library/stream.py) and a library already in memory
(`write_compiled`) both feed it `BitBlock`s, so the two give byte-identical folders.

Memory stays at a few dozen bytes per bit plus the text index, whatever the vectors weigh:

1. While the bits arrive, each block's vectors are appended to `embeddings.npy` (a header of fixed
   size is fixed up at the end) and its packed records to `records.bin`, in file order; per-bit
   scalars (id, token count, tag, record length) and sign codes are kept in small arrays, the
   public digest and the largest norm are updated as they go.
2. At the end, a library of `cluster_from` bits or more gets its layout (host/store/clusters.py: k-means
   on a sample of the rows, every row assigned block by block, each block's rows handed to one of 16
   part files by cluster range as they are assigned), and the two big files are written again in the
   layout's order (the vectors from the part files, the records from their file-order copy), which
   are then deleted; the vectors' 8-bit codes (host/store/codes.py) are written beside them. This
   runs on a thread of its own...
3. ...while the records' words are read for the text index (Python, this thread), in file
   order (or in a second process, host/store/text_process.py); the index is finished in stored
   order once the layout is known, beside the rewrite: its last sort holds 8 bytes a word (the
   term ids' own array, keyed in place), so the two fit together in the vectors' size.

Rows are read back with pread (`RowFile`) or through a map whose pages are let go of after each
block (`Mapped`), never through a plain map: its scattered reads keep whole runs of pages around
each row, and the resident set would grow to the file.

STORE_FORMAT 7: compiled by this writer (codes.npy, code_scale.npy, id_heads.npy; the public digest
is sha256(message + sha256(public bits))).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import mmap
import os
import threading
from array import array
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np

from host.library.format import BitBlock, LibraryHeader
from host.library.visibility import PUBLIC
from host.service.allocator import release_free_memory
from host.store.clusters import CLUSTER_FROM, Layout, plan_layout
from host.store.codes import code_scale, encode
from host.store.sign_codes import pack_signs, words_for
from host.store.text_process import TextIndexer

STORE_FORMAT = 7  # 3: max_norm; 4: public_digest; 5: text_index.bin/.json; 6: clustered layout; 7: this writer, codes
ROW_BLOCK = 4096  # rows copied at a time when writing a permuted matrix (no second full copy)
RECORD_BLOCK_BYTES = 1 << 20  # records rewritten at a time, at most
PARTS = 16  # the vectors are put in the layout's order through this many files (RowParts)
HEADER_BYTES = 128  # the .npy header of any (rows, dimension) float32 array up to 10^15 rows
Step = Callable[[str, float], None]  # (what is being done, fraction of it done)


class StoreWriter:
    """A BitSink that builds a compiled folder in `building` (see the module docstring)."""

    def __init__(self, building: Path, *, text_process_from: int | None = None) -> None:
        self.building = building
        self.rows = 0
        self.dimension: int | None = None
        self._vectors: BinaryIO = (building / "embeddings.npy").open("wb")
        self._vectors.write(b"\0" * HEADER_BYTES)
        self._records: BinaryIO = (building / "records.bin").open("wb")
        self._records_size = 0
        self._record_lengths = array("q")
        self._text = TextIndexer(building, self._record_lengths, process_from=text_process_from)
        self._token_counts = array("q")
        self._tags: dict[str | None, int] = {None: 0}  # interned in order of first sight
        self._tag_numbers = array("H")
        self._ids = bytearray()
        self._signs: list[np.ndarray] = []
        self._background: list[_Background] = []  # joined by `close`, whatever `finish` ended with
        self._public = hashlib.sha256()  # the public bits, in file order
        self._largest_norm = 0.0
        self._low: np.ndarray | None = None  # each dimension's smallest and largest value (for the codes)
        self._high: np.ndarray | None = None

    def add(self, block: BitBlock) -> None:
        if not len(block):
            return
        vectors = np.ascontiguousarray(block.vectors, dtype="<f4")
        self.dimension = vectors.shape[1]
        packed = list(map(_pack, block.records))
        self._vectors.write(vectors.data)
        records = b"".join(packed)
        self._records.write(records)
        self._records.flush()  # the text index's process reads what is written
        self._records_size += len(records)
        self._record_lengths.extend(map(len, packed))
        self._text.records_written(self._records_size)
        self._token_counts.extend(block.token_counts)
        tags = self._tags
        self._tag_numbers.extend(tags.setdefault(tag, len(tags)) for tag in block.tags)
        self._ids += b"".join(block.ids)
        self._signs.append(pack_signs(vectors))
        self._largest_norm = max(self._largest_norm, largest_norm(vectors))
        low, high = vectors.min(axis=0), vectors.max(axis=0)
        self._low = low if self._low is None else np.minimum(self._low, low)
        self._high = high if self._high is None else np.maximum(self._high, high)
        self._public.update(public_bytes(vectors, block, packed))
        self.rows += len(block)

    def close(self) -> None:
        for work in self._background:  # a finish that failed must not leave a thread writing in the folder
            work.join()
        self._vectors.close()
        self._records.close()
        self._text.close()

    def finish(self, header: LibraryHeader, source: dict[str, Any], name: str, *, cluster_from: int = CLUSTER_FROM,
               step: Step | None = None) -> None:
        """Write everything else and meta.json (last): `building` then holds a whole compiled folder."""
        self._vectors.close()
        self._records.close()
        step = step or (lambda what, done: None)
        rows, dimension = self.rows, self.dimension or header.dimension or 0
        folder = self.building
        tags = (PUBLIC, *sorted(tag for tag in self._tags if tag))
        renumber = np.array([tags.index(tag or PUBLIC) for tag in self._tags], dtype=np.uint16)
        tag_ids = renumber[np.frombuffer(self._tag_numbers, dtype=np.uint16)] if rows else np.zeros(0, np.uint16)
        lengths = np.frombuffer(self._record_lengths, dtype=np.int64) if rows else np.zeros(0, np.int64)
        _fix_npy_header(folder / "embeddings.npy", (rows, dimension))
        clustered = rows >= max(cluster_from, 1)
        scale = code_scale(self._low, self._high) if clustered and self._low is not None and self._high is not None else None
        # The layout (BLAS) runs on a thread of its own while this one splits the records into
        # words (Python), unless a second process does that already: on two cores they overlap.
        parts = RowParts(folder)
        layout_thread = self._in_background(lambda: self._plan(tag_ids == 0, step, parts) if clustered else None)
        step("indexing text", 0.0)
        self._text.all_written(self._records_size)
        layout = layout_thread.result()
        release_free_memory()  # k-means' samples and the reading's buffers, freed but kept by malloc
        order = None if layout is None else layout.order
        step("writing", 0.0)
        if layout is not None:
            write_synced(folder / "source_rows.npy", partial(np.save, arr=layout.order))
        # The text index is finished in stored order (its process sorts ~8 bytes a word), the vectors
        # are rewritten on a thread and the records here, all at once.
        self._text.finish("source_rows.npy" if layout is not None else None)
        rewrite = self._in_background(lambda: parts.write(folder / "embeddings.npy", scale, step)
                                      if layout is not None and scale is not None else None)
        record_offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(lengths if order is None else lengths[order], out=record_offsets[1:])
        if order is not None:
            _rewrite_records(folder / "records.bin", lengths, order)
        signs = np.concatenate(self._signs) if self._signs else np.zeros((0, words_for(dimension)), dtype="<u8")
        self._signs = []

        def arranged(values: np.ndarray) -> np.ndarray:
            return values if order is None else values[order]

        arrays = {
            "token_counts": arranged(np.frombuffer(self._token_counts, dtype=np.int64).astype(np.int32)
                                     if rows else np.zeros(0, np.int32)),
            "tag_ids": arranged(tag_ids),
            "ids": arranged(np.frombuffer(bytes(self._ids), dtype="S32") if rows else np.zeros(0, "S32")),
            # The first 8 bytes of every id, sorted: telling whether libraries share a bit costs a
            # merge of these, not a sort of every id, when a host opens them (ModelIndex).
            "id_heads": np.sort(np.frombuffer(bytes(self._ids), dtype="<u8")[::4]) if rows else np.zeros(0, "<u8"),
            "record_offsets": record_offsets,
            "sign_codes": np.ascontiguousarray(arranged(signs).T),
        }
        if layout is not None and scale is not None:
            arrays.update(centroids=layout.centroids, cluster_offsets=layout.offsets, code_scale=scale)
        for array_name, values in arrays.items():
            write_synced(folder / f"{array_name}.npy", partial(np.save, arr=values))
        sync(folder / "records.bin")
        rewrite.result()
        sync(folder / "embeddings.npy")
        release_free_memory()  # the rewrite's buffers
        self._text.wait()
        message = header.details.get("message")
        public_digest = hashlib.sha256(message.encode() if isinstance(message, str) else b"\0")
        public_digest.update(self._public.digest())
        meta = {
            "store_format": STORE_FORMAT,
            "name": name,
            "source": source,
            "embedding_model": header.embedding_model,
            "bits": rows,
            "dimension": dimension,
            "tags": list(tags),
            "details": header.details,
            "records_bytes": int(record_offsets[-1]),
            "max_norm": self._largest_norm,
            "public_digest": public_digest.hexdigest(),
            "clusters": 0 if layout is None else layout.clusters,
        }
        write_synced(folder / "meta.json", lambda handle: handle.write(json.dumps(meta).encode()))


    def _in_background(self, function: Callable[[], Any]) -> _Background:
        work = _Background(function)
        self._background.append(work)
        return work

    def _blas_threads(self) -> int:
        """Every core, but one left to the text index's process while it works."""
        cores = os.cpu_count() or 1
        return max(1, cores - 1) if self._text.busy() else cores

    def _plan(self, public: np.ndarray, step: Step, parts: RowParts) -> Layout:
        """The clustered layout of the vectors written so far (file order), every row also handed
        to `parts` as it is assigned; the vectors in file order are then deleted."""
        path = self.building / "embeddings.npy"
        try:
            with RowFile(path) as matrix:
                layout = plan_layout(matrix, public, step=step, each_block=parts.add, threads=self._blas_threads)
        finally:
            parts.close()
        path.unlink()
        return layout


class _Background:
    """A function run on a thread of its own; `result()` waits for it and raises what it raised."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self._function = function
        self._outcome: list[Any] = []
        self._thread = threading.Thread(target=self._run, name="compile-background", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome.append((True, self._function()))
        except BaseException as problem:  # handed to the waiting thread
            self._outcome.append((False, problem))

    def join(self) -> None:
        """Wait for it, whatever it ends with (a compile that failed must not leave it writing)."""
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        succeeded, value = self._outcome[0]
        if not succeeded:
            raise value
        return value


_pack = msgspec.msgpack.Encoder().encode  # the bytes msgpack.packb gives a record (tested), ~3x faster


def public_bytes(vectors: np.ndarray, block: BitBlock, packed: list[bytes]) -> bytes:
    """What the public digest reads of a block: for each public bit in turn, its id, its token
    count (int64), its vector and its packed record."""
    rows = [row for row, tag in enumerate(block.tags) if not tag]
    if not rows:
        return b""
    width = vectors.shape[1] * 4
    every = len(rows) == len(block)
    vector_bytes = vectors.tobytes() if every else vectors[rows].tobytes()
    count_bytes = np.asarray(block.token_counts if every else [block.token_counts[row] for row in rows], "<i8").tobytes()
    parts: list[bytes] = []
    for place, row in enumerate(rows):
        parts += (block.ids[row], count_bytes[place * 8 : place * 8 + 8],
                  vector_bytes[place * width : (place + 1) * width], packed[row])
    return b"".join(parts)


def largest_norm(vectors: np.ndarray) -> float:
    """The largest row norm, exact (float64) for the rows that could be it, float32 for the others."""
    if not len(vectors):
        return 0.0
    squares = np.vecdot(vectors, vectors)
    # float32 sums of squares are within a relative 1e-6 of exact at any dimension stored here.
    near = np.flatnonzero(squares >= squares.max() * (1 - 1e-4))
    rows64 = vectors[near].astype(np.float64)
    return float(np.sqrt(np.einsum("ij,ij->i", rows64, rows64).max()))


class RowFile:
    """The rows of a (rows, dimension) float32 .npy, read with pread: the page cache keeps what was
    read, this process's resident memory does not (a memory map of scattered rows maps whole runs
    of pages around each one: 2,000 rows of a 600 MB file mapped all 600 MB)."""

    def __init__(self, path: Path) -> None:
        self._handle = path.open("rb")
        np.lib.format.read_magic(self._handle)
        shape, _, dtype = np.lib.format.read_array_header_1_0(self._handle)
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))
        self.dtype = dtype
        self._offset = self._handle.tell()
        self._row_bytes = shape[1] * dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice | np.ndarray) -> np.ndarray:
        """Rows `start:stop`, or the rows listed (ascending reads fastest)."""
        if isinstance(rows, slice):
            start, stop, _ = rows.indices(len(self))
            out = np.empty((max(stop - start, 0), self.shape[1]), dtype=self.dtype)
            read_at(self._handle.fileno(), self._offset + start * self._row_bytes, out)
            return out
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.shape[1]), dtype=self.dtype)
        runs = np.flatnonzero(np.diff(rows) != 1) + 1  # consecutive rows are read at once
        bounds = [0, *runs.tolist(), len(rows)]
        fd, offset, row_bytes = self._handle.fileno(), self._offset, self._row_bytes
        for first, last in itertools.pairwise(bounds):
            read_at(fd, offset + int(rows[first]) * row_bytes, out[first:last])
        return out

    def __enter__(self) -> RowFile:
        return self

    def __exit__(self, *exception: object) -> None:
        self._handle.close()


def read_at(fd: int, offset: int, out: np.ndarray) -> None:
    """Fill `out` (C-contiguous) with the bytes of the file at `offset`."""
    view = memoryview(out).cast("B")  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done:]], offset + done)
        if count <= 0:
            raise OSError(f"unexpected end of file at byte {offset + done:,}")
        done += count


def _fix_npy_header(path: Path, shape: tuple[int, int]) -> None:
    """Write the real header over the placeholder: the file is then exactly what np.save writes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    if len(header.getvalue()) != HEADER_BYTES:  # more rows than any disk holds
        raise ValueError(f"{path}: a .npy header of {len(header.getvalue())} bytes")
    with path.open("r+b") as handle:
        handle.write(header.getvalue())


class RowParts:
    """The vectors put in the layout's order in two sequential passes instead of one scattered one.

    While the rows are assigned (in file order), each block's rows go to one of `PARTS` files by
    cluster range (clusters [k * C / PARTS, (k + 1) * C / PARTS)), in file order within each, with
    their clusters kept here (4 bytes a row). Then each part is read whole, put in cluster order
    (a stable sort: file order within a cluster, as the layout's `order`) and appended to the
    final file with its codes. Memory holds one part, about 1/PARTS of the vectors; a part much
    larger than that (clusters of very uneven sizes) is rewritten a block at a time instead.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: list[BinaryIO] = []
        self._labels: list[list[np.ndarray]] = [[] for _ in range(PARTS)]
        self._rows = [0] * PARTS
        self._shape: tuple[int, int] = (0, 0)

    def _path(self, part: int) -> Path:
        return self.folder / f".part-{part:02d}.bin"

    def add(self, rows: np.ndarray, labels: np.ndarray, clusters: int) -> None:
        if not self._files:
            self._files = [self._path(part).open("wb") for part in range(PARTS)]
        part_of = labels * PARTS // clusters
        by_part = np.argsort(part_of, kind="stable")
        arranged, arranged_labels = rows[by_part], labels[by_part].astype(np.int32)
        bounds = np.searchsorted(part_of[by_part], np.arange(PARTS + 1))
        for part in np.flatnonzero(np.diff(bounds)).tolist():
            first, last = int(bounds[part]), int(bounds[part + 1])
            self._files[part].write(arranged[first:last].data)
            self._labels[part].append(arranged_labels[first:last])
            self._rows[part] += last - first
        self._shape = (self._shape[0] + len(rows), rows.shape[1])

    def close(self) -> None:
        for handle in self._files:
            handle.close()

    def write(self, path: Path, scale: np.ndarray, step: Step) -> None:
        """The final (rows, dimension) .npy at `path`, and codes.npy beside it; the parts are deleted."""
        rows, dimension = self._shape
        done = 0
        scratch = np.empty((ROW_BLOCK, dimension), np.float32)
        with path.open("wb") as handle, path.with_name("codes.npy").open("wb") as codes:
            np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": self._shape})
            np.lib.format.write_array_header_1_0(codes, {"descr": "|u1", "fortran_order": False, "shape": self._shape})
            for part in range(PARTS):
                labels = np.concatenate(self._labels[part]) if self._labels[part] else np.zeros(0, np.int32)
                self._labels[part] = []
                order = np.argsort(labels, kind="stable")
                source = self._path(part)
                if not self._files or not len(order):
                    source.unlink(missing_ok=True)
                    continue
                if len(order) * PARTS <= 2 * rows:
                    blocks = _arranged(np.fromfile(source, dtype="<f4").reshape(len(order), dimension), order)
                else:  # a part far larger than its share: never whole in memory
                    blocks = _gathered(source, (len(order), dimension), order)
                for block in blocks:  # a block at a time: the codes' temporary arrays stay in cache
                    handle.write(block.data)
                    if scratch.shape != block.shape:
                        scratch = np.empty(block.shape, np.float32)
                    codes.write(encode(block, scale, scratch).data)
                    done += len(block)
                    step("writing", done / rows)
                source.unlink()
        sync(path.with_name("codes.npy"))


def _arranged(matrix: np.ndarray, order: np.ndarray) -> Iterator[np.ndarray]:
    """Rows `order` of `matrix`, ROW_BLOCK at a time."""
    for start in range(0, len(order), ROW_BLOCK):
        yield matrix[order[start : start + ROW_BLOCK]]


def _gathered(path: Path, shape: tuple[int, int], order: np.ndarray) -> Iterator[np.ndarray]:
    """Rows `order` of the raw float32 matrix in `path`, ROW_BLOCK at a time, through a released map."""
    with Mapped(path) as mapped:
        matrix = mapped.bytes().view("<f4").reshape(shape)
        for start in range(0, len(order), ROW_BLOCK):
            yield matrix[order[start : start + ROW_BLOCK]]
            mapped.release()


def _rewrite_records(path: Path, lengths: np.ndarray, order: np.ndarray) -> None:
    """records.bin (file order) rewritten in the layout's order, a block of rows at a time: each
    row's bytes sliced from the map and joined (gathering them byte by byte through an index of
    8 bytes a byte took 1.5 s of a 1M-bit compile; slices, 0.3 s)."""
    file_order = path.with_name(".file-order.bin")
    path.rename(file_order)
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    ends = np.cumsum(lengths[order])  # where each row ends in the rewritten file
    with Mapped(file_order) as mapped, path.open("wb") as handle:
        records = mapped.bytes().data
        first = 0
        while first < len(order):
            # At most ROW_BLOCK rows and RECORD_BLOCK_BYTES bytes (or one row, however long).
            written = int(ends[first - 1]) if first else 0
            last = min(first + ROW_BLOCK,
                       max(first + 1, int(np.searchsorted(ends, written + RECORD_BLOCK_BYTES, side="right"))))
            rows = order[first:last]
            handle.write(b"".join([records[start:stop] for start, stop in
                                   zip(starts[rows].tolist(), (starts[rows] + lengths[rows]).tolist())]))
            first = last
            mapped.release()  # the block's rows are scattered: each held a page of its own
        del records
    file_order.unlink()


class Mapped:
    """A file mapped read-only, whose pages are let go of after each block (`release`): the page
    cache keeps them, this process's resident memory does not grow with the file (a map of
    scattered rows otherwise holds every page it touched)."""

    def __init__(self, path: Path) -> None:
        with path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else None
        if self._map is not None:
            self._map.madvise(mmap.MADV_RANDOM)  # a fault maps its page, not the 15 around it

    def bytes(self) -> np.ndarray:
        return np.frombuffer(self._map, dtype=np.uint8) if self._map is not None else np.zeros(0, np.uint8)

    def release(self) -> None:
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def __enter__(self) -> Mapped:
        return self

    def __exit__(self, *exception: object) -> None:
        if self._map is not None:
            with contextlib.suppress(BufferError):  # an array still views it: the map goes with the array
                self._map.close()


def write_synced(path: Path, write: Callable[[BinaryIO], object]) -> None:
    with path.open("wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())


def sync(path: Path) -> None:
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())


