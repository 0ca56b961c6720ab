"""One file's chunks, and the key that says when they can be taken from the cache instead.

A file's chunks depend on its bytes, its path (URLs), its kind, the base URL, the budget, the
model's tokenizer, and the importer's own code and parsers: `file_key` hashes all of them, the
code and parser versions through `importer_fingerprint`, so changing any one makes the file new.

`chunk_file` gives a file's chunks in parts: one at each slow step of its reader (a scanned page
to OCR), so the pages before it are embedded meanwhile, then the last part. A page the reader could
not read is a line in `problems`; a file with problems is not cached, so a re-run tries it again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from host.importer.chunking import CountTokens, chunk_document
from host.importer.document import Read, SlowStep, Unreadable
from host.importer.errors import Draft
from host.importer.kinds import KIND_BY_NAME
from host.importer.readers.ocr import tesseract_version
from host.importer.sources import SourceFile
from host.importer.urls import page_url, with_fragment

# Their versions are part of every file's cache key: a new parser may read a file differently.
PARSER_DISTRIBUTIONS = ("markdown-it-py", "pyyaml", "selectolax", "feedparser", "pypdf", "defusedxml", "mammoth",
                        "ebooklib", "pytesseract", "pypdfium2", "pillow")


def file_key(source: SourceFile, data: bytes, base_url: str | None, chunk_tokens: int, model: str,
             include_drafts: bool = False) -> bytes:
    """Everything a file's chunks depend on, hashed: same key, same chunks (see `cache`)."""
    digest = hashlib.sha256()
    for part in (importer_fingerprint(), model, str(chunk_tokens), base_url or "", source.kind, source.relative,
                 str(source.path.resolve()) if base_url is None and source.url is None else "",
                 "drafts" if include_drafts else ""):
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
    digest.update(f"tesseract {tesseract_version()}".encode())  # OCR reads pages as its version does
    for distribution in PARSER_DISTRIBUTIONS:
        try:
            digest.update(f"{distribution}=={importlib.metadata.version(distribution)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{distribution} missing".encode())
    return digest.hexdigest()


@dataclass
class FileChunks:
    """What one file gave (or a part of it, when `more` follow): its documents' count, whether it is a
    draft, its bits' text, count and info, and the parts it could not read ("page 3: ...")."""

    documents: int = 0
    draft: bool = False
    bits: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    more: bool = False  # further parts of the file follow (never stored)

    def extend(self, part: FileChunks) -> None:
        """Add a later part of the same file."""
        self.documents += part.documents
        self.draft = self.draft or part.draft
        self.bits.extend(part.bits)
        self.problems.extend(part.problems)
        self.more = part.more

    def to_json(self) -> str:
        return json.dumps({"documents": self.documents, "draft": self.draft, "bits": self.bits}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> FileChunks:
        stored = json.loads(text)
        return cls(stored["documents"], stored["draft"], [(text, count, info) for text, count, info in stored["bits"]])


def read_source(source: SourceFile, data: bytes) -> Iterable[Read]:
    """The documents in `data`, the contents of `source` (ImporterError when they are not valid)."""
    return KIND_BY_NAME[source.kind].read(data, source.fallback_title())


def chunk_file(source: SourceFile, data: bytes, count_tokens: CountTokens, base_url: str | None,
               chunk_tokens: int, include_drafts: bool = False) -> Iterator[FileChunks]:
    """The file's chunks: a part (`more` set) at each slow step of its reader, then the last part."""
    part = FileChunks()
    try:
        reads = read_source(source, data)
    except Draft as draft:
        if not include_drafts:
            yield FileChunks(draft=True)
            return
        reads = draft.documents
    for read in reads:
        if isinstance(read, SlowStep):  # a part even when empty: the embedder may start on earlier files
            part.more = True
            yield part
            part = FileChunks()
        elif isinstance(read, Unreadable):
            part.problems.append(f"{read.where}: {read.problem}")
        else:
            part.documents += not read.continues
            url = page_url(source, base_url, read.own_url)
            for chunk in chunk_document(read, chunk_tokens, count_tokens):
                info = {"url": with_fragment(url, chunk.anchor), "title": chunk.title}
                if read.description:
                    info["description"] = read.description
                part.bits.append((chunk.text, chunk.token_count, info))
    yield part
