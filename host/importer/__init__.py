"""`polymath-host import`: a publisher's writing (Markdown, text, HTML, feeds, PDF) into a library file.

The flow is one way: `sources` finds files, `readers` turn each into `Document`s (title, URL,
description, sections of plain-text blocks under a heading path), `chunking` cuts sections into
chunks of at most `--chunk-tokens` tokens of the embedder's own tokenizer, `pipeline` embeds what
the `cache` does not already hold and `output` writes the library atomically after validating it.
`cli` is the command-line edge; `import_library` in `pipeline` is the whole job, given an embedder.
"""

from host.importer.pipeline import ImportOptions, import_library
from host.importer.report import ImportReport

__all__ = ["ImportOptions", "ImportReport", "import_library"]
