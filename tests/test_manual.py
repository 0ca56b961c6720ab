"""The manual (docs/, mkdocs.yml) and the README hold to what they promise.

- The site builds with `mkdocs build --strict` (a broken link or anchor, a missing page, a page
  outside the nav all fail), and every page of docs/ is in the nav.
- Its references show everything there is: every command and option of the parsers, every
  operation of the host's OpenAPI document, every field the access file's loader knows; and every
  route the app answers is in that document. A flag or an endpoint added without a word in the
  manual fails here.
- The README stays a front page: at most 200 lines, the two commands exactly as they have always
  been, its links resolving, and no command in it that the manual does not also show.
- The host links to the manual from `--help` and from the page's footer, at the address mkdocs.yml
  says the site lives.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import yaml
from librarian import make_library, unit_vectors, write_library
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from host import MANUAL_URL
from host.cli import build_parser
from host.embedders.service import Embedders
from host.service.settings import Settings
from host.web.app import create_app
from host.web.dialects.openai_vector_stores import REFUSED
from host.web.openapi import OPENAPI

PROJECT = Path(__file__).resolve().parents[1]
DOCS = PROJECT / "docs"
README = PROJECT / "README.md"
sys.path.insert(0, str(PROJECT / "scripts"))

from manual import reference  # noqa: E402

THE_TWO_COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[embed,mcp]' && .venv/bin/polymath-host serve",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest",
)
# The page's own assets: part of the page (GET /), not an endpoint of their own. Routes named REFUSED
# only answer 405 to OpenAI's write operations (the OpenAI chapter says so): not operations of the host.
UNDOCUMENTED_MOUNTS = ("/static",)


def mkdocs_config() -> dict[str, Any]:
    return yaml.safe_load((PROJECT / "mkdocs.yml").read_text())


def nav_pages(nav: Any) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
                           cwd=PROJECT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return folder


def page_text(site: Path, page: str) -> str:
    """A built page's text: tags dropped, entities read, runs of white space one space."""
    html = (site / page / "index.html").read_text()
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


# ---- the site ------------------------------------------------------------------------------------------


def test_every_page_of_the_manual_is_in_its_navigation() -> None:
    listed = set(nav_pages(mkdocs_config()["nav"]))
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert pages - listed == set(), "pages no one can reach from the navigation"
    assert listed - pages == set(), "the navigation names pages that do not exist"


def test_the_site_builds_strictly_with_every_chapter(site: Path) -> None:
    for page in ("getting-started", "asking", "page", "importing", "access", "doors", "production",
                 "several-hosts", "performance", "quality", "security", "architecture"):
        assert (site / page / "index.html").is_file(), page
    assert (site / "reference" / "openapi.json").is_file()


def test_the_command_line_reference_shows_every_command_and_option(site: Path) -> None:
    shown = page_text(site, "reference/cli")
    for name, command, _aliases in reference.commands(build_parser()):
        assert f"{name}" in shown, name
        for action in reference.options(command):
            for option in action.option_strings or [action.metavar or action.dest.upper()]:
                assert option in shown, f"{name}: {option} is not in the command-line reference"
            if action.help:
                first_words = " ".join(action.help.replace("`", "").split()[:4]).split("%")[0]
                assert first_words in shown, f"{name} {action.option_strings}: its help"


def test_the_http_reference_shows_every_operation_of_the_document(site: Path) -> None:
    shown = page_text(site, "reference/http")
    for path, method, operation in reference.operations(OPENAPI):
        assert f"{method.upper()} {path}" in shown, f"{method.upper()} {path} is not in the HTTP reference"
        for status in operation["responses"]:
            assert status in shown
    frames = list((site / "reference" / "http").glob("swagger-*.html"))  # Swagger UI, from the plugin's own files
    assert frames and "openapi.json" in frames[0].read_text()
    assert (site / "assets" / "javascripts" / "swagger-ui-bundle.js").is_file()


def test_the_access_file_reference_shows_every_field_its_loader_knows(site: Path) -> None:
    from access import config

    shown = page_text(site, "reference/access-file")
    for field in (*config.TOP_LEVEL_FIELDS, *config._RESTRICTED_FIELDS, *config._LEGACY_TOKEN_FIELDS,
                  *config._ISSUED_FIELDS):
        assert f"{field}" in shown
    assert "must be" in shown and "(every value tried was accepted)" not in shown


def _routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for route in routes:
        if isinstance(route, Mount):
            if prefix + route.path in UNDOCUMENTED_MOUNTS:
                continue
            yield from _routes(list(route.routes), prefix + route.path)
        elif isinstance(route, Route) and route.name != REFUSED:
            for method in route.methods or ():
                if method != "HEAD":
                    yield method.lower(), prefix + route.path_format


def _documented(method: str, concrete: str) -> bool:
    for path, documented_method, _operation in reference.operations(OPENAPI):
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path))
        if documented_method == method and re.fullmatch(pattern, concrete):
            return True
    return False


def test_every_route_the_app_answers_is_in_the_openapi_document(tmp_path: Path) -> None:
    write_library(tmp_path / "libraries" / "one.json", make_library(unit_vectors(3)))
    app = create_app(Settings(libraries=tmp_path / "libraries", cache_dir=tmp_path / "compiled", watch_interval=0),
                     embedders=Embedders([]))
    missing = []
    for method, path in _routes(list(app.routes)):
        # Each path parameter as a value that fits every documented form ("{name}.json", "{id}").
        concrete = re.sub(r"\{[^}]+\}", "a.json", path)
        if not _documented(method, concrete):
            missing.append(f"{method.upper()} {path}")
    assert missing == [], "routes the OpenAPI document (and so the manual) does not show"


# ---- the README ----------------------------------------------------------------------------------------


def test_the_readme_is_a_front_page_of_at_most_200_lines_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    for command in THE_TWO_COMMANDS:
        assert f"```sh\n{command}\n```" in text


def test_every_link_of_the_readme_resolves() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if not target.startswith(("http://", "https://")):
            assert (PROJECT / target).exists(), target


def test_the_readme_links_every_chapter_of_the_manual() -> None:
    linked = set(re.findall(r"\]\(docs/([^)#]+)", README.read_text()))
    chapters = {page for page in nav_pages(mkdocs_config()["nav"]) if page != "index.md"}
    assert chapters - linked == set()


def test_every_command_of_the_readme_is_in_the_manual_too() -> None:
    manual = "\n".join(path.read_text() for path in DOCS.rglob("*.md"))
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL)
    for line in "\n".join(blocks).splitlines():
        assert line.strip() in manual, f"the README says {line!r}, the manual does not"


# ---- the host links to its manual -------------------------------------------------------------------


def test_the_manual_lives_where_mkdocs_publishes_it() -> None:
    assert mkdocs_config()["site_url"] == MANUAL_URL


def test_help_links_to_the_manual() -> None:
    assert f"The manual: {MANUAL_URL}" in build_parser().format_help()


def test_the_page_footer_links_to_the_manual(tmp_path: Path) -> None:
    write_library(tmp_path / "libraries" / "one.json", make_library(unit_vectors(3)))
    app = create_app(Settings(libraries=tmp_path / "libraries", cache_dir=tmp_path / "compiled", watch_interval=0),
                     embedders=Embedders([]))
    page = TestClient(app).get("/").text
    footer = page[page.index("<footer"):]
    assert f'<a href="{MANUAL_URL}">The manual</a>' in footer
