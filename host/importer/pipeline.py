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

import functools
import hashlib
import importlib.metadata
import json
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from host.importer.cache import ImportCache, text_key
from host.importer.chunking import chunk_document
from host.importer.errors import Draft, ImporterError, MissingExtra
from host.importer.output import write_library
from host.importer.readers import read_source
from host.importer.sources import SourceFile, find_sources
from host.importer.urls import check_base_url, page_url, with_fragment
from host.library_format import FORMAT_VERSION, canonical_id, encode_embedding

# MiniLM reads 256 tokens, two of them its [CLS] and [SEP]: a 250-token chunk is embedded whole, with
# room to spare. It is also the size of Polymath's own bits (~200-500 tokens; the sample's are ~200).
DEFAULT_CHUNK_TOKENS = 250
DEFAULT_BATCH_SIZE = 64
# Their versions are part of every file's cache key: a new parser may read a file differently.
PARSER_DISTRIBUTIONS = ("markdown-it-py", "pyyaml", "selectolax", "feedparser", "pypdf")
# Tokens of text a model embeds (its window less special tokens); past them text is not embedded.
MODEL_INPUT_TOKENS = {
    "sentence-transformers:all-MiniLM-L6-v2": 254,
    "openai.com:text-embedding-ada-002": 8191,
    "openai.com:text-embedding-3-small": 8191,
    "openai.com:text-embedding-3-large": 8191,
}


class Embedder(Protocol):
    """The shared embedder interface (`host/embedders/base.py`), restated so this package stands alone."""

    model: str
    dimension: int

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


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


class EmbedderFailed(ImporterError):
    """The embedder (not a file) failed: the import stops, whichever file it was working on."""


class _Guarded:
    """The embedder's `count_tokens`, `dimension` and `embed`, with its failures as one-line EmbedderFailed."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.model = embedder.model
        try:
            # A remote embedder may ask its service here. A local one loads its model at the first count
            # (not here: a re-run whose files are all unchanged never needs it).
            self.dimension = int(embedder.dimension)
        except Exception as problem:
            raise EmbedderFailed(f"the embedder of {self.model} is not usable: {_one_line(problem)}") from problem

    def count_tokens(self, text: str) -> int:
        try:
            return int(self.embedder.count_tokens(text))
        except Exception as problem:
            raise EmbedderFailed(f"counting tokens failed: {_one_line(problem)}") from problem

    def embed(self, texts: list[str]) -> np.ndarray:
        try:
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        except Exception as problem:  # any embedder failure (service down, timeout, bad key) ends the import cleanly
            raise EmbedderFailed(f"embedding failed: {_one_line(problem)}") from problem
        if vectors.shape != (len(texts), self.dimension):
            raise EmbedderFailed(f"embedding failed: the embedder returned an array of shape {vectors.shape} "
                                 f"for {len(texts)} texts of dimension {self.dimension}")
        if not np.isfinite(vectors).all():
            raise EmbedderFailed("embedding failed: the embedder returned NaN or infinity")
        return vectors


def _one_line(problem: BaseException) -> str:
    return f"{type(problem).__name__}: {' '.join(str(problem).split())}"


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
class ImportReport:
    out: Path
    model: str
    chunk_tokens: int
    files_read: int = 0
    files_unchanged: int = 0  # read from the cache: same bytes, path and settings as last time
    documents: int = 0
    failed: list[str] = field(default_factory=list)  # "path: problem", one per file
    drafts: int = 0
    skipped_by_suffix: Counter[str] = field(default_factory=Counter)
    not_feeds: int = 0
    bits: int = 0
    tokens: int = 0
    over_budget: int = 0  # chunks that are one word longer than the budget
    duplicates: int = 0
    embedded: int = 0  # bits whose vector this run computed
    embedded_texts: int = 0  # distinct texts sent to the embedder (a text repeated at two URLs is embedded once)
    reused: int = 0  # bits whose vector came from the cache: embedded + reused == bits
    file_urls: bool = False  # some URL is a file: URL (no --base-url)
    seconds: float = 0.0  # the whole import
    read_seconds: float = 0.0  # finding, reading and chunking the files
    embed_seconds: float = 0.0  # embedding what the cache did not hold

    def summary(self) -> list[str]:
        """What happened, in a few lines for the publisher."""
        skipped = []
        if self.drafts:
            skipped.append(f"{self.drafts} draft{'s' * (self.drafts != 1)} skipped")
        if self.skipped_by_suffix:
            kinds = ", ".join(f"{suffix} {count}" for suffix, count in sorted(self.skipped_by_suffix.items()))
            skipped.append(f"{self.skipped_by_suffix.total()} of unknown kind skipped ({kinds})")
        if self.not_feeds:
            skipped.append(f"{self.not_feeds} XML not a feed skipped")
        if self.failed:
            skipped.append(f"{len(self.failed)} failed (see above)")
        unchanged = f" ({self.files_unchanged} unchanged)" if self.files_unchanged else ""
        lines = [f"read {self.files_read} files{unchanged}, {self.documents} documents"
                 + "".join(f"; {part}" for part in skipped)]
        chunking = f"{self.bits} chunks, {self.tokens:,} tokens (at most {self.chunk_tokens} a chunk"
        if self.over_budget:
            chunking += f"; {self.over_budget} longer: one word over the limit, never cut"
        chunking += ")"
        if self.duplicates:
            chunking += f", {self.duplicates} repeated chunks kept once"
        embedded = f"embedded {self.embedded}"
        if self.embedded_texts != self.embedded:
            embedded += f" ({self.embedded_texts} distinct texts)"
        if self.embedded_texts and self.embed_seconds:
            embedded += f" at {self.embedded_texts / self.embed_seconds:.1f} chunks/s"
        lines.append(f"{chunking}; {embedded}, reused {self.reused} from the cache")
        lines.append(f"wrote {self.out}: {self.bits} bits of {self.model} in {self.seconds:.1f} s")
        if self.file_urls:
            lines.append("note: without --base-url, bits link to file: URLs on this machine (they show its folder "
                         "paths); pass --base-url https://your.site/ before publishing")
        return lines


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
    guarded = _Guarded(embedder)
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


def file_key(source: SourceFile, data: bytes, base_url: str | None, chunk_tokens: int, model: str) -> bytes:
    """Everything a file's chunks depend on, hashed: same key, same chunks (see `cache`)."""
    digest = hashlib.sha256()
    for part in (importer_fingerprint(), model, str(chunk_tokens), base_url or "", source.kind, source.relative,
                 str(source.path.resolve()) if base_url is None else ""):
        digest.update(part.encode("utf-8") + b"\0")
    digest.update(hashlib.sha256(data).digest())
    return digest.digest()


@functools.cache
def importer_fingerprint() -> str:
    """This importer's code and its parsers' versions: any change makes every file's chunks new."""
    digest = hashlib.sha256()
    package = Path(__file__).parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    for distribution in PARSER_DISTRIBUTIONS:
        try:
            digest.update(f"{distribution}=={importlib.metadata.version(distribution)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{distribution} missing".encode())
    return digest.hexdigest()


@dataclass
class _FileChunks:
    """What one file gave: its documents' count, whether it is a draft, and its bits' text, count, info."""

    documents: int = 0
    draft: bool = False
    bits: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"documents": self.documents, "draft": self.draft, "bits": self.bits}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> _FileChunks:
        stored = json.loads(text)
        return cls(stored["documents"], stored["draft"], [(text, count, info) for text, count, info in stored["bits"]])


def _chunk_file(source: SourceFile, data: bytes, embedder: _Guarded, base_url: str | None,
                chunk_tokens: int) -> _FileChunks:
    try:
        documents = read_source(source, data)
    except Draft:
        return _FileChunks(draft=True)
    chunks = _FileChunks(documents=len(documents))
    for document in documents:
        url = page_url(source, base_url, document.own_url)
        for chunk in chunk_document(document, chunk_tokens, embedder.count_tokens):
            info = {"url": with_fragment(url, chunk.anchor), "title": chunk.title}
            if document.description:
                info["description"] = document.description
            chunks.bits.append((chunk.text, chunk.token_count, info))
    return chunks


def _read_and_chunk(files: Sequence[SourceFile], embedder: _Guarded, base_url: str | None, options: ImportOptions,
                    cache: ImportCache, report: ImportReport, progress: Progress,
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
                chunks = _chunk_file(source, data, embedder, base_url, options.chunk_tokens)
                cache.put_file(key, chunks.to_json())
            else:
                chunks = _FileChunks.from_json(stored)
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


def _embed(bits: Sequence[_Bit], embedder: _Guarded, options: ImportOptions, cache: ImportCache,
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


def chunk_limit_warning(model: str, chunk_tokens: int) -> str | None:
    """A warning when chunks may be longer than the model reads (their ends would not be embedded)."""
    limit = MODEL_INPUT_TOKENS.get(model)
    if limit is not None and chunk_tokens > limit:
        return (f"warning: --chunk-tokens {chunk_tokens} is more than {model} embeds ({limit} tokens): "
                "the end of a longer chunk will not be found by search")
    return None
