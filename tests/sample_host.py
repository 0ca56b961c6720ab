"""A real host process serving the sample library and its private drafts (tag `unpublished`), with a
token that grants the tag: what the tests of real clients (openai, the Python client, its LangChain
and LlamaIndex retrievers) run against."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from components import admin
from conftest import PROJECT, RunningHost, start_host, stop_host

JONAH = "a great fish swallowed the prophet"
DANIEL = "Daniel in the den of lions"
DRAFTS = "access/unpublished/drafts"


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    host: RunningHost


@contextmanager
def serve_sample(root: Path) -> Iterator[Served]:
    """`serve` with the local embedder on a copy of libraries/ in `root`, and a token granting `unpublished`."""
    shutil.copytree(PROJECT / "libraries", root / "libraries", ignore=shutil.ignore_patterns(".compiled"))
    access = root / "access.SECRET.json"
    admin("access", "init", "--access", str(access), cwd=root)
    token = admin("token", "issue", "alice", "--tag", "unpublished", "--access", str(access), cwd=root)
    host = start_host(root / "libraries", "--access", str(access), timeout=60, embedder=True)
    try:
        yield Served(host.url, token, host)
    finally:
        stop_host(host)
