"""The one interface every origin offers, and the three ways a request to one can fail.

Keys are relative, `/`-separated names (`manifest.json`, `objects/sha256/<hex>`); an origin maps
them onto its own namespace (a folder, a bucket's prefix, a base URL). Errors are one line that
names the origin and the key, never a credential, and say which kind of trouble it is:

- `OriginUnreachable`: the network, a timeout, a 5xx, a corrupt transfer. It may pass: try again.
- `OriginRefused`: credentials missing or refused, a bucket that does not exist, a read-only
  origin asked to write. An operator must act.
- `ObjectMissing`: the origin answered, and the key is not there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

URL_SCHEMES = ("s3://", "https://", "http://", "file://")


def is_origin_url(text: str) -> bool:
    """Whether `--libraries`/`--access` names an origin (a URL) rather than a local path."""
    return text.lower().startswith(URL_SCHEMES)


class OriginError(Exception):
    """Something went wrong talking to an origin; the message is one line, safe to log."""


class OriginUnreachable(OriginError):
    """Down, slow, failing (5xx) or sending bytes that do not check out: it may pass."""


class OriginRefused(OriginError):
    """Credentials, permissions, a missing bucket, an origin that cannot do this: an operator must act."""


class ObjectMissing(OriginError):
    """The origin answered: there is no object under this key."""


@dataclass(frozen=True)
class Fetched:
    body: bytes
    etag: str | None  # what to send next time to hear "not modified"; None when the origin gives none


@dataclass(frozen=True)
class Listed:
    """An object found by `list_objects`: what `publish --prune` weighs before deleting it."""

    key: str  # relative to the origin, as every other key
    size: int
    modified: float  # seconds since the epoch, as the origin's clock saw its last write


Progress = Callable[[int], object]  # called with bytes moved since the last call


class Sink(Protocol):
    """Where a download goes: written to in order, from the first byte to the last."""

    def write(self, data: bytes, /) -> object: ...


class Origin(ABC):
    """A place holding published objects under keys."""

    url: str  # how logs and errors name it: never holds a credential

    @abstractmethod
    def fetch(self, key: str, *, etag: str | None = None, limit: int) -> Fetched | None:
        """The object's bytes, or None when it is unchanged since `etag`. An object over `limit`
        bytes is refused (OriginUnreachable): a small object that grew without bound is not read."""

    @abstractmethod
    def download(self, key: str, sink: Sink, progress: Progress | None = None) -> None:
        """Write the object to `sink`, in order (the caller checks what arrived as it arrives)."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object is stored under `key`."""

    @abstractmethod
    def upload(self, key: str, source: Path, progress: Progress | None = None) -> None:
        """Store the file `source` under `key`; readers see the old object or the whole new one."""

    @abstractmethod
    def put(self, key: str, body: bytes) -> None:
        """Store `body` under `key`; readers see the old object or the whole new one."""

    @abstractmethod
    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Every object whose key starts with `prefix` (`objects/`), in no particular order."""

    @abstractmethod
    def delete(self, keys: Sequence[str]) -> None:
        """Remove these objects; one already gone is not an error."""

    def __str__(self) -> str:
        return self.url
