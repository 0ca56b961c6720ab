"""A replica's local copy of published blobs, each kept only once its size and SHA-256 check out.

A blob is downloaded to a temporary file beside the store, hashed as it arrives, checked against
the size and SHA-256 its manifest names, then renamed to `<folder>/<sha256>`: a name in the store is always whole and
right. Several processes may fill one store at once: each downloads to its own temporary file,
and renaming the same verified bytes over the same name twice changes nothing. A truncated,
padded or altered transfer is refused (OriginUnreachable: the next poll tries again).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

from host.origin.base import Origin, OriginUnreachable, Progress
from host.origin.manifest import Blob

HASH_BLOCK = 1 << 20


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


class HashingSink:
    """A file that hashes and counts what is written to it (in order: it cannot seek), and refuses
    more than `limit` bytes: an origin sending without end never fills the disk."""

    def __init__(self, file: BinaryIO, limit: int, where: str) -> None:
        self.file = file
        self.limit = limit
        self.where = where
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise OriginUnreachable(f"{self.where}: more than the {self.limit:,} bytes the manifest says: a padded transfer")
        self.digest.update(data)
        return self.file.write(data)


class BlobStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, blob: Blob) -> Path:
        return self.folder / blob.sha256

    def has(self, blob: Blob) -> bool:
        """Present with the right size (its contents were checked before it got its name)."""
        try:
            return self.path(blob).stat().st_size == blob.size
        except OSError:
            return False

    def fetch(self, origin: Origin, blob: Blob, progress: Progress | None = None) -> Path:
        """The blob's path in the store, downloading and checking it first if it is not there."""
        if self.has(blob):
            return self.path(blob)
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=".download.", dir=self.folder)
        os.close(handle)
        temporary = Path(name)
        try:
            with temporary.open("wb") as file:
                sink = HashingSink(file, blob.size, f"{origin.url}/{blob.key}")
                origin.download(blob.key, sink, progress)
            if sink.size != blob.size:
                raise OriginUnreachable(f"{origin.url}/{blob.key}: {sink.size:,} bytes arrived, the manifest says "
                                        f"{blob.size:,}: a cut or padded transfer")
            if sink.digest.hexdigest() != blob.sha256:
                raise OriginUnreachable(f"{origin.url}/{blob.key}: its SHA-256 is not the manifest's: a corrupt transfer")
            os.chmod(temporary, 0o444)  # hard links share it: nothing may write into a blob
            os.replace(temporary, self.path(blob))
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink()
        return self.path(blob)

    def keep_only(self, wanted: set[str]) -> int:
        """Delete blobs whose digest is not in `wanted` (and stray downloads); how many went."""
        removed = 0
        with contextlib.suppress(FileNotFoundError):
            for entry in self.folder.iterdir():
                if entry.name not in wanted and not entry.name.startswith(".download."):
                    with contextlib.suppress(OSError):
                        entry.unlink()
                        removed += 1
        return removed
