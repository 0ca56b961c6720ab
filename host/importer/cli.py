"""`polymath-host import SOURCE... --out FILE`: the command-line edge of the importer.

`register(subparsers)` adds the command to the host's parser (as `access.cli` does); `main(argv)`
runs it standalone (`python -m host.importer`). The embedder comes from `open_embedder`, the one
place that maps --model / --embedder-url / --embedder-model / --embedder-precision /
--embedder-device to an embedder. Exit codes: 0 done;
1 an error (the old output untouched) or some files could not be read (the library was written
from the others: a publisher's script notices); 130 interrupted (the old output untouched);
2 a usage error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from host.embedders import minilm
from host.embedders.openai_http import OpenAIEmbedder
from host.embedders.service import OPENAI_URL
from host.importer.embedding import Embedder, chunk_limit_warning
from host.importer.errors import ImporterError
from host.importer.kinds import KINDS, kind_named
from host.importer.pipeline import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CHUNK_TOKENS,
    ImportOptions,
    NoProgress,
    Progress,
    import_library,
)
from host.importer.progress import BarProgress, wants_bar
from host.importer.website.addresses import is_web_address
from host.importer.website.crawler import DEFAULT_CONCURRENCY, DEFAULT_DELAY, DEFAULT_MAX_PAGES, CrawlSettings

CACHE_SUFFIX = ".embeddings-cache.sqlite"
REMOTE_CONCURRENCY = 4  # requests in flight to an embedding service, by default
# An import waits out a busy service (a query cannot): 8 retries, up to a minute each when asked.
REMOTE_RETRIES, REMOTE_BACKOFF, REMOTE_MAX_RETRY_AFTER, REMOTE_TIMEOUT = 8, 1.0, 60.0, 60.0
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
FORMAT_ALIASES = {"twitter": "x", "wxr": "wordpress"}  # what people also call a format

DESCRIPTION = """\
Turn writing into a library file: files of the formats below, folders of them (walked in sorted
order; hidden files and folders and .SECRET. files are skipped), and the exports writing services
give (a zip is looked into; an unzipped export folder is recognised too). Text is cut into chunks
along its headings, paragraphs, sentences and words, of at most --chunk-tokens tokens of the
model's own tokenizer, and embedded. A re-run embeds only chunks whose text changed (a cache beside
--out). The library is validated before it replaces --out, atomically: an error or Ctrl-C leaves
the old file as it was."""


def _formats() -> str:
    """The formats, from the kinds' table: each file's is found by its name and content."""
    lines = [f"  {kind.name:<10} {kind.describes}" for kind in KINDS]
    lines.append(f"  {'website':<10} a SOURCE that is an http(s) URL: https://site/ or its sitemap.xml (see below)")
    return "formats (found by each file's name and content; --format NAME to name one):\n" + "\n".join(lines)


EPILOG = _formats() + """

a website (https://site/, https://site/blog/ or https://site/sitemap.xml):
  each HTML page's main text, with the page's URL. The pages are those of its sitemap (robots.txt's
  Sitemap lines, else /sitemap.xml; an index too), else those reached by links from the start page;
  only within the start's origin and folder; robots.txt honoured. A re-run asks with ETag and
  Last-Modified (304: nothing read or embedded again); an interrupted crawl continues where it stopped.

where the file goes:
  --out libraries/blog.json                    public: served to everyone
  --out drafts.json --access-tag unpublished   written to libraries/access/unpublished/drafts.json:
                                               private to tokens that grant the tag "unpublished"

examples:
  polymath-host import posts/ --out libraries/blog.json --base-url https://example.com/blog/
  polymath-host import https://example.com/ --out libraries/site.json --max-pages 500
  polymath-host import feed.xml notes/ --out libraries/site.json --base-url https://example.com/
  polymath-host import book.epub essay.docx --out libraries/books.json
  polymath-host import scans/*.png letters.pdf --out libraries/archive.json   (scanned pages: the ocr extra)
  polymath-host import drafts/ --out drafts.json --access-tag unpublished --base-url https://example.com/
  polymath-host import docs/ --out libraries/docs.json \\
      --embedder-url http://localhost:11434/v1 --embedder-model nomic-embed-text --chunk-tokens 500"""


def open_embedder(model: str | None, embedder_url: str | None, embedder_model: str | None, *,
                  precision: str = "fp32", device: str = "cpu") -> Embedder:
    """The embedder `import` uses, from --model / --embedder-url / --embedder-model and, for the local
    model, --embedder-precision / --embedder-device.

    The same embedders `serve` keeps (host.embedders), so that text queries land in the library's
    vector space: the built-in local MiniLM, or the OpenAI-compatible service serving library model
    `model` (default `openai.com:<embedder_model>`), which an import lets take its time: retried
    patiently on 429, 5xx and timeouts, honouring Retry-After. The local one runs one thread per model run
    (an import runs one per core at once: `default_concurrency`), where `serve` gives each query one.
    """
    remote = embedder_url is not None or embedder_model is not None
    wanted = model or (f"openai.com:{embedder_model}" if embedder_model else minilm.MODEL)
    if not remote:
        if wanted != minilm.MODEL:
            raise ImporterError(f"--model {wanted}: no local embedder for it; use --model {minilm.MODEL} "
                                "or --embedder-url URL --embedder-model NAME")
        problem = minilm.missing_requirement()
        if problem:
            raise ImporterError(f"--model {wanted}: {problem}")
        try:
            return minilm.MiniLMEmbedder(precision=precision, device=device, threads=1)
        except ValueError as problem:
            raise ImporterError(f"--embedder-precision/--embedder-device: {problem}") from None
    if (precision, device) != ("fp32", "cpu"):
        raise ImporterError("--embedder-precision and --embedder-device choose how the local model runs; "
                            "an embedding service runs its own model")
    if not embedder_model:
        raise ImporterError("--embedder-url needs --embedder-model NAME (the model that service knows)")
    try:
        return OpenAIEmbedder(embedder_url or OPENAI_URL, embedder_model, model=wanted, timeout=REMOTE_TIMEOUT,
                              retries=REMOTE_RETRIES, backoff=REMOTE_BACKOFF, max_retry_after=REMOTE_MAX_RETRY_AFTER,
                              retry_timeouts=True)
    except ValueError as problem:
        raise ImporterError(f"--embedder-url/--embedder-model: {problem}") from None


def default_concurrency(embedder: Embedder) -> int:
    """Calls to the embedder at once: one per usable core for the local model (each run on one thread:
    faster than one run on every core, whose threads wait on each other), a few for a service."""
    if isinstance(embedder, minilm.MiniLMEmbedder) and embedder.device == "cpu":
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return REMOTE_CONCURRENCY if isinstance(embedder, OpenAIEmbedder) else 1


EmbedderOpener = Callable[..., Embedder]  # open_embedder's signature


def source_argument(text: str) -> Path | str:
    """A SOURCE: a website's URL stays a string (a Path would fold its `//`), anything else is a path."""
    return text if is_web_address(text) else Path(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="+", type=source_argument, metavar="SOURCE",
                        help="a file or folder of writing, an export, or a website's URL (see the formats below)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE",
                        help="the library file to write (.json), e.g. libraries/blog.json; "
                             "with --access-tag, a file name: see below")
    parser.add_argument("--access-tag", metavar="T",
                        help="make the bits private to tokens granting T: the library is written to "
                             "<libraries>/access/T/<--out> (--out must then be a bare file name)")
    parser.add_argument("--libraries", type=Path, default=Path("libraries"), metavar="DIR",
                        help="the folder serve loads, where --access-tag puts the file (default: libraries/)")
    parser.add_argument("--base-url", metavar="URL",
                        help="the site's URL: a bit links to URL + the file's path under its SOURCE (.md as .html) "
                             "+ #heading; front matter url and feed links win (default: file: URLs of "
                             "this machine, for trying a library locally)")
    parser.add_argument("--format", metavar="NAME", type=str.lower,
                        help="read every SOURCE as this format instead of finding each file's by its name and "
                             f"content: {', '.join(kind.name for kind in KINDS)}")
    parser.add_argument("--include-drafts", action="store_true",
                        help="import drafts and unpublished posts too (Markdown draft: true, export drafts)")
    parser.add_argument("--include-replies", action="store_true",
                        help="import replies to other people (X) and responses (Medium) too")
    parser.add_argument("--include-retweets", action="store_true", help="import retweets in an X archive too")
    parser.add_argument("--model", metavar="M",
                        help=f"the embedding model (default: {minilm.MODEL}, local and offline; "
                             "with --embedder-url: openai.com:<--embedder-model>)")
    parser.add_argument("--embedder-url", metavar="URL",
                        help="embed through an OpenAI-compatible /v1/embeddings service (key from "
                             "POLYMATH_EMBEDDER_KEY or OPENAI_API_KEY)")
    parser.add_argument("--embedder-model", metavar="NAME", help="the model name that service knows")
    parser.add_argument("--embedder-precision", choices=minilm.PRECISIONS, default=minilm.DEFAULT_PRECISION,
                        help=f"the local model's precision (default {minilm.DEFAULT_PRECISION}): int8 embeds about "
                             "twice as fast on a CPU, with vectors slightly apart from fp32 ones (docs/importing.md); "
                             "the library records it")
    parser.add_argument("--embedder-device", choices=minilm.DEVICES, default="cpu",
                        help="where the local model runs (default cpu; cuda needs onnxruntime-gpu and a CUDA device, "
                             "fp32 only)")
    parser.add_argument("--embedder-concurrency", type=int, metavar="N",
                        help="calls to the embedder at once (default: one per core for the local model, "
                             f"{REMOTE_CONCURRENCY} requests in flight for a service)")
    parser.add_argument("--chunk-tokens", type=int, default=DEFAULT_CHUNK_TOKENS, metavar="N",
                        help=f"largest chunk, in the model's tokens (default {DEFAULT_CHUNK_TOKENS}: all of it "
                             "is embedded by MiniLM, which reads 254 tokens of text; raise it for "
                             "models with a longer window)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help=f"chunks per call to the embedder (default {DEFAULT_BATCH_SIZE}; chunks of similar "
                             "length go together)")
    parser.add_argument("--cache", type=Path, metavar="FILE",
                        help=f"the embeddings cache (default: the output's path + {CACHE_SUFFIX})")
    parser.add_argument("--no-cache", action="store_true", help="embed every chunk, keep no cache")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (it is shown only on a terminal)")
    site = parser.add_argument_group("a website SOURCE")
    site.add_argument("--max-pages", type=int, default=DEFAULT_MAX_PAGES, metavar="N",
                      help=f"import at most N pages of a website (default {DEFAULT_MAX_PAGES:,}); the summary says "
                           "how many more it found")
    site.add_argument("--crawl-concurrency", type=int, default=DEFAULT_CONCURRENCY, metavar="N",
                      help=f"requests to the site at once (default {DEFAULT_CONCURRENCY})")
    site.add_argument("--crawl-delay", type=float, default=DEFAULT_DELAY, metavar="SECONDS",
                      help=f"at least this long between the starts of two requests (default {DEFAULT_DELAY:g}: "
                           f"{1 / DEFAULT_DELAY:g} a second at most); a longer Crawl-delay in robots.txt wins")


def register(subparsers: Any, open_embedder: EmbedderOpener = open_embedder) -> argparse.ArgumentParser:
    """Add `import` to the host's argparse subparsers."""
    command: argparse.ArgumentParser = subparsers.add_parser(
        "import", help="turn Markdown, text, HTML, feeds and PDFs into a library file", description=DESCRIPTION,
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(command)
    command.set_defaults(func=lambda args: import_command(args, open_embedder))
    return command


def main(argv: list[str] | None = None, open_embedder: EmbedderOpener = open_embedder) -> int:
    parser = argparse.ArgumentParser(prog="polymath-host")
    register(parser.add_subparsers(metavar="COMMAND", required=True), open_embedder)
    args = parser.parse_args(["import", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


def resolve_output(out: Path, access_tag: str | None, libraries: Path) -> tuple[Path, str | None]:
    """The file to write and the access tag its folder gives, by the rules `--help` states."""
    name = out.name
    if not name.endswith(".json"):
        raise ImporterError(f"--out {out}: a library file name ends in .json (serve loads only those)")
    if name.startswith(".") or ".SECRET." in name:
        raise ImporterError(f"--out {out}: serve never loads hidden or .SECRET. files; choose another name")
    if access_tag is not None:
        if not _TAG.fullmatch(access_tag) or ".SECRET." in access_tag:
            raise ImporterError(f"--access-tag {access_tag!r}: use letters, digits, '_', '-' and '.', starting "
                                "with a letter or digit")
        if len(out.parts) != 1:
            raise ImporterError(f"--out {out}: with --access-tag, give a file name (e.g. --out {name}); it is "
                                f"written to {libraries / 'access' / access_tag / name}")
        return libraries / "access" / access_tag / name, access_tag
    return out, _folder_tag(out, libraries)


def _folder_tag(out: Path, libraries: Path) -> str | None:
    """The tag serve gives `out` from its folder (`<libraries>/access/<tag>/...`), when it is under --libraries."""
    try:
        relative = out.resolve().relative_to(libraries.resolve())
    except ValueError:
        relative = out
    parts = relative.parts[:-1]
    if "access" in parts and parts.index("access") + 1 < len(parts):
        return parts[parts.index("access") + 1]
    return None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def import_command(args: argparse.Namespace, open_embedder: EmbedderOpener = open_embedder) -> int:
    out: Path | None = None
    try:
        out, access_tag = resolve_output(args.out, args.access_tag, args.libraries)
        if args.format is not None:
            kind_named(FORMAT_ALIASES.get(args.format, args.format))  # a mistyped name fails before the model loads
        if args.embedder_url and not args.embedder_model:
            raise ImporterError("--embedder-url needs --embedder-model NAME (the model that service knows)")
        if args.embedder_concurrency is not None and args.embedder_concurrency < 1:
            raise ImporterError(f"--embedder-concurrency: must be at least 1, got {args.embedder_concurrency}")
        model = args.model or (f"openai.com:{args.embedder_model}" if args.embedder_url else None)
        embedder = open_embedder(model, args.embedder_url, args.embedder_model, precision=args.embedder_precision,
                                 device=args.embedder_device)
        warning = chunk_limit_warning(embedder.model, args.chunk_tokens)
        if warning:
            _say(warning)
        cache = None if args.no_cache else (args.cache or out.with_name(out.name + CACHE_SUFFIX))
        options = ImportOptions(base_url=args.base_url, chunk_tokens=args.chunk_tokens, batch_size=args.batch_size,
                                cache=cache, access_tag=access_tag,
                                concurrency=args.embedder_concurrency or default_concurrency(embedder),
                                format=FORMAT_ALIASES.get(args.format, args.format), include_drafts=args.include_drafts,
                                include_replies=args.include_replies, include_retweets=args.include_retweets,
                                crawl=CrawlSettings(concurrency=args.crawl_concurrency, delay=args.crawl_delay,
                                                    max_pages=args.max_pages))
        progress: Progress = BarProgress() if wants_bar(args.quiet) else NoProgress()
        report = import_library(args.sources, out, embedder, options, progress, _say)
    except ImporterError as problem:
        _say(f"error: {problem}")
        return 1
    except KeyboardInterrupt:
        kept = f"{out} is left as it was" if out is not None else "nothing was written"
        _say(f"interrupted: {kept}; what was embedded so far is cached for the next run")
        return 130
    for line in report.summary():
        _say(line)
    if access_tag is not None:
        _say(f"its bits are private: served only to tokens that grant {access_tag!r}")
    return 1 if report.failed else 0
