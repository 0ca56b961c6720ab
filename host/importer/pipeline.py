"""`import_library`: the whole import, given an embedder. Reading, chunking, embedding, writing.

1. Find the files (`sources`) and read each into documents (`readers`). A file that cannot be read
   is one line naming it; the others are still imported, and the report says it failed.
2. Chunk each document (`chunking`) with the embedder's own token counter; each chunk becomes a
   bit whose URL is the page's (`urls`) plus its heading anchor. A bit repeated at the same URL
   (same canonical id) is kept once. A file unchanged since the last run (same bytes, path,
   settings and importer) takes its chunks from the cache instead: no parsing, no counting.
3. Embed, in batches of similar length, only the texts the cache does not hold; each batch is
   cached at once, so an interrupted run resumes where it stopped.
4. Write the library atomically after validating it (`output`); only then is the cache pruned.

Nothing reaches `out` unless every step succeeded: an error or Ctrl-C leaves the old file as it was.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from host.importer.cache import ImportCache, text_key
from host.importer.embedding import Embedder, EmbedderFailed, GuardedEmbedder
from host.importer.errors import ImporterError, MissingExtra
from host.importer.file_chunks import FileChunks, chunk_file, file_key
from host.importer.output import write_library
from host.importer.report import ImportReport
from host.importer.sources import SourceFile, find_sources
from host.importer.urls import check_base_url
from host.library.format import FORMAT_VERSION, canonical_id, encode_embedding

# MiniLM reads 256 tokens, two of them its [CLS] and [SEP]: a 250-token chunk is embedded whole, with
# room to spare. It is also the size of Polymath's own bits (~200-500 tokens; the sample's are ~200).
DEFAULT_CHUNK_TOKENS = 250
DEFAULT_BATCH_SIZE = 64


class Progress(Protocol):
    """What the command line shows while an import runs (see `progress.py`)."""

    def reading(self, files: int) -> None: ...

    def file_read(self) -> None: ...

    def embedding(self, chunks: int) -> None: ...

    def chunks_embedded(self, count: int) -> None: ...

    def close(self) -> None: ...


class NoProgress:
    def reading(self, files: int) -> None: ...

    def file_read(self) -> None: ...

    def embedding(self, chunks: int) -> None: ...

    def chunks_embedded(self, count: int) -> None: ...

    def close(self) -> None: ...


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ImportOptions:
    base_url: str | None = None
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    batch_size: int = DEFAULT_BATCH_SIZE
    cache: Path | None = None  # the embeddings cache file; None keeps no cache
    access_tag: str | None = None  # the tag the output's folder gives its bits (checked when validating)


@dataclass
class _Bit:
    text: str
    token_count: int
    info: dict[str, str]
    key: bytes


def import_library(
    sources: Sequence[Path],
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
    if options.chunk_tokens < 1:
        raise ImporterError(f"--chunk-tokens: must be at least 1, got {options.chunk_tokens}")
    if options.batch_size < 1:
        raise ImporterError(f"--batch-size: must be at least 1, got {options.batch_size}")
    base_url = check_base_url(options.base_url) if options.base_url else None
    report = ImportReport(out=out, model=embedder.model, chunk_tokens=options.chunk_tokens)
    found = find_sources(list(sources))
    guarded = GuardedEmbedder(embedder)
    report.skipped_by_suffix, report.not_feeds = found.skipped_by_suffix, found.not_feeds
    cache = ImportCache(options.cache, guarded.model, guarded.dimension, say)
    try:
        try:
            bits, file_keys = _read_and_chunk(found.files, guarded, base_url, options, cache, report, progress, say)
            cache.commit()
            report.read_seconds = time.perf_counter() - started
            if not bits:
                what = "no file could be read" if report.failed else "no Markdown, text, HTML, feed or PDF with text"
                where = ", ".join(map(str, sources))
                raise ImporterError(f"nothing to import from {where}: {what}; {out} is left as it was")
            vectors = _embed(bits, guarded, options, cache, report, progress)
        finally:
            progress.close()
        library = {
            "version": FORMAT_VERSION,
            "embedding_model": embedder.model,
            "bits": [
                {"text": bit.text, "embedding": encode_embedding(vectors[bit.key]), "token_count": bit.token_count,
                 "info": bit.info}
                for bit in bits
            ],
        }
        write_library(library, out, options.access_tag)
        # Only now that the library is out: what it does not use is dropped (best effort: it only saves work).
        cache.keep_only({bit.key for bit in bits}, file_keys)
    except sqlite3.Error as problem:
        raise ImporterError(f"cache {options.cache}: {problem} (delete it, or pass --no-cache)") from None
    finally:
        cache.close()
    report.seconds = time.perf_counter() - started
    return report


def _read_and_chunk(files: Sequence[SourceFile], embedder: GuardedEmbedder, base_url: str | None,
                    options: ImportOptions, cache: ImportCache, report: ImportReport, progress: Progress,
                    say: Callable[[str], None]) -> tuple[list[_Bit], set[bytes]]:
    """The bits of every file, in order, each (canonical id) once; and the cache keys of the files read."""
    bits: list[_Bit] = []
    seen: set[str] = set()
    file_keys: set[bytes] = set()
    progress.reading(len(files))
    for source in files:
        try:
            data = source.path.read_bytes()
            key = file_key(source, data, base_url, options.chunk_tokens, embedder.model)
            stored = cache.get_file(key)
            if stored is None:
                chunks = chunk_file(source, data, embedder, base_url, options.chunk_tokens)
                cache.put_file(key, chunks.to_json())
            else:
                chunks = FileChunks.from_json(stored)
                report.files_unchanged += 1
            file_keys.add(key)
        except (MissingExtra, EmbedderFailed, sqlite3.Error):
            raise
        except OSError as problem:
            _fail(report, say, f"{source.path}: cannot be read ({problem.strerror or problem})")
            chunks = None
        except ImporterError as problem:
            _fail(report, say, f"{source.path}: {problem}")
            chunks = None
        except Exception as problem:  # a parser's own error on a damaged file: that file fails, not the import
            _fail(report, say, f"{source.path}: cannot be read ({type(problem).__name__}: {problem})")
            chunks = None
        progress.file_read()
        if chunks is None:
            continue
        report.files_read += 1
        report.drafts += chunks.draft
        report.documents += chunks.documents
        for text, token_count, info in chunks.bits:
            bit_id = canonical_id(info["url"], text)
            if bit_id in seen:
                report.duplicates += 1
                continue
            seen.add(bit_id)
            bits.append(_Bit(text, token_count, info, text_key(text)))
            report.tokens += token_count
            report.over_budget += token_count > options.chunk_tokens
            report.file_urls = report.file_urls or info["url"].startswith("file:")
    report.bits = len(bits)
    return bits, file_keys


def _fail(report: ImportReport, say: Callable[[str], None], line: str) -> None:
    report.failed.append(line)
    say(f"error: {line}")


def _embed(bits: Sequence[_Bit], embedder: GuardedEmbedder, options: ImportOptions, cache: ImportCache,
           report: ImportReport, progress: Progress) -> dict[bytes, np.ndarray]:
    """A vector for every bit's text: from the cache, else embedded now (and cached at once)."""
    texts = {bit.key: bit.text for bit in bits}
    vectors = cache.get_many(texts)
    report.reused = sum(bit.key in vectors for bit in bits)
    # Similar lengths batched together pad least (the local model pads a batch to its longest).
    missing = sorted((key for key in texts if key not in vectors), key=lambda key: len(texts[key]))
    progress.embedding(len(missing))
    started = time.perf_counter()
    for start in range(0, len(missing), options.batch_size):
        keys = missing[start:start + options.batch_size]
        batch = embedder.embed([texts[key] for key in keys])
        cache.put_many(zip(keys, batch, strict=True))
        vectors.update(zip(keys, batch, strict=True))
        report.embedded_texts += len(keys)
        progress.chunks_embedded(len(keys))
    report.embed_seconds = time.perf_counter() - started
    report.embedded = len(bits) - report.reused
    return vectors
