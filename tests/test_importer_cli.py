"""`polymath-host import` on the command line: where the file goes, what it says, how it exits.

The command is run in-process through `main(argv, open_embedder=...)`, handing it the test
embedder where the host's registry will hand it a real one, and once as a real process for --help.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from embedding_service import running_service
from importer_support import FACTS, HashingEmbedder, write_corpus

from host.cli.validate import validate_paths
from host.importer import cli
from host.importer.embedding import chunk_limit_warning
from host.importer.errors import ImporterError
from host.importer.progress import BarProgress, wants_bar

PROJECT = Path(__file__).resolve().parents[1]
pytest_plugins = ["embedder_fixtures"]  # minilm_embedder: required in CI


class Opener:
    """Stands where the embedders' registry will: records what the command asked for."""

    def __init__(self, embedder: Any = None) -> None:
        self.embedder = embedder or HashingEmbedder()
        self.asked: list[tuple[str | None, str | None, str | None]] = []
        self.how: list[dict[str, str]] = []  # precision and device asked for

    def __call__(self, model: str | None, url: str | None, name: str | None, **how: str) -> Any:
        self.asked.append((model, url, name))
        self.how.append(how)
        return self.embedder


def polymath_import(*argv: str, opener: Opener | None = None) -> int:
    return cli.main(list(argv), open_embedder=opener or Opener())


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_corpus(tmp_path / "site")


def test_import_writes_the_library_and_says_what_it_did(site, capsys):
    code = polymath_import("site", "--out", "libraries/site.json", "--base-url", "https://example.com/")

    assert code == 0
    err = capsys.readouterr().err.splitlines()
    library = json.loads(Path("libraries/site.json").read_text())
    assert err[0] == "read 6 files, 7 documents; 1 of unknown kind skipped (.png 1)"
    assert err[1].startswith(f"{len(library['bits'])} chunks, ")
    assert f"embedded {len(library['bits'])} " in err[1] and err[1].endswith("reused 0 from the cache")
    assert err[2].startswith(f"wrote libraries/site.json: {len(library['bits'])} bits of test:hashing-64 in ")
    assert err[3] == ("note: images in folders are not read (1 here); to read scanned pages by OCR, name them as "
                      "sources (e.g. scans/*.png)")
    assert len(err) == 4
    assert Path("libraries/site.json.embeddings-cache.sqlite").is_file()


def test_no_cache_keeps_no_cache_file(site):
    assert polymath_import("site", "--out", "site.json", "--no-cache") == 0
    assert sorted(path.name for path in Path().iterdir()) == ["site", "site.json"]


def test_access_tag_writes_under_the_libraries_access_folder(site, capsys):
    code = polymath_import("site", "--out", "drafts.json", "--access-tag", "unpublished", "--libraries", "libs")

    assert code == 0
    assert Path("libs/access/unpublished/drafts.json").is_file()
    assert "its bits are private: served only to tokens that grant 'unpublished'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--out", "libraries/drafts.json", "--access-tag", "staff"],
     "error: --out libraries/drafts.json: with --access-tag, give a file name (e.g. --out drafts.json); it is "
     f"written to {Path('libraries/access/staff/drafts.json')}"),
    (["--out", "x.json", "--access-tag", "../up"], "error: --access-tag '../up': use letters, digits"),
    (["--out", "site.txt"], "error: --out site.txt: a library file name ends in .json"),
    (["--out", "keys.SECRET.json"], "error: --out keys.SECRET.json: serve never loads hidden or .SECRET. files"),
    (["--out", "x.json", "--embedder-url", "http://127.0.0.1:9/v1"], "error: --embedder-url needs --embedder-model"),
    (["--out", "x.json", "--base-url", "example.com"], "error: --base-url: expected an http(s) URL"),
    (["--out", "x.json", "--chunk-tokens", "0"], "error: --chunk-tokens: must be at least 1, got 0"),
    (["--out", "x.json", "--format", "docz"], "error: --format docz: not a format this importer reads; use one of"),
])
def test_bad_options_are_one_line_and_nothing_is_written(site, capsys, argv, message):
    assert polymath_import("site", *argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
    assert sorted(path.name for path in Path().iterdir()) == ["site"]


def test_a_missing_source_fails_without_touching_the_output(site, capsys):
    Path("site.json").write_text("old")
    assert polymath_import("site", "nowhere", "--out", "site.json") == 1
    assert capsys.readouterr().err == "error: nowhere: does not exist\n"
    assert Path("site.json").read_text() == "old"


def test_a_file_that_fails_is_named_the_rest_is_written_and_the_exit_code_says_so(site, capsys):
    (site / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    assert polymath_import("site", "--out", "site.json") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {Path('site/broken.pdf')}: not a readable PDF")
    assert "1 failed (see above)" in err
    assert FACTS["pdf"] in Path("site.json").read_text()


class CtrlC(HashingEmbedder):
    def embed(self, texts):
        raise KeyboardInterrupt


def test_ctrl_c_exits_130_and_leaves_the_old_library(site, capsys):
    Path("site.json").write_text("old")
    assert polymath_import("site", "--out", "site.json", opener=Opener(CtrlC())) == 130
    assert capsys.readouterr().err == ("interrupted: site.json is left as it was; what was embedded so far is "
                                       "cached for the next run\n")
    assert Path("site.json").read_text() == "old"


def test_the_embedder_is_asked_for_by_model_and_service(site):
    opener = Opener()
    polymath_import("site", "--out", "a.json")
    polymath_import("site", "--out", "a.json", "--model", "sentence-transformers:all-MiniLM-L6-v2", opener=opener)
    polymath_import("site", "--out", "a.json", "--embedder-url", "http://127.0.0.1:9/v1", "--embedder-model",
                    "nomic-embed-text", opener=opener)
    polymath_import("site", "--out", "a.json", "--embedder-url", "http://127.0.0.1:9/v1", "--embedder-model",
                    "nomic-embed-text", "--model", "ollama:nomic", opener=opener)
    assert opener.asked == [
        ("sentence-transformers:all-MiniLM-L6-v2", None, None),
        ("openai.com:nomic-embed-text", "http://127.0.0.1:9/v1", "nomic-embed-text"),
        ("ollama:nomic", "http://127.0.0.1:9/v1", "nomic-embed-text"),
    ]


def test_register_adds_import_to_the_hosts_parser():
    parser = argparse.ArgumentParser(prog="polymath-host")
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["import", "posts", "--out", "blog.json", "--chunk-tokens", "300"])
    assert (args.sources, args.out, args.chunk_tokens, args.func is not None) == ([Path("posts")], Path("blog.json"),
                                                                                  300, True)


def test_help_explains_where_the_file_goes(tmp_path):
    result = subprocess.run([sys.executable, "-m", "host.importer", "--help"], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(PROJECT)}, timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("usage: polymath-host import")
    help_text = " ".join(result.stdout.split())
    for promise in ["libraries/access/unpublished/drafts.json", "<libraries>/access/T/<--out>",
                    "default 250", "file: URLs", "(.md as .html)", "Ctrl-C leaves the old file"]:
        assert promise in help_text


def test_a_chunk_budget_past_what_minilm_reads_is_warned_about():
    assert chunk_limit_warning("sentence-transformers:all-MiniLM-L6-v2", 250) is None
    warning = chunk_limit_warning("sentence-transformers:all-MiniLM-L6-v2", 500)
    assert warning is not None and "embeds (254 tokens)" in warning
    assert chunk_limit_warning("someone:else", 10_000) is None


# ---- the progress bar ------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_shows_only_on_a_terminal_and_not_when_quiet():
    assert wants_bar(quiet=False, stream=Terminal())
    assert not wants_bar(quiet=True, stream=Terminal())
    assert not wants_bar(quiet=False, stream=io.StringIO())


def test_the_bar_counts_files_then_chunks():
    screen = Terminal()
    bar = BarProgress(screen, refresh_seconds=0)
    bar.reading(3)
    for _ in range(3):
        bar.file_read()
    bar.embedding(10)
    bar.chunks_embedded(4)
    bar.close()
    shown = screen.getvalue()
    assert "reading" in shown and "3/3" in shown
    assert "embedding (3 files)" in shown and "4/10" in shown and "chunks/s" in shown


# ---- the real embedders behind the command ----------------------------------------------------------


def test_an_openai_compatible_service_embeds_the_library(site, capsys, monkeypatch):
    monkeypatch.delenv("POLYMATH_EMBEDDER_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with running_service(dimension=16) as service:
        code = cli.main(["site", "--out", "site.json", "--embedder-url", service.url,
                         "--embedder-model", "text-embedding-test", "--chunk-tokens", "60"])
        requests = len(service.requests)

    assert code == 0, capsys.readouterr().err
    lines: list[str] = []
    assert validate_paths([Path("site.json")], say=lines.append) == 0, lines
    library = json.loads(Path("site.json").read_text())
    assert library["embedding_model"] == "openai.com:text-embedding-test"
    for bit in library["bits"]:  # the service's usage.prompt_tokens counts words
        assert bit["token_count"] == len(bit["text"].split()) <= 60
    assert requests > len(library["bits"])  # counting tokens asks the service too: see the report


def test_the_library_model_of_a_service_can_be_named():
    embedder = cli.open_embedder("ollama:nomic-embed-text", "http://127.0.0.1:9/v1", "nomic-embed-text")
    assert embedder.model == "ollama:nomic-embed-text"


def test_a_model_with_no_local_embedder_is_refused_in_one_line():
    with pytest.raises(ImporterError, match=r"^--model someone:else: no local embedder for it; use --model "
                                            r"sentence-transformers:all-MiniLM-L6-v2 or --embedder-url URL"):
        cli.open_embedder("someone:else", None, None)


def test_the_default_embedder_is_the_local_minilm_in_fp32_one_run_per_core(minilm_embedder):
    embedder = cli.open_embedder(None, None, None)  # the fixture has made sure the `embed` extra is here
    assert (embedder.model, embedder.dimension, embedder.precision) == ("sentence-transformers:all-MiniLM-L6-v2",
                                                                       384, "fp32")
    # One thread per model run, as many runs at once as there are cores.
    assert embedder.threads == 1 and cli.default_concurrency(embedder) == len(os.sched_getaffinity(0))


def test_the_local_models_precision_and_device_are_asked_for_by_option(site):
    opener = Opener()
    polymath_import("site", "--out", "site.json", "--embedder-precision", "int8", opener=opener)
    assert opener.how == [{"precision": "int8", "device": "cpu"}]
    assert cli.open_embedder(None, None, None, precision="int8").precision == "int8"


@pytest.mark.parametrize(("argv", "message"), [
    (["--embedder-precision", "int8", "--embedder-url", "http://127.0.0.1:9/v1", "--embedder-model", "m"],
     "--embedder-precision and --embedder-device choose how the local model runs"),
    (["--embedder-precision", "int8", "--embedder-device", "cuda"], "int8 runs on the CPU only"),
    (["--embedder-concurrency", "0"], "--embedder-concurrency: must be at least 1, got 0"),
])
def test_embedder_options_that_cannot_work_are_one_line(site, capsys, argv, message):
    code = cli.main(["site", "--out", "site.json", *argv])
    assert code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and message in line
    assert not Path("site.json").exists()


def test_a_service_gets_several_requests_at_once_and_an_import_is_patient_with_it():
    embedder = cli.open_embedder(None, "http://127.0.0.1:9/v1", "m")
    assert cli.default_concurrency(embedder) == cli.REMOTE_CONCURRENCY > 1
    assert embedder.retries == cli.REMOTE_RETRIES and embedder.max_retry_after == cli.REMOTE_MAX_RETRY_AFTER
