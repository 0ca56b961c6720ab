"""Writing a compiled library folder from bits that arrive block by block, in bounded memory.

`StoreWriter` is the one way a compiled folder is made (host/store/compiled.py documents its
files): a library file streamed from disk (host/library/stream.py) and a library already in memory
(`write_compiled`) both feed it `BitBlock`s, so the two give byte-identical folders.

Memory stays at a few dozen bytes per bit plus the text index, whatever the vectors weigh:

1. While the bits arrive, each block's vectors are appended to `embeddings.npy` (a header of fixed
   size is fixed up at the end) and its packed records to `records.bin`, in file order; per-bit
   scalars (id, token count, tag, record length) are kept in small arrays. The vectors are written
   on a thread beside, and their sign codes, the public digest, the largest norm and the values'
   range are taken on another (host/store/summary.py).
2. At the end, a library of `cluster_from` bits or more gets its layout (host/store/clusters.py: k-means
   on a sample of the rows, every row assigned block by block), and the two big files are written
   again in the layout's order from their file-order copies, which are then deleted: the vectors
   by two threads, with their 8-bit codes (host/store/codes.py) beside them. This runs on a thread
   of its own...
3. ...while the records' words are read for the text index (Python, this thread), in file
   order (or in a second process, host/store/text_process.py); the index is finished in stored
   order once the layout is known, beside the rewrite: its positions are grouped by word in 8
   bytes a word (host/constraints/text_index.py), so the two fit together in the vectors' size.

Rows are read back with pread (`RowFile`, `read_ranges`), never through a map: a map's scattered
reads keep whole runs of pages around each row, and the resident set would grow to the file.

A segment holds one library file or many (host/store/members.py): the writer is told where each
one's bits begin and end (`begin_member`, `end_member`), every block belonging to one of them.

STORE_FORMAT 8: compiled by this writer (codes.npy, code_scale.npy, id_heads.npy; the public digest
is sha256(message + sha256(the public bits' column digests)), host/store/summary.py).
"""

from __future__ import annotations

import io
import itertools
import os
import threading
from array import array
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np

from host.library.bit_checks import BitBlock
from host.library.format import LibraryHeader
from host.library.visibility import PUBLIC
from host.service.allocator import release_free_memory
from host.store import kernels
from host.store.clusters import CLUSTER_FROM, Layout, plan_layout
from host.store.codes import code_scale, encode
from host.store.members import Member, SourceKey, as_details, details_of
from host.store.summary import RunningSummary, public_rows
from host.store.text_process import TAGS as FILE_TAGS
from host.store.text_process import TextIndexer

STORE_FORMAT = 12  # 3: max_norm; 4: public_digest; 5: text_index.bin/.json; 6: clustered layout; 7: this writer, codes;
# 8: the public digest taken column by column (host/store/summary.py); 9: keyword postings (host/keywords); 10: in file order;
# 11: NLTK's English stop words (host/keywords/analyzer.py); 12: segments of many library files
# (host/store/members.py), the keywords' counts of tags sparse
ROW_BLOCK = 4096  # rows copied at a time when writing a permuted matrix (no second full copy)
RECORD_BLOCK_BYTES = 1 << 20  # records rewritten at a time, at most
RECORDS_WHOLE_SHARE = 8  # records.bin is read whole for its rewrite up to 1/8 of the vectors' size...
RECORDS_WHOLE_MAX = 512 << 20  # ...and 512 MB
BESIDE_BLOCKS = 4  # blocks handed to the thread beside the parse and not yet taken, at most
BESIDE_FROM = 256  # bits a block holds at least to be handed to the threads beside (below: done here, at once)
REWRITE_THREADS = 2  # threads putting the vectors in the layout's order (reading, encoding, writing let go of the GIL)
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
        self._records: BinaryIO = (building / "records.bin").open("wb", buffering=1 << 20)
        self._records_size = 0
        self._record_lengths = array("q")
        self._text = TextIndexer(building, self._record_lengths, process_from=text_process_from)
        self._token_counts = array("q")
        self._tags: dict[str | None, int] = {None: 0}  # interned in order of first sight
        self._tag_numbers = array("H")
        self._ids = bytearray()
        self._background: list[_Background] = []  # joined by `close`, whatever `finish` ended with
        self._summary = RunningSummary()  # sign codes, norms, value ranges, public digests
        self._members: list[Member] = []  # each library file's rows, as `end_member` finished them
        self._member: int | None = None  # the member whose bits `add` takes now (its summary number)
        self._member_first = 0
        # The vectors are written on one thread beside and summed up on another, BESIDE_BLOCKS blocks
        # ahead at most: both let go of the GIL, and the main thread parses the next blocks meanwhile.
        self._beside_threads = (ThreadPoolExecutor(1, thread_name_prefix="compile-vectors"),
                                ThreadPoolExecutor(1, thread_name_prefix="compile-summary"))
        self._beside_pending: deque[Future[None]] = deque()

    def begin_member(self) -> None:
        """The bits added from now on are the next library file's, until `end_member`."""
        assert self._member is None, "end_member first"
        self._member = self._summary.begin_member()
        self._member_first = self.rows

    def end_member(self, header: LibraryHeader, name: str, source: SourceKey, *, scope: str = "",
                   access_tag: str | None = None) -> None:
        """The bits of the library file `name` end here; its header as reading it found it."""
        assert self._member is not None, "begin_member first"
        self._members.append(Member(name, source, self._member_first, self.rows, scope, access_tag,
                                    as_details(header.details), header.sort))
        self._member = None

    def add(self, block: BitBlock) -> None:
        assert self._member is not None, "begin_member first: every bit belongs to a library file"
        if not len(block):
            return
        vectors = np.ascontiguousarray(block.vectors, dtype="<f4")
        self.dimension = vectors.shape[1]
        records, lengths = pack_records(block)
        self._records.write(records)
        self._records_size += len(records)
        self._record_lengths.frombytes(lengths.tobytes())
        self._text.records_written(self._records_size, self._records.flush)  # a child reads what is flushed
        self._token_counts.extend(block.token_counts)
        tags = self._tags
        self._tag_numbers.extend(tags.setdefault(tag, len(tags)) for tag in block.tags)
        self._ids += b"".join(block.ids)
        public = public_rows(block.tags)
        self.rows += len(block)
        if len(block) < BESIDE_FROM:  # a small library's bits: handing them over would cost more than the work
            self._beside()  # in order, after what is still being done beside
            self._write_vectors(vectors, public, self._member)
            self._summary.take(vectors, block.ids, block.token_counts, public, lengths, records, self._member)
            return
        self._beside(2 * (BESIDE_BLOCKS - 1))
        writing, summing = self._beside_threads
        self._beside_pending.append(writing.submit(self._write_vectors, vectors, public, self._member))
        self._beside_pending.append(summing.submit(self._summary.take, vectors, block.ids, block.token_counts,
                                                   public, lengths, records, self._member))

    def _write_vectors(self, vectors: np.ndarray, public: list[int] | None, member: int) -> None:
        self._vectors.write(vectors.data)
        self._summary.take_vectors(vectors, public, member)

    def _beside(self, left: int = 0) -> None:
        """Wait until at most `left` jobs (two a block) are still to be done beside (raising what one
        raised): memory holds a few blocks' worth."""
        while len(self._beside_pending) > left:
            self._beside_pending.popleft().result()

    def close(self) -> None:
        for thread in self._beside_threads:  # a block still being written: waited for, before the file closes
            thread.shutdown(wait=True)
        for work in self._background:  # a finish that failed must not leave a thread writing in the folder
            work.join()
        self._vectors.close()
        self._records.close()
        self._text.close()

    @property
    def member_count(self) -> int:
        return len(self._members)

    def finish(self, embedding_model: str, dimension: int | None, language: str, name: str, *,
               cluster_from: int = CLUSTER_FROM, step: Step | None = None) -> list[Member]:
        """Write everything else and meta.json (last): `building` then holds a whole compiled folder,
        the segment `name`, of the members ended so far (returned). Bits of model `embedding_model`,
        `dimension` wide (None: no bit, a width unknown), keywords analyzed in `language`."""
        assert self._member is None, "end_member first"
        self._beside()
        self._vectors.close()
        self._records.close()
        step = step or (lambda what, done: None)
        rows, dimension = self.rows, self.dimension or dimension or 0
        folder = self.building
        tags = (PUBLIC, *sorted(tag for tag in self._tags if tag))
        renumber = np.array([tags.index(tag or PUBLIC) for tag in self._tags], dtype=np.uint16)
        tag_ids = renumber[np.frombuffer(self._tag_numbers, dtype=np.uint16)] if rows else np.zeros(0, np.uint16)
        lengths = np.frombuffer(self._record_lengths, dtype=np.int64) if rows else np.zeros(0, np.int64)
        _fix_npy_header(folder / "embeddings.npy", (rows, dimension))
        clustered = rows >= max(cluster_from, 1)
        summary = self._summary
        low, high = summary.low, summary.high
        scale = code_scale(low, high) if clustered and low is not None and high is not None else None
        # The layout (BLAS) runs on a thread of its own while this one splits the records into
        # words (Python), unless a second process does that already: on two cores they overlap.
        layout_thread = self._in_background(lambda: self._plan(tag_ids == 0, step) if clustered else None)
        step("indexing text", 0.0)
        np.save(folder / FILE_TAGS, tag_ids)  # for the keyword postings' per-tag counts, file order
        self._text.all_written(self._records_size, language)
        layout = layout_thread.result()
        release_free_memory()  # k-means' samples and the reading's buffers, freed but kept by malloc
        order = None if layout is None else layout.order
        step("writing", 0.0)
        if layout is not None:
            write_synced(folder / "source_rows.npy", partial(np.save, arr=layout.order))
        # The text index is finished in stored order (its process sorts ~8 bytes a word), the vectors
        # are rewritten on a thread and the records here, all at once.
        self._text.finish("source_rows.npy" if layout is not None else None)
        rewrite = self._in_background(lambda: _write_arranged(folder / "embeddings.npy", order, scale, step)
                                      if order is not None and scale is not None else None)
        record_offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(lengths if order is None else lengths[order], out=record_offsets[1:])
        if order is not None:
            _rewrite_records(folder / "records.bin", lengths, order,
                             whole_up_to=min(rows * dimension * 4 // RECORDS_WHOLE_SHARE, RECORDS_WHOLE_MAX))
        signs = summary.sign_codes(dimension)

        def arranged(values: np.ndarray) -> np.ndarray:
            return values if order is None else values[order]

        arrays = {
            "token_counts": arranged(np.frombuffer(self._token_counts, dtype=np.int64).astype(np.int32)
                                     if rows else np.zeros(0, np.int32)),
            "ids": arranged(np.frombuffer(bytes(self._ids), dtype="S32") if rows else np.zeros(0, "S32")),
            # The first 8 bytes of every id, sorted: telling whether libraries share a bit costs a
            # merge of these, not a sort of every id, when a host opens them (ModelIndex).
            "tag_ids": arranged(tag_ids),
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
        (folder / FILE_TAGS).unlink()
        members = self._finished_members(tag_ids, tags)
        meta = {
            "store_format": STORE_FORMAT,
            "name": name,
            "embedding_model": embedding_model,
            "bits": rows,
            "dimension": dimension,
            "tags": list(tags),
            "records_bytes": int(record_offsets[-1]),
            "max_norm": summary.largest_norm,
            "clusters": 0 if layout is None else layout.clusters,
            "keywords": {"language": language},
            "members": members,
        }
        write_synced(folder / "meta.json", lambda handle: handle.write(msgspec.json.encode(meta)))
        return members

    def _finished_members(self, tag_ids: np.ndarray, tags: tuple[str, ...]) -> list[Member]:
        """The members with their rows per tag and public digests (file order `tag_ids` into `tags`)."""
        finished = []
        for number, member in enumerate(self._members):
            counts = np.bincount(tag_ids[member.first : member.stop], minlength=len(tags))
            tag_rows = {tags[tag]: int(rows) for tag, rows in enumerate(counts.tolist()) if rows}
            message = details_of(member).get("message")
            finished.append(msgspec.structs.replace(member, tag_rows=tag_rows,
                                    public_digest=self._summary.public_digest(message, number)))
        return finished


    def _in_background(self, function: Callable[[], Any]) -> _Background:
        work = _Background(function)
        self._background.append(work)
        return work

    def _blas_threads(self) -> int:
        """Every core, but one left to the text index's process while it works."""
        cores = os.cpu_count() or 1
        return max(1, cores - 1) if self._text.busy() else cores

    def _plan(self, public: np.ndarray, step: Step) -> Layout:
        """The clustered layout of the vectors written so far (file order)."""
        with RowFile(self.building / "embeddings.npy") as matrix:
            return plan_layout(matrix, public, step=step, threads=self._blas_threads)


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


def pack_records(block: BitBlock) -> tuple[bytes, np.ndarray]:
    """The block's records packed (msgpack) back to back, and each one's size (int64): in one C
    call where the compiled loops were built (a dict and an encoder call a bit cost ~1 µs)."""
    if kernels.compiled is not None:
        records, lengths = kernels.compiled.pack_records(block.texts, block.infos)
        return records, np.frombuffer(lengths, dtype=np.int64)
    packed = list(map(_pack, block.records))
    return b"".join(packed), np.fromiter(map(len, packed), dtype=np.int64, count=len(packed))


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
        read_ranges(self._handle.fileno(), self._offset + rows * self._row_bytes,
                    np.full(len(rows), self._row_bytes, dtype=np.int64), out)
        return out

    def __enter__(self) -> RowFile:
        return self

    def __exit__(self, *exception: object) -> None:
        self._handle.close()


def read_at(fd: int, offset: int, out: np.ndarray | memoryview) -> None:
    """Fill `out` (C-contiguous) with the bytes of the file at `offset`."""
    view = memoryview(out).cast("B")  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done:]], offset + done)
        if count <= 0:
            raise OSError(f"unexpected end of file at byte {offset + done:,}")
        done += count


def copy_ranges(source: bytes, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
    """`read_ranges` from memory: `out` = each range [start, start + length) of `source` in turn."""
    view = memoryview(out).cast("B")  # type: ignore[arg-type]
    compiled = kernels.compiled
    if compiled is not None:
        compiled.copy_ranges(memoryview(source), starts, lengths, view)
        return
    view[:] = b"".join([source[start:stop] for start, stop in zip(starts.tolist(), (starts + lengths).tolist())])


def read_ranges(fd: int, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
    """Fill `out` (C-contiguous) with the file's bytes [start, start + length) of each range in
    turn (int64 `starts` and `lengths`), back to back: rows scattered over a file read with pread,
    so the page cache keeps them and this process does not. Ranges that follow one another are
    read at once. The compiled loop (host/store/kernels.py) reads a range in ~1.4 µs (a row of 1.5 KB
    from the page cache); a pread a run from Python costs ~6 µs."""
    view = memoryview(out).cast("B")  # type: ignore[arg-type]
    compiled = kernels.compiled
    if compiled is not None:
        compiled.read_ranges(fd, starts, lengths, view)
        return
    placed = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    runs = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
    for first, last in itertools.pairwise([0, *runs.tolist(), len(starts)]):
        read_at(fd, int(starts[first]), view[placed[first] : placed[last]])


def write_at(fd: int, offset: int, values: np.ndarray) -> None:
    """Write `values` (C-contiguous) into the file at `offset`."""
    view = memoryview(values).cast("B")  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _fix_npy_header(path: Path, shape: tuple[int, int]) -> None:
    """Write the real header over the placeholder: the file is then exactly what np.save writes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    if len(header.getvalue()) != HEADER_BYTES:  # more rows than any disk holds
        raise ValueError(f"{path}: a .npy header of {len(header.getvalue())} bytes")
    with path.open("r+b") as handle:
        handle.write(header.getvalue())


def _write_arranged(path: Path, order: np.ndarray, scale: np.ndarray, step: Step) -> None:
    """embeddings.npy at `path` rewritten with its rows in `order` (stored row -> file row), and
    codes.npy beside it: ROW_BLOCK rows at a time, by REWRITE_THREADS threads, each reading its
    rows from the file-order copy with pread (`RowFile`), encoding them and writing both at their
    places. The file-order copy is deleted at the end."""
    file_order = path.with_name(".file-order.npy")
    path.rename(file_order)
    with RowFile(file_order) as source, path.open("wb") as handle, path.with_name("codes.npy").open("wb") as codes:
        rows, dimension = source.shape
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": source.shape})
        np.lib.format.write_array_header_1_0(codes, {"descr": "|u1", "fortran_order": False, "shape": source.shape})
        vectors_at, codes_at = handle.tell(), codes.tell()
        progress = _Progress(step, "writing", rows)

        def write_block(first: int) -> None:
            block = source[order[first : first + ROW_BLOCK]]
            write_at(handle.fileno(), vectors_at + first * dimension * 4, block)
            write_at(codes.fileno(), codes_at + first * dimension, encode(block, scale))
            progress.add(len(block))

        with ThreadPoolExecutor(REWRITE_THREADS, thread_name_prefix="compile-rows") as pool:
            for _ in pool.map(write_block, range(0, rows, ROW_BLOCK)):  # the first failure is raised
                pass
    file_order.unlink()
    sync(path.with_name("codes.npy"))


class _Progress:
    """A step's fraction done, counted by several threads."""

    def __init__(self, step: Step, what: str, total: int) -> None:
        self._step, self._what, self._total = step, what, max(total, 1)
        self._done = 0
        self._lock = threading.Lock()

    def add(self, count: int) -> None:
        with self._lock:
            self._done += count
            self._step(self._what, self._done / self._total)


def _rewrite_records(path: Path, lengths: np.ndarray, order: np.ndarray, *, whole_up_to: int) -> None:
    """records.bin (file order) rewritten in the layout's order, a block of rows at a time (at most
    ROW_BLOCK rows and RECORD_BLOCK_BYTES bytes, or one row however long). Up to `whole_up_to`
    bytes the file-order copy is read whole and each block copied from it (`copy_ranges`); a larger
    one is read a block at a time with pread (`read_ranges`: ~1.5 µs a record, a copy ~0.05 µs)."""
    file_order = path.with_name(".file-order.bin")
    path.rename(file_order)
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    ends = np.cumsum(lengths[order])  # where each row ends in the rewritten file
    with file_order.open("rb") as source, path.open("wb") as handle:
        whole = source.read() if len(ends) and ends[-1] <= whole_up_to else None
        first = 0
        while first < len(order):
            written = int(ends[first - 1]) if first else 0
            last = min(first + ROW_BLOCK,
                       max(first + 1, int(np.searchsorted(ends, written + RECORD_BLOCK_BYTES, side="right"))))
            rows = order[first:last]
            block = np.empty(int(ends[last - 1]) - written, dtype=np.uint8)
            if whole is not None:
                copy_ranges(whole, starts[rows], lengths[rows], block)
            else:
                read_ranges(source.fileno(), starts[rows], lengths[rows], block)
            handle.write(block.data)
            first = last
    file_order.unlink()


def write_synced(path: Path, write: Callable[[BinaryIO], object]) -> None:
    with path.open("wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())


def sync(path: Path) -> None:
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())


