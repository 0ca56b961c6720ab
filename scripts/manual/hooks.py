"""mkdocs hooks (mkdocs.yml `hooks:`): the references written into their pages at build time.

A page holds a marker line, `<!-- reference: cli -->`, `<!-- reference: http -->` or
`<!-- reference: access-file -->`, and the build replaces it with what `reference.py` renders from
the code itself, so the manual never describes a flag or an endpoint from memory. The host's
OpenAPI document is also written into the site as `reference/openapi.json`, for Swagger UI.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, where `manual` lives

from host.cli import build_parser
from host.web.openapi import OPENAPI
from manual import reference

MARKERS: dict[str, Callable[[], str]] = {
    "<!-- reference: cli -->": lambda: reference.cli_reference(build_parser()),
    "<!-- reference: http -->": lambda: reference.http_reference(OPENAPI),
    "<!-- reference: access-file -->": reference.access_file_reference,
}
OPENAPI_FILE = "reference/openapi.json"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, OPENAPI_FILE, content=json.dumps(OPENAPI, indent=2)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown
