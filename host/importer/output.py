"""Write a library file so that readers only ever see the old file or the new, validated one.

The new file is written beside the old one under a hidden temporary name (the host skips hidden
files, so a watcher never loads it half-written), flushed to disk, read back and validated with the
host's own checks (`check_library`, with the folder's access tag), and only then renamed over the
old file. Any failure or Ctrl-C before the rename removes the temporary file and leaves the old
output exactly as it was. The new file keeps the old one's permissions (a new one gets the usual
umask's), since the host must be able to read it.

The JSON has one bit per line, so a library kept in git shows a changed post as changed lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from host.importer.errors import ImporterError
from host.library.format import check_library
from host.library.json_text import parse_json


def render_library(library: dict[str, Any]) -> str:
    """Compact JSON with each bit on a line of its own."""
    head = {key: value for key, value in library.items() if key != "bits"}
    bits = ",\n".join(json.dumps(bit, ensure_ascii=False, separators=(",", ":")) for bit in library["bits"])
    rendered_head = json.dumps(head, ensure_ascii=False, separators=(",", ":"))
    return f'{rendered_head[:-1]},"bits":[\n{bits}\n]}}\n' if head else f'{{"bits":[\n{bits}\n]}}\n'


def write_library(library: dict[str, Any], out: Path, access_tag: str | None) -> None:
    """Validate and atomically replace `out`; raises ImporterError (old file untouched) if invalid."""
    out.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    temporary = Path(temporary_name)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(render_library(library))
            handle.flush()
            os.fsync(handle.fileno())
        _, problems = check_library(parse_json(temporary.read_text(encoding="utf-8")), access_tag=access_tag)
        if problems:
            raise ImporterError(f"the library made would not be valid ({problems[0]}); {out} is left as it was")
        os.chmod(temporary, _mode_for(out))
        os.replace(temporary, out)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_folder(out.parent)


def _mode_for(out: Path) -> int:
    try:
        return stat.S_IMODE(out.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (where the platform allows opening a folder)."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
