"""Real documents for the importer's tests, made by the tools people make them with.

Word documents and EPUB books come from Markdown through Debian's `pandoc` (and python-docx, as
scripts write Word files); scanned pages are known text drawn by Pillow in DejaVu Serif (Debian's
fonts-dejavu-core), saved as PNG, TIFF or an image-only PDF, as a scanner would. Each maker skips
the test without its tool, except in CI (`components.unavailable`).
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from components import unavailable

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf")
SCAN_DPI = 200
_WORD = re.compile(r"[a-z0-9]+(?:['\u2019-][a-z0-9]+)*")

# A Word document's Markdown: a title and subtitle, nested headings, a table and a list.
ESSAY = """\
---
title: Notes on Beekeeping
subtitle: What a first year with two hives taught me
---

# Spring inspection

The queen of the eastern hive laid eggs in a tight spiral pattern by mid April.

## Swarm cells

We found four swarm cells along the bottom bars of the second frame.

# Harvest

| Hive | Frames | Honey (kg) |
|------|--------|------------|
| East | 9      | 14         |
| West | 6      | 8          |

- jars sterilised in the oven
- labels printed at the library
"""

BOOK = """\
---
title: The Lighthouse Almanac
author: Marguerite Okonkwo
date: 2021-03-01
description: A year of weather and ships at a northern light.
lang: en
---

# Spring Storms

The first gale of April tore three slates from the keeper's roof.

## Repairs

We nailed tarred canvas over the gap and waited for calmer seas.

# Summer Fog

Fog horns sounded for nine days straight in July, and the supply boat turned back twice.

# Autumn Lights

The lamp was fitted with a new Fresnel lens in October by two engineers from the city.
"""


def pandoc(markdown: str, out: Path, *options: str) -> Path:
    """`pandoc` turns Markdown (with a YAML metadata block) into `out`, its format chosen by suffix."""
    if shutil.which("pandoc") is None:
        unavailable("pandoc is not installed (apt-get install pandoc)")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["pandoc", "--from", "markdown", "--output", str(out), *options], input=markdown, text=True,
                   check=True, capture_output=True, timeout=60)
    return out


def require_tesseract() -> None:
    if shutil.which("tesseract") is None:
        unavailable("tesseract is not installed (apt-get install tesseract-ocr)")


def scanned_page(text: str, width: int = 1400) -> Any:
    """`text` drawn black on white in DejaVu Serif at about 11 pt (200 dpi), wrapped to the page: a clean scan."""
    require_tesseract()
    if not FONT.is_file():
        unavailable(f"{FONT} is missing (apt-get install fonts-dejavu-core)")
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(FONT), 30)
    lines = textwrap.wrap(text, width=width // 17)
    page = Image.new("L", (width, 120 + 46 * len(lines)), 255)
    draw = ImageDraw.Draw(page)
    for number, line in enumerate(lines):
        draw.text((70, 60 + 46 * number), line, font=font, fill=0)
    return page


def save_scans(pages: list[Any], out: Path) -> Path:
    """The pages saved as one file, by suffix: `.png` (the first page), `.tif` (every page), `.pdf` (image-only pages)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    first, *rest = pages
    if out.suffix == ".png":
        first.save(out, dpi=(SCAN_DPI, SCAN_DPI))
    elif out.suffix == ".tif":
        first.save(out, save_all=True, append_images=rest, dpi=(SCAN_DPI, SCAN_DPI), compression="tiff_lzw")
    else:
        first.save(out, "PDF", save_all=True, append_images=rest, resolution=SCAN_DPI)
    return out


def pdf_pages(*pdfs: bytes) -> bytes:
    """The pages of several PDFs, in order, as one PDF (pypdf's writer)."""
    import pypdf

    writer = pypdf.PdfWriter()
    for data in pdfs:
        writer.append(pypdf.PdfReader(io.BytesIO(data)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def damage_image(pdf: bytes, which: int) -> bytes:
    """The PDF with the start of its `which`-th JPEG image (0 for the first) overwritten: the same length, so the
    file still opens, but that image cannot be decoded (as when a scan's data is damaged on disk)."""
    start = -1
    for _ in range(which + 1):
        start = pdf.index(b"\xff\xd8\xff", start + 1)
    return pdf[:start] + bytes(600) + pdf[start + 600:]


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def recall(expected: str, found: str) -> float:
    """The share of `expected`'s words (counted with repeats) that are among `found`'s."""
    wanted = Counter(words(expected))
    got = Counter(words(found))
    return sum((wanted & got).values()) / sum(wanted.values())
