"""Writing `access.SECRET.json` safely: atomically, mode 0600, one writer at a time.

Only the admin CLI writes the file; the host only reads it. A write goes to a temporary
file in the same directory, is fsynced, renamed over the old file with os.replace and the
directory is fsynced, so a reader (or a crash) sees either the old file or the new one,
never half of one. The temporary file is created 0600, so the secret is never readable by
others, not even for a moment.

Edits (issue, revoke, rotate) read, change and write the file under an exclusive flock on
the file itself, so two admins issuing tokens at once cannot lose each other's changes (a
lost revocation would be a security bug).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .config import parse_settings, read_json_object
from .errors import AccessConfigError

try:
    import fcntl
except ImportError:  # not POSIX: no locking, the rename is still atomic
    fcntl = None  # type: ignore[assignment]

FILE_MODE = 0o600


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    """Validate ``data`` as access settings, then replace ``path`` with it (mode 0600)."""
    parse_settings(data, str(path))  # never write a file the host would refuse
    text = render(data)
    directory = path.parent if str(path.parent) else Path(".")
    # The temporary name keeps ".SECRET." so nothing ever mistakes it for a library.
    fd, temp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as temp:
            if hasattr(os, "fchmod"):  # mkstemp already uses 0600; say so explicitly anyway
                os.fchmod(temp.fileno(), FILE_MODE)
            temp.write(text)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    _fsync_directory(directory)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[str]:
    """Hold an exclusive lock on the current version of ``path``; yield its text."""
    while True:
        try:
            handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the `with` below
        except FileNotFoundError:
            raise AccessConfigError(f"{path}: does not exist; create it with `polymath-host access init`") from None
        except OSError as error:
            raise AccessConfigError(f"{path}: cannot be read ({error.strerror})") from None
        with handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                # Another writer may have replaced the file while we waited; then our lock is
                # on the old inode and we must start over on the new one.
                try:
                    current = os.stat(path).st_ino
                except FileNotFoundError:
                    current = None
                if current != os.fstat(handle.fileno()).st_ino:
                    continue
            try:
                text = handle.read()
            except UnicodeDecodeError:
                raise AccessConfigError(f"{path}: is not UTF-8 text") from None
            yield text
            return


def update(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Read the file, let ``change`` edit the decoded JSON in place, write it back.

    The file is validated before the change (so a broken file is reported, not
    overwritten) and after it (so the CLI never writes what the host would refuse).
    """
    with _locked(path) as text:
        data = read_json_object(text, str(path))
        parse_settings(data, str(path))
        change(data)
        write_atomically(path, data)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable. Not possible on every platform; best effort there.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
