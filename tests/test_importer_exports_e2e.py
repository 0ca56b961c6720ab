"""Each writer's export, end to end: `python -m host import` with the real local model, a real host
serving the libraries, and a sentence of each export asked for in words finds its bit in the top 3.

The five imports run as five processes at once (the command as a writer runs it, one line of
docs/importing.md each); one host serves all five libraries. Needs the `embed` extra (part of
`test`): skipped without it, except in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
from components import PROJECT
from embedder_fixtures import require_local_embedder
from export_support import BASE_URLS, EXPORTS, FOUND, build_export


def test_each_export_imported_by_the_command_is_found_by_a_sentence_of_it(tmp_path, run_host):
    require_local_embedder()
    libraries = tmp_path / "libraries"
    environment = {**os.environ, "PYTHONPATH": str(PROJECT)}
    running = {}
    for name in EXPORTS:
        export = build_export(name, tmp_path / "downloads")
        base = ["--base-url", BASE_URLS[name]] if name in BASE_URLS else []
        command = [sys.executable, "-m", "host", "import", str(export), "--out", str(libraries / f"{name}.json"),
                   "--embedder-concurrency", "1", "--quiet", *base]
        running[name] = subprocess.Popen(command, cwd=tmp_path, env=environment, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
    for name, process in running.items():
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, (name, err)
        assert f"wrote {libraries / name}.json: " in err, err
        library = json.loads((libraries / f"{name}.json").read_text())
        assert library["embedding_model"] == "sentence-transformers:all-MiniLM-L6-v2"

    host = run_host(libraries, embedder=True, timeout=120)
    for name, (sentence, url) in FOUND.items():
        answer = httpx.post(f"{host.url}/", json={"query": sentence, "count": 3, "count_type": "bit"}, timeout=60)
        assert answer.status_code == 200, answer.text
        top = [(bit["info"]["url"], bit["text"]) for bit in answer.json()["bits"]]
        assert any(found == url and sentence in text for found, text in top), (name, top)
