"""The importer's one error type, and the check that names the extra (`import`, `ocr`) when a library is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from host.importer.document import Document

EXTRA_HINT = "pip install 'polymath-host[import]'"


def extra_hint(extra: str) -> str:
    return f"pip install 'polymath-host[{extra}]'"


class ImporterError(Exception):
    """A problem the publisher can fix; its message is one line and names the file or option."""


class MissingExtra(ImporterError):
    """A library of an extra (or a program it runs) is not installed: every file of that kind would fail, so stop."""


def require(module: str, purpose: str, extra: str = "import") -> ModuleType:
    """Import a module of the `import` extra (or of `extra`), or say in one line how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(
            f"{purpose} needs {module.split('.')[0]}, part of the `{extra}` extra: {extra_hint(extra)}"
        ) from None


class Draft(Exception):
    """A page its author marked unpublished (`draft: true`, `published: false`): skipped and counted,
    or imported all the same with `--include-drafts` (the reader hands its documents over here)."""

    def __init__(self, documents: list[Document] | None = None) -> None:
        super().__init__("a draft")
        self.documents = documents or []


def decode_text(data: bytes) -> str:
    """UTF-8 text (a byte-order mark is dropped), or an ImporterError saying where it is not."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as problem:
        raise ImporterError(f"not UTF-8 text (byte {problem.start:,} is {data[problem.start]:#04x})") from None
