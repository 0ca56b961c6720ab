"""OCR beside embedding (issue 32: "OCR runs beside embedding, not before it"), measured.

    .venv/bin/python scripts/bench_ocr.py                  # --posts 40 --pages 8
    .venv/bin/python scripts/bench_ocr.py --any-load       # even when the machine is busy

A folder of Markdown posts and, read last, a PDF of scanned pages (known text drawn in DejaVu Serif
at 200 dpi by Pillow, saved as image-only PDF pages, as a scanner does) is imported with the local
model, as `polymath-host import` runs it (one model run per core, no cache). Each call to the model
is timed. Printed: the OCR of the PDF alone (the reader on its own, no model), the whole import, when
the first call to the model began, when the first call holding the last page's text began (the last
page's OCR ended before it), and how much of the model's work fell before that: what ran beside OCR
rather than after it. Runs only while the 1-minute load is under 2.0 (`--any-load` to run anyway);
the load is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from host.embedders import minilm  # noqa: E402
from host.importer import ImportOptions, import_library  # noqa: E402
from host.importer.cli import default_concurrency  # noqa: E402
from host.importer.file_chunks import chunk_file  # noqa: E402
from host.importer.sources import SourceFile  # noqa: E402

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
WORDS = ("harbour", "ferry", "lantern", "quay", "gull", "tide", "rope", "anchor", "chandler", "mast", "keel", "beacon",
         "channel", "pilot", "net", "salt", "orchard", "pear", "hedge", "meadow", "barn", "plough", "furrow", "thistle",
         "swallow", "cider", "frost", "parish")


def sentence(seed: int, length: int = 14) -> str:
    words = [WORDS[(seed * 7 + step * 13) % len(WORDS)] for step in range(length)]
    return " ".join(words).capitalize() + f" number {seed}."


def write_posts(folder: Path, posts: int) -> None:
    for number in range(posts):
        paragraphs = ["\n".join(textwrap.wrap(" ".join(sentence(number * 100 + n * 10 + k) for k in range(6))))
                      for n in range(8)]
        (folder / f"post-{number:03d}.md").write_text(f"# Post {number}\n\n" + "\n\n".join(paragraphs) + "\n")


def write_scans(path: Path, pages: int) -> None:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(FONT, 30)
    images = []
    for number in range(pages):
        text = " ".join(sentence(10_000 + number * 50 + k) for k in range(16))
        image = Image.new("L", (1700, 2200), 255)
        draw = ImageDraw.Draw(image)
        for row, line in enumerate(textwrap.wrap(text, 80)):
            draw.text((150, 150 + 46 * row), line, font=font, fill=0)
        images.append(image)
    images[0].save(path, "PDF", save_all=True, append_images=images[1:], resolution=200)


class TimedCalls:
    """The local model, each call to it timed (start, end, its texts)."""

    def __init__(self, model: minilm.MiniLMEmbedder) -> None:
        self.model_ = model
        self.model = model.model
        self.dimension = model.dimension
        self.precision = model.precision
        self.calls: list[tuple[float, float, list[str]]] = []
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return self.model_.count_tokens(text)

    def token_counter(self) -> Any:
        return self.model_.token_counter()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        vectors = self.model_.embed(texts)
        with self._lock:
            self.calls.append((started, time.perf_counter(), list(texts)))
        return vectors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posts", type=int, default=40)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--any-load", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    if load >= 2.0 and not args.any_load:
        print(f"the 1-minute load is {load:.2f}: run when it is under 2.0, or pass --any-load", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as temporary:
        site = Path(temporary) / "site"
        site.mkdir()
        write_posts(site, args.posts)
        scans = site / "zz-scans.pdf"  # read last: the posts before it are the earlier documents
        write_scans(scans, args.pages)
        local = minilm.MiniLMEmbedder(threads=1)
        local.load()

        started = time.perf_counter()
        source = SourceFile(scans, scans.name, "pdf")
        parts = list(chunk_file(source, scans.read_bytes(), local.count_tokens, None, 250))
        ocr_alone = time.perf_counter() - started
        last_page = next(text for part in reversed(parts) for text, _, info in part.bits if info["url"].endswith(
            f"#page={args.pages}"))

        timed = TimedCalls(local)
        started = time.perf_counter()
        report = import_library([site], Path(temporary) / "out.json", timed,
                                ImportOptions(concurrency=default_concurrency(local)), say=lambda line: None)
        whole = time.perf_counter() - started
    first_call = min(start for start, _, _ in timed.calls) - started
    last_page_call = min(start for start, _, texts in timed.calls if last_page in texts) - started
    model_seconds = sum(end - start for start, end, _ in timed.calls)
    before = sum(max(0.0, min(end - started, last_page_call) - (start - started)) for start, end, _ in timed.calls)
    print(f"load {load:.2f} -> {os.getloadavg()[0]:.2f}; {args.posts} posts and {args.pages} scanned pages: "
          f"{report.bits} chunks, {len(timed.calls)} calls to the model")
    print(f"OCR of the scanned PDF alone: {ocr_alone:.2f} s; the whole import: {whole:.2f} s")
    print(f"first call to the model at {first_call:.2f} s; the last page's text first sent at {last_page_call:.2f} s")
    print(f"the model's calls took {model_seconds:.2f} s (summed over its runs), {before:.2f} s of them before "
          f"the last page's OCR had ended ({before / model_seconds:.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
