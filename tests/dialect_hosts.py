"""What the in-process tests of the retrieval dialects (Dify, OpenAI's vector stores) share: a folder
of small libraries whose right answers are known, an access file, tokens, and the app on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from librarian import b64, write_library
from word_embedder import WordEmbedder

from access import AccessControl
from access.keys import generate_key_entry
from access.tokens import issue_token
from host.embedders.service import Embedders
from host.service.settings import Settings
from host.web.app import create_app

EMBED = WordEmbedder()
OPAQUE_TOKEN = "sk_alice_team_0123456789"  # a legacy token granting `team`
STORIES = [
    ("Jonah was swallowed by a great fish", "https://example.com/jonah", "Jonah 1"),
    ("Noah built an ark of gopher wood", "https://example.com/noah", "Genesis 6"),
    ("The fish vomited Jonah onto dry land", "https://example.com/jonah", "Jonah 2"),
    ("Daniel in the den of lions", "https://example.com/daniel", "Daniel 6"),
]
SECRETS = [("The great fish of the secret sea", "https://example.com/secret", "Secret 1")]
DRAFTS = [("Jonah drafts a second great fish story", "https://example.com/drafts", "Draft 1"),
          ("Noah drafts the flood", "https://example.com/drafts", "Draft 2")]


def bit(text: str, url: str, title: str, **extra: Any) -> dict[str, Any]:
    return {"text": text, "embedding": b64(EMBED.embed([text])[0]), "token_count": len(text.split()),
            "info": {"url": url, "title": title}, **extra}


def library(bits: list[dict[str, Any]], model: str = EMBED.model) -> dict[str, Any]:
    return {"version": 1, "embedding_model": model, "bits": bits}


def write_host(root: Path) -> Path:
    """stories.json (4 public bits, 1 tagged `team`), access/team/drafts.json (2 bits), other.json (another
    model), and root/access.SECRET.json; the libraries folder is returned."""
    folder = root / "libraries"
    write_library(folder / "stories.json", library([bit(*story) for story in STORIES]
                                                   + [bit(*secret, access_tag="team") for secret in SECRETS]))
    write_library(folder / "access" / "team" / "drafts.json", library([bit(*draft) for draft in DRAFTS]))
    write_library(folder / "other.json", library([{"text": "elsewhere", "embedding": b64([1, 0, 0, 0]),
                                                   "token_count": 1, "info": {"url": "https://o.example/"}}],
                                                 model="test:other-4"))
    access = root / "access.SECRET.json"
    access.write_text(json.dumps({"issuer": "https://library.test", "keys": [generate_key_entry("HS256", "k1")],
                                  "tokens": {"alice": {"token": OPAQUE_TOKEN, "access_tags": ["team"]}}}))
    access.chmod(0o600)
    return folder


def signed_token(root: Path, tags: tuple[str, ...] = ("team",)) -> str:
    return issue_token(AccessControl.from_file(root / "access.SECRET.json").settings, "bob", tags).token


def connect(root: Path, **settings: Any) -> httpx.AsyncClient:
    app = create_app(Settings(libraries=root / "libraries", cache_dir=root / "compiled", watch_interval=0,
                              access=root / "access.SECRET.json", **settings), embedders=Embedders([EMBED]))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def counter(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def assert_no_traceback(response: httpx.Response) -> None:
    assert "Traceback" not in response.text and 'File "' not in response.text
