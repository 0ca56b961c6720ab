"""A local folder as an origin (`publish SRC /srv/published`, `serve --libraries file:///srv/published`).

Writes go to a temporary file in the target's folder, are synced, then renamed over the target, so
a reader (a replica, a static web server in front of the folder) sees the old object or the whole
new one. The ETag is the file's inode, size and mtime: a replaced object always gets a new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from host.origin.base import (
    Fetched,
    Listed,
    ObjectMissing,
    Origin,
    OriginRefused,
    OriginUnreachable,
    Progress,
    Sink,
)

COPY_BLOCK = 1 << 20


class FolderOrigin(Origin):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.resolve().as_uri()

    @classmethod
    def from_url(cls, url: str) -> FolderOrigin:
        parsed = urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            raise OriginRefused(f"{url}: a file:// URL names a folder of this machine (file:///path)")
        return cls(Path(unquote(parsed.path)))

    def _path(self, key: str) -> Path:
        return self.root / key

    def fetch(self, key: str, *, etag: str | None = None, limit: int) -> Fetched | None:
        path = self._path(key)
        try:
            with path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                tag = f"{stat.st_ino}-{stat.st_size}-{stat.st_mtime_ns}"
                if etag == tag:
                    return None
                if stat.st_size > limit:
                    raise OriginUnreachable(f"{self.url}/{key}: {stat.st_size:,} bytes, over the {limit:,} expected")
                return Fetched(handle.read(), tag)
        except FileNotFoundError:
            raise self._missing(key) from None
        except OSError as problem:
            raise OriginUnreachable(f"{self.url}/{key}: cannot be read ({problem.strerror})") from None

    def download(self, key: str, sink: Sink, progress: Progress | None = None) -> None:
        try:
            with self._path(key).open("rb") as source:
                for block in iter(lambda: source.read(COPY_BLOCK), b""):
                    sink.write(block)
                    if progress:
                        progress(len(block))
        except FileNotFoundError:
            raise self._missing(key) from None
        except OSError as problem:
            raise OriginUnreachable(f"{self.url}/{key}: cannot be copied ({problem.strerror})") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def upload(self, key: str, source: Path, progress: Progress | None = None) -> None:
        def copy(target: Path) -> None:
            with source.open("rb") as reading, target.open("wb") as writing:
                for block in iter(lambda: reading.read(COPY_BLOCK), b""):
                    writing.write(block)
                    if progress:
                        progress(len(block))
        self._replace(key, copy)

    def put(self, key: str, body: bytes) -> None:
        self._replace(key, lambda target: target.write_bytes(body))

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Files under the folder whose key starts with `prefix`; hidden ones (a write in progress) left out."""
        folder, _, _ = prefix.rpartition("/")
        top = self.root / folder
        for directory, subfolders, names in os.walk(top):
            subfolders[:] = [name for name in subfolders if not name.startswith(".")]
            for name in names:
                path = Path(directory) / name
                key = path.relative_to(self.root).as_posix()
                if name.startswith(".") or not key.startswith(prefix):
                    continue
                with contextlib.suppress(FileNotFoundError):  # deleted while we looked
                    stat = path.stat()
                    yield Listed(key, stat.st_size, stat.st_mtime)

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                self._path(key).unlink()
            except FileNotFoundError:
                continue
            except OSError as problem:
                raise OriginRefused(f"{self.url}/{key}: cannot be deleted ({problem.strerror})") from None

    def _replace(self, key: str, write: Callable[[Path], object]) -> None:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(handle)
        except OSError as problem:
            raise OriginRefused(f"{self.url}/{key}: cannot be written ({problem.strerror})") from None
        try:
            write(Path(temporary))
            with open(temporary, "rb+") as written:
                os.fsync(written.fileno())
            os.chmod(temporary, 0o644)  # a static web server in front of the folder must read it
            os.replace(temporary, target)
        except OSError as problem:
            raise OriginRefused(f"{self.url}/{key}: cannot be written ({problem.strerror})") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)

    def _missing(self, key: str) -> ObjectMissing:
        return ObjectMissing(f"{self.url}/{key}: no such object")
