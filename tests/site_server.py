"""A static site server for the website importer's tests: `http.server`'s own handler and what it lacks.

Run as a real child process: `python tests/site_server.py FOLDER PORT CONFIG.json`. It serves
FOLDER exactly as `python -m http.server` does (SimpleHTTPRequestHandler: Last-Modified, 304 on
If-Modified-Since, 301 from a folder to its slash, 404), logs each request the same way, and adds
from CONFIG (read again at each request, so a test can change it while the server runs):
- "redirects": {"/old.html": "http://elsewhere/new.html"}: a 301 to that Location.
- "etags": true: files are answered with an ETag (their size and modification time in ns), and a
  matching If-None-Match is a 304 (http.server itself knows only If-Modified-Since).
- "charset": "utf-8": HTML is answered as `text/html; charset=utf-8` (http.server names no charset).
- "gate": {"path": "/page.html", "file": "/tmp/open"}: a request for that path is answered only
  once that file exists: a test holds a crawl at a known page, deterministically.
- "failing": {"/page.html": N}: the first N requests for that path are answered 503 (with
  `Retry-After: 0`), the later ones as usual; -1: always.
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class SiteHandler(SimpleHTTPRequestHandler):
    config_path: Path
    failures: dict[str, int] = {}  # noqa: RUF012 - the server's count of 503s by path, shared by its threads

    def config(self) -> dict[str, Any]:
        return dict(json.loads(self.config_path.read_text()))

    def do_GET(self) -> None:
        config = self.config()
        path = self.path.split("?", 1)[0]
        gate = config.get("gate")
        if gate and path == gate["path"]:
            while not Path(gate["file"]).exists():
                time.sleep(0.02)
        failing = config.get("failing", {}).get(path, 0)
        if failing and (failing < 0 or self.failures.get(path, 0) < failing):
            self.failures[path] = self.failures.get(path, 0) + 1
            self.send_response(503)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path in config.get("redirects", {}):
            self.send_response(301)
            self.send_header("Location", config["redirects"][path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if config.get("etags"):
            file = Path(self.translate_path(self.path))
            if file.is_file():
                tag = f'"{file.stat().st_size}-{file.stat().st_mtime_ns}"'
                if self.headers.get("If-None-Match") == tag:
                    self.send_response(304)
                    self.send_header("ETag", tag)
                    self.end_headers()
                    return
                self._etag = tag
        super().do_GET()

    def end_headers(self) -> None:
        tag = getattr(self, "_etag", None)
        if tag:
            self.send_header("ETag", tag)
            self._etag = None
        super().end_headers()

    def guess_type(self, path: str | os.PathLike[str]) -> str:
        guessed = super().guess_type(path)
        charset = self.config().get("charset")
        return f"{guessed}; charset={charset}" if charset and guessed == "text/html" else guessed


def main() -> None:
    folder, port, config = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    SiteHandler.config_path = config
    handler = partial(SiteHandler, directory=folder)
    with ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        server.daemon_threads = True
        print(f"Serving HTTP on 127.0.0.1 port {port}", file=sys.stderr, flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
