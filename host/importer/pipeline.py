"""`import_library`: the whole import, given an embedder. Reading, chunking, embedding, writing.

1. Find the files (`sources`) and read each into documents (`readers`). A file that cannot be read
   is one line naming it; the others are still imported, and the report says it failed. A website
   SOURCE is crawled first (`website`), each page then read like an HTML file.
2. Chunk each document (`chunking`) with the embedder's own token counter; each chunk becomes a
   bit whose URL is the page's (`urls`) plus its heading anchor. A bit repeated at the same URL
   (same canonical id) is kept once. A file unchanged since the last run (same bytes, path,
   settings and importer) takes its chunks from the cache instead: no parsing, no counting.
   With the local model and many files, reading and chunking run in a second process (`reading`).
3. Meanwhile embed only the texts the cache does not hold (`embedding_queue`): sorted by token
   length within a window, several calls at once; each call is cached as it lands, so an
   interrupted run resumes where it stopped.
4. Write the library atomically after validating it (`output`); it records the embedder's
   precision in `details.embedding_precision` when the embedder has one. Only then is the cache pruned.

Nothing reaches `out` unless every step succeeded: an error or Ctrl-C leaves the old file as it was.
"""

from __future__ import annotations

import functools
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from host.importer.cache import ImportCache, text_key
from host.importer.embedding import Embedder, GuardedEmbedder, vector_space
from host.importer.embedding_queue import DEFAULT_WINDOW, EmbeddingQueue
from host.importer.errors import ImporterError
from host.importer.exports import ExportOptions
from host.importer.file_chunks import FileChunks
from host.importer.output import write_library
from host.importer.reading import FileRead, ReadSettings, read_files
from host.importer.report import ImportReport
from host.importer.sources import SourceFile, find_sources
from host.importer.urls import check_base_url
from host.importer.website.crawler import CrawlSettings
from host.importer.website.source import read_site
from host.library.canonical import canonical_id
from host.library.embeddings import encode_embedding
from host.library.format import FORMAT_VERSION

# MiniLM reads 256 tokens, two of them its [CLS] and [SEP]: a 250-token chunk is embedded whole, with
# room to spare. It is also the size of Polymath's own bits (~200-500 tokens; the sample's are ~200).
DEFAULT_CHUNK_TOKENS = 250
DEFAULT_BATCH_SIZE = 64


class Progress(Protocol):
    """What the command line shows while an import runs (see `progress.py`): a website's pages as they
    are crawled; files read (and each scanned page a reader is about to OCR: `page_scanned`), while chunks
    are embedded; then the chunks left to embed (`embedding(total, done)`)."""

    def crawling(self, site: str) -> None: ...

    def page_crawled(self) -> None: ...

    def reading(self, files: int) -> None: ...

    def file_read(self) -> None: ...

    def page_scanned(self) -> None: ...

    def embedding(self, chunks: int, done: int = 0) -> None: ...

    def chunks_embedded(self, count: int) -> None: ...

    def close(self) -> None: ...


class NoProgress:
    def crawling(self, site: str) -> None: ...

    def page_crawled(self) -> None: ...
    def reading(self, files: int) -> None: ...

    def file_read(self) -> None: ...

    def page_scanned(self) -> None: ...

    def embedding(self, chunks: int, done: int = 0) -> None: ...

    def chunks_embedded(self, count: int) -> None: ...

    def close(self) -> None: ...


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ImportOptions:
    base_url: str | None = None
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    batch_size: int = DEFAULT_BATCH_SIZE  # texts per call to the embedder
    cache: Path | None = None  # the embeddings cache file; None keeps no cache
    access_tag: str | None = None  # the tag the output's folder gives its bits (checked when validating)
    concurrency: int = 1  # calls to the embedder at once
    bucketing: bool = True  # sort texts by token length within a window of `window` texts
    window: int = DEFAULT_WINDOW
    second_process: bool | None = None  # read and chunk in a second process: None decides by the work (`reading`)
    format: str | None = None  # read every source as this kind (`kinds`), instead of finding each file's
    include_drafts: bool = False  # drafts and unpublished posts too
    include_replies: bool = False  # X replies to other people, Medium responses
    include_retweets: bool = False
    crawl: CrawlSettings = field(default_factory=CrawlSettings)  # a website SOURCE: requests at once, delay, --max-pages


@dataclass
class _Bit:
    text: str
    token_count: int
    info: dict[str, str]
    key: bytes


def import_library(
    sources: Sequence[Path | str],
    out: Path,
    embedder: Embedder,
    options: ImportOptions = ImportOptions(),
    progress: Progress | None = None,
    say: Callable[[str], None] = _to_stderr,
) -> ImportReport:
    """Import `sources` into the library file `out`, embedding with `embedder`.

    Raises ImporterError (one line) when nothing can be imported, the embedder fails or the result
    would not validate; `out` is then untouched, as it is after a KeyboardInterrupt. Files that
    fail to read are reported through `say` and listed in the report's `failed`.
    """
    started = time.perf_counter()
    progress = progress or NoProgress()
    for name in ("chunk_tokens", "batch_size", "concurrency", "window"):
        if getattr(options, name) < 1:
            raise ImporterError(f"--{name.replace('_', '-')}: must be at least 1, got {getattr(options, name)}")
    base_url = check_base_url(options.base_url) if options.base_url else None
    report = ImportReport(out=out, model=embedder.model, chunk_tokens=options.chunk_tokens)
    # Posts for paying or signed-in readers only go into a library served only to tokens with a tag.
    exports = ExportOptions(include_drafts=options.include_drafts, include_replies=options.include_replies,
                            include_retweets=options.include_retweets, include_private=options.access_tag is not None)
    site_reader = functools.partial(read_site, cache=options.cache, settings=options.crawl, progress=progress, say=say,
                                    reports=report.crawls)
    found = find_sources(list(sources), options.format, exports, site_reader)
    guarded = GuardedEmbedder(embedder)
    report.skipped_by_suffix, report.not_feeds = found.skipped_by_suffix, found.not_feeds
    report.drafts, report.skipped = found.skipped.pop("draft", 0), found.skipped
    for problem in found.failed:
        report.failed.append(problem)
        say(f"error: {problem}")
    cache = ImportCache(options.cache, vector_space(guarded), guarded.dimension, say)
    queue = EmbeddingQueue(guarded, cache, batch_size=options.batch_size, concurrency=options.concurrency,
                           window=options.window, bucketing=options.bucketing, on_embedded=progress.chunks_embedded)
    try:
        try:
            bits, file_keys, vectors = _read(found.files, guarded, base_url, options, cache, queue, report,
                                             progress, say)
            report.read_seconds = time.perf_counter() - started
            if not bits:
                what = "no file could be read" if report.failed else "no writing found (see the formats in --help)"
                where = ", ".join(map(str, sources))
                raise ImporterError(f"nothing to import from {where}: {what}; {out} is left as it was")
            report.reused = sum(bit.key in vectors for bit in bits)
            progress.embedding(len({bit.key for bit in bits}) - len(vectors), len(queue.vectors))
            vectors.update(queue.finish())
        except BaseException:
            queue.abandon()  # what the running calls embed is cached before the import stops
            raise
        finally:
            progress.close()
        report.embedded_texts, report.embed_seconds = len(queue.vectors), queue.seconds
        report.embedded = len(bits) - report.reused
        library: dict[str, Any] = {"version": FORMAT_VERSION, "embedding_model": embedder.model}
        if guarded.precision is not None:
            library["details"] = {"embedding_precision": guarded.precision}
        library["bits"] = [
            {"text": bit.text, "embedding": encode_embedding(vectors[bit.key]), "token_count": bit.token_count,
             "info": bit.info}
            for bit in bits
        ]
        write_library(library, out, options.access_tag)
        # Only now that the library is out: what it does not use is dropped (best effort: it only saves work).
        cache.keep_only({bit.key for bit in bits}, file_keys)
    except sqlite3.Error as problem:
        raise ImporterError(f"cache {options.cache}: {problem} (delete it, or pass --no-cache)") from None
    finally:
        cache.close()
    report.seconds = time.perf_counter() - started
    return report


def _read(files: Sequence[SourceFile], embedder: GuardedEmbedder, base_url: str | None, options: ImportOptions,
          cache: ImportCache, queue: EmbeddingQueue, report: ImportReport, progress: Progress,
          say: Callable[[str], None]) -> tuple[list[_Bit], set[bytes], dict[bytes, np.ndarray]]:
    """The bits of every file, in order, each (canonical id) once; the cache keys of the files read;
    the vectors the cache holds. The other texts go to `queue` as they come, to be embedded meanwhile."""
    bits: list[_Bit] = []
    seen: set[str] = set()
    file_keys: set[bytes] = set()
    vectors: dict[bytes, np.ndarray] = {}
    progress.reading(len(files))
    settings = ReadSettings(base_url, options.chunk_tokens, embedder.model, options.include_drafts)
    reads = read_files(files, settings, embedder.count_tokens, cache.file_keys(), options.second_process,
                       embedder.token_counter())
    earlier: FileChunks | None = None  # the parts of a file read so far, while its reader goes on slowly
    try:
        for read in reads:
            if not read.final:
                assert read.chunks is not None
                # Its reader goes on with slow work (OCR): embed what it gave meanwhile. Its bits are only
                # taken once the whole file is read (a file that fails in the end gives none).
                earlier = earlier or FileChunks()
                earlier.extend(read.chunks)
                _queue_texts(read.chunks, vectors, cache, queue)
                queue.keep_busy()
                progress.page_scanned()
                continue
            progress.file_read()
            chunks = _chunks_of(read, earlier, cache, report, say)
            earlier = None
            if chunks is None:
                continue
            assert read.key is not None  # a file that was read has its key
            file_keys.add(read.key)
            new = _add_bits(chunks, bits, seen, report, options.chunk_tokens)
            vectors.update(cache.get_many({bit.key for bit in new} - vectors.keys()))
            for bit in new:
                if bit.key not in vectors:
                    queue.add(bit.key, bit.text, bit.token_count)
    finally:
        reads.close()  # stops the second process, if one reads
    cache.commit()
    report.bits = len(bits)
    return bits, file_keys, vectors


def _queue_texts(part: FileChunks, vectors: dict[bytes, np.ndarray], cache: ImportCache, queue: EmbeddingQueue) -> None:
    """A part's texts the cache does not hold, queued to be embedded."""
    keys = {text_key(text): (text, token_count) for text, token_count, _ in part.bits}
    vectors.update(cache.get_many(keys.keys() - vectors.keys()))
    for key, (text, token_count) in keys.items():
        if key not in vectors:
            queue.add(key, text, token_count)


def _chunks_of(read: FileRead, earlier: FileChunks | None, cache: ImportCache, report: ImportReport,
               say: Callable[[str], None]) -> FileChunks | None:
    """A file's chunks (after the parts read `earlier`), read now or taken from the cache; None (said, and
    counted) if it failed. Each page it could not read is said and counted too; such a file is not cached."""
    if read.problem is not None:
        report.failed.append(read.problem)
        say(f"error: {read.problem}")
        return None
    assert read.key is not None
    if read.chunks is not None:
        chunks = earlier or FileChunks()
        chunks.extend(read.chunks)
        for problem in chunks.problems:
            line = f"{read.source.name}: {problem}"
            report.failed.append(line)
            say(f"error: {line}")
        if not chunks.problems:  # a re-run reads such a file again: a page that failed once may read then
            cache.put_file(read.key, chunks.to_json())
        return chunks
    stored = cache.get_file(read.key)
    assert stored is not None, "a file's key was known but its chunks are not in the cache"
    report.files_unchanged += 1
    return FileChunks.from_json(stored)


def _add_bits(chunks: FileChunks, bits: list[_Bit], seen: set[str], report: ImportReport,
              chunk_tokens: int) -> list[_Bit]:
    """A file's chunks appended as bits, each canonical id once; the new ones."""
    report.files_read += 1
    report.drafts += chunks.draft
    report.documents += chunks.documents
    new = []
    for text, token_count, info in chunks.bits:
        bit_id = canonical_id(info["url"], text)
        if bit_id in seen:
            report.duplicates += 1
            continue
        seen.add(bit_id)
        new.append(_Bit(text, token_count, info, text_key(text)))
        report.tokens += token_count
        report.over_budget += token_count > chunk_tokens
        report.file_urls = report.file_urls or info["url"].startswith("file:")
    bits.extend(new)
    return new
