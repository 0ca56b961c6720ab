"""A disk cache of ONNX graphs built at load, so later processes skip the build (~3x faster load).

Each graph is stored as `<name>` with its SHA-256 in `<name>.sha256` beside it. A file is used
only when its bytes hash to the recorded value, so a torn write or a damaged file is rebuilt,
never run. Writes go to a temporary name and are renamed into place, so processes that build at
the same time never see half a file. A cache that cannot be written is not an error: the caller
builds in memory instead (one warning).

Default place: $POLYMATH_HOST_CACHE_DIR, else $XDG_CACHE_HOME/polymath-host, else
~/.cache/polymath-host.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("host.embedders")
CACHE_VARIABLE = "POLYMATH_HOST_CACHE_DIR"


def default_cache_dir() -> Path:
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "polymath-host"


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class GraphCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def find(self, name: str) -> Path | None:
        """The cached file `name`, if present and intact."""
        path, record = self.directory / name, self.directory / f"{name}.sha256"
        try:
            recorded = record.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        try:
            intact = _sha256_of(path) == recorded
        except OSError:
            return None
        if not intact:
            log.warning("cached graph %s does not match its recorded SHA-256: building it again", path)
            return None
        return path

    def store(self, name: str, data: bytes) -> Path | None:
        """Write `data` as `name` (atomically, with its SHA-256 beside it); None if the cache
        cannot be written."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            _write_atomically(self.directory / name, data)
            _write_atomically(self.directory / f"{name}.sha256", hashlib.sha256(data).hexdigest().encode())
        except OSError as error:
            log.warning("cannot cache the embedder's graph in %s (%s): it is rebuilt at every load",
                        self.directory, error.strerror or error)
            return None
        return self.directory / name


def _write_atomically(path: Path, content: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as file:
        temporary = Path(file.name)
        try:
            file.write(content)
        except OSError:
            file.close()
            temporary.unlink(missing_ok=True)
            raise
    os.replace(temporary, path)
