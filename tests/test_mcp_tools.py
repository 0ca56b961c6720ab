"""The MCP tools in-process, over JSON-RPC: what depends on the host's libraries rather than the client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from librarian import b64, write_library
from starlette.testclient import TestClient
from word_embedder import WordEmbedder

from host.embedders.service import Embedders
from host.service.settings import Settings
from host.web.app import create_app

EMBED = WordEmbedder()
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def call(client: TestClient, tool: str, **arguments: Any) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    response = client.post("/mcp", content=json.dumps(message), headers=HEADERS)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_with_several_models_search_asks_for_a_library(tmp_path: Path) -> None:
    folder = tmp_path / "libraries"
    texts = ["jonah and the fish", "noah and the ark"]
    write_library(folder / "stories.json", {"version": 1, "embedding_model": EMBED.model, "bits": [
        {"text": text, "embedding": b64(EMBED.embed([text])[0]), "token_count": 4,
         "info": {"url": f"https://example.com/{number}"}} for number, text in enumerate(texts)]})
    write_library(folder / "other.json", {"version": 1, "embedding_model": "test:other-4", "bits": [
        {"text": "elsewhere", "embedding": b64([1, 0, 0, 0]), "token_count": 1, "info": {"url": "https://o.example/"}}]})
    app = create_app(Settings(libraries=folder, watch_interval=0), embedders=Embedders([EMBED]))

    with TestClient(app) as client:
        unnamed = call(client, "search", query="fish")
        named = call(client, "search", query="fish", library="stories", count=1, count_type="bit")
        listed = call(client, "libraries")

    assert unnamed["isError"] and unnamed["content"][0]["text"].endswith(
        "this host serves libraries of several embedding models: name a library (the libraries tool lists them)")
    assert [bit["text"] for bit in named["structuredContent"]["bits"]] == ["jonah and the fish"]
    assert named["content"][0]["text"] == "[1] https://example.com/0\nSource: https://example.com/0\n\njonah and the fish\n"
    assert [entry["name"] for entry in listed["structuredContent"]["libraries"]] == ["other", "stories"]
    assert listed["content"][0]["text"] == "other: 1 bits (test:other-4)\nstories: 2 bits (test:unit-8)"
