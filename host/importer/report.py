"""What an import did, counted, and said to the publisher in a few lines."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from host.importer.exports import SKIPS
from host.importer.kinds import IMAGE_SUFFIXES
from host.importer.website.crawler import CrawlReport


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
    skipped: Counter[str] = field(default_factory=Counter)  # export posts left out, by reason (`exports.SKIPS`)
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
    crawls: list[CrawlReport] = field(default_factory=list)  # one per website SOURCE (said when its crawl ends)

    def summary(self) -> list[str]:
        """What happened, in a few lines for the publisher."""
        skipped = []
        if self.drafts:
            skipped.append(f"{self.drafts} draft{'s' * (self.drafts != 1)} skipped (--include-drafts)")
        for reason, count in sorted(self.skipped.items()):
            one, several, how = SKIPS[reason]
            skipped.append(f"{count} {one if count == 1 else several} skipped ({how})")
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
        lines.append(f"wrote {self.out}: {self.bits} bits of {self.model} in {self.seconds:.2f} s")
        images = sum(count for suffix, count in self.skipped_by_suffix.items() if suffix in IMAGE_SUFFIXES)
        if images:
            lines.append(f"note: images in folders are not read ({images} here); to read scanned pages by OCR, "
                         "name them as sources (e.g. scans/*.png)")
        if self.file_urls:
            lines.append("note: without --base-url, bits link to file: URLs on this machine (they show its folder "
                         "paths); pass --base-url https://your.site/ before publishing")
        return lines
