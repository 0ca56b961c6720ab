"""Real web sites on 127.0.0.1 for the website importer's tests, and a site of known pages to serve.

`serving(folder)` runs `python -m http.server` on the folder in a child process; `serving(folder,
config={...})` runs `tests/site_server.py` instead, http.server's handler with what it lacks
(off-site redirects, ETags, a declared charset, a gate that holds one page: see that module).
Either way each request is logged by http.server, and `Site.requests()` reads the log back as
(path, status) pairs, so a test sees what the crawler asked for and what it was answered.

`write_site(folder, origin)` writes a small blog whose every page has one fact no other page
has: a sitemap index of two sitemaps (and one on another origin), a robots.txt forbidding `/private/`, a link to `/posts`
(which http.server itself redirects, 301, to `/posts/`), a page that is not there (404), a
picture, and a page linking off the site.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.service.harness import free_port

SITE_SERVER = Path(__file__).with_name("site_server.py")
_LOGGED = re.compile(r'"(\w+) (\S+) HTTP/[\d.]+" (\d{3})')

FACTS = {
    "/": "The harbour blog is written by a lighthouse keeper named Ingrid.",
    "/about.html": "Ingrid has kept the Skerry Point light for thirty-one winters.",
    "/posts/": "Every post in this log is about the sea and its weather.",
    "/posts/barnacles.html": "The spring census counted four hundred barnacles on the north pier.",
    "/posts/foghorn.html": "The foghorn sounded seventeen times during the March gale.",
    "/posts/moonfish.html": "A silver moonfish the size of a cartwheel drifted past the jetty.",
}
PRIVATE_FACT = "The key to the lamp room hangs behind the barometer."
NEW_FACT = "Puffins returned to the cliffs on the ninth of April this year."
FILLER = ("The keeper writes in the evening, when the lamp is lit and the kettle is warm. Notes about wind, "
          "tide and the passing ships fill most pages of the log, one day after another.")


@dataclass
class Site:
    url: str  # http://127.0.0.1:PORT (no trailing slash)
    folder: Path
    log: Path
    process: subprocess.Popen[bytes]
    config: Path | None = None

    def requests(self) -> list[tuple[str, int]]:
        """Every request the server has logged so far: (path, status), in order."""
        return [(match[2], int(match[3])) for match in _LOGGED.finditer(self.log.read_text(errors="replace"))]

    def requested(self, path: str) -> list[int]:
        """The statuses of the requests for `path`."""
        return [status for logged, status in self.requests() if logged == path]

    def wait_for_request(self, path: str, client: subprocess.Popen[str], timeout: float = 120.0) -> None:
        """Until the server has answered a request for `path` (or the client exits: an AssertionError)."""
        deadline = time.monotonic() + timeout
        while not self.requested(path):
            assert client.poll() is None, f"the client exited ({client.returncode}) before asking for {path}"
            assert time.monotonic() < deadline, f"no request for {path} in {timeout:g} s: {self.requests()}"
            time.sleep(0.02)


@contextlib.contextmanager
def serving(folder: Path, *, port: int | None = None, config: dict[str, Any] | None = None) -> Iterator[Site]:
    """`folder` served on 127.0.0.1 by a real server process, until the block ends."""
    port = port or free_port()
    log = folder.parent / f"{folder.name}-{port}.log"
    config_path = None
    if config is None:
        command = [sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                   str(folder)]
    else:
        config_path = folder.parent / f"{folder.name}-{port}.json"
        config_path.write_text(json.dumps(config))
        command = [sys.executable, "-u", str(SITE_SERVER), str(folder), str(port), str(config_path)]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, process, log)
        yield Site(f"http://127.0.0.1:{port}", folder, log, process, config_path)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until the server accepts a connection (a connection without a request logs nothing)."""
    for _ in range(500):
        if process.poll() is not None:
            raise RuntimeError(f"the site server exited: {log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.02)
    raise RuntimeError(f"the site server never listened on {port}: {log.read_text()}")


def page(title: str, fact: str, links: str = "", head: str = "") -> str:
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title} | Harbour Log</title>{head}</head>\n"
            f"<body><nav><a href=\"/\">Home</a> <a href=\"/about.html\">About</a></nav>\n"
            f"<main><h1>{title}</h1>\n<p>{fact}</p>\n<p>{FILLER}</p>\n{links}\n</main>\n"
            f"<footer>Harbour Log</footer></body></html>\n")


def urlset(origin: str, paths: list[str]) -> str:
    entries = "".join(f"  <url><loc>{path if '://' in path else origin + path}</loc></url>\n" for path in paths)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{entries}</urlset>\n')


def sitemap_index(origin: str, paths: list[str], elsewhere: tuple[str, ...] | list[str] = ()) -> str:
    entries = "".join(f"  <sitemap><loc>{location}</loc></sitemap>\n"
                      for location in [*(origin + path for path in paths), *elsewhere])
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{entries}</sitemapindex>\n')


def write_site(folder: Path, origin: str, *, sitemap: bool = True) -> Path:
    """The Harbour Log (see the module's docstring); `sitemap=False` leaves the sitemaps out (links are followed)."""
    (folder / "posts").mkdir(parents=True, exist_ok=True)
    (folder / "private").mkdir(exist_ok=True)
    home_links = ('<p><a href="/posts">All posts</a> · <a href="about.html#ingrid">About Ingrid</a> · '
                  '<a href="/private/keys.html">Keys</a> · <a href="/posts/lost.html">A lost post</a> · '
                  '<a href="/images/lamp.png">The lamp</a> · <a href="mailto:ingrid@example.com">Write</a></p>')
    (folder / "index.html").write_text(page("Harbour Log", FACTS["/"], home_links))
    (folder / "about.html").write_text(page("About", FACTS["/about.html"], '<h2 id="ingrid">Ingrid</h2><p>Hello.</p>'))
    posts_links = "".join(f'<li><a href="{name}.html">{name.title()}</a></li>' for name in ("barnacles", "foghorn"))
    (folder / "posts" / "index.html").write_text(page("Posts", FACTS["/posts/"], f"<ul>{posts_links}</ul>"))
    (folder / "posts" / "barnacles.html").write_text(page("Barnacles", FACTS["/posts/barnacles.html"],
                                                          '<a href="moonfish.html">Next</a>'))
    (folder / "posts" / "foghorn.html").write_text(page(
        "Foghorn", FACTS["/posts/foghorn.html"],
        '<p>See <a href="https://weather.example.org/gales">the gale report</a> and '
        f'<a href="{origin.replace("127.0.0.1", "localhost")}/elsewhere.html">a mirror</a>.</p>'))
    (folder / "posts" / "moonfish.html").write_text(page("Moonfish", FACTS["/posts/moonfish.html"],
                                                         '<a href="barnacles.html#census">Back</a>'))
    (folder / "private" / "keys.html").write_text(page("Keys", PRIVATE_FACT))
    (folder / "elsewhere.html").write_text(page("Elsewhere", "This page is only reached from another origin."))
    robots = "User-agent: *\nDisallow: /private/\n"
    if sitemap:
        robots += f"\nSitemap: {origin}/sitemap_index.xml\n"
        (folder / "sitemaps").mkdir(exist_ok=True)
        elsewhere = origin.replace("127.0.0.1", "localhost")  # this very server, but another origin
        (folder / "sitemap_index.xml").write_text(sitemap_index(origin, ["/sitemaps/pages.xml", "/sitemaps/posts.xml"],
                                                                [f"{elsewhere}/sitemaps/other.xml"]))
        (folder / "sitemaps" / "pages.xml").write_text(urlset(origin, ["/", "/about.html", "/private/keys.html"]))
        (folder / "sitemaps" / "posts.xml").write_text(urlset(origin, [
            "/posts", "/posts/barnacles.html", "/posts/foghorn.html", "/posts/moonfish.html", "/posts/lost.html",
            "/images/lamp.png", "https://weather.example.org/gales"]))
    (folder / "robots.txt").write_text(robots)
    return folder


def touch_later(path: Path, seconds: float = 5.0) -> None:
    """Give a changed file a modification time clearly after its last one (Last-Modified is in whole seconds)."""
    later = time.time() + seconds
    os.utime(path, (later, later))
