"""The publisher's key: an Ed25519 key pair whose private half signs published sets, and whose
public half replicas pin (`serve --origin-key`).

The private key is a file of its own (`publisher.SECRET.pem`, PKCS#8 PEM, mode 0600, made by
`polymath-host publisher-key init`), not a key of the access file: it is a different power (it
decides what every replica serves, where an access key decides who sees private bits), it may
belong to a different person or machine (a CI job that publishes need not issue tokens), a set
without any private bits is signed too, and no key ever signs two kinds of message.

The public key travels as one line of text, `ed25519:` and the base64 of its 32 bytes, short
enough for a command line or a deployment's environment; a replica also reads it from a file
(that line, or a PEM public key). A private key offered where a public one belongs is refused:
it must never reach a replica.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

PREFIX = "ed25519:"
DEFAULT_KEY_FILE = Path("publisher.SECRET.pem")
INIT = "polymath-host publisher-key init"
KEY_FILE_LIMIT = 64 << 10


class KeyProblem(ValueError):
    """A key that cannot be used: one line naming it and saying what to do."""


@dataclass(frozen=True)
class PublicKey:
    """A pinned or signing key's public half, and the text that names it."""

    key: ed25519.Ed25519PublicKey
    text: str  # ed25519:<base64>

    @property
    def short(self) -> str:
        """How messages name the key: enough of its text to tell keys apart at a glance."""
        return self.text[: len(PREFIX) + 12] + "..."

    @classmethod
    def of(cls, key: ed25519.Ed25519PublicKey) -> PublicKey:
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return cls(key, PREFIX + base64.b64encode(raw).decode())


@dataclass(frozen=True)
class SigningKey:
    private: ed25519.Ed25519PrivateKey
    public: PublicKey
    path: Path


def new_key_file(path: Path) -> SigningKey:
    """A fresh key written to `path` (mode 0600 from the start, atomically); FileExistsError if it is there."""
    private = ed25519.Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")  # 0600
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(pem)
            file.flush()
            os.fsync(file.fileno())
        os.link(temporary, path)  # never over an existing key: FileExistsError
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    return SigningKey(private, PublicKey.of(private.public_key()), path)


def load_signing_key(path: Path) -> SigningKey:
    """The private key in `path`, or KeyProblem saying what is wrong and how to make one."""
    text = _read(path, f"{path}: no such file; create a publisher key with: {INIT} --key {path}")
    if "PUBLIC KEY-----" in text or text.strip().startswith(PREFIX):
        raise KeyProblem(f"{path}: holds a public key; signing needs the private key file that {INIT} wrote")
    try:
        private = serialization.load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError):
        raise KeyProblem(f"{path}: not an unencrypted PEM private key; create a publisher key with: "
                         f"{INIT} --key FILE") from None
    if not isinstance(private, ed25519.Ed25519PrivateKey):
        raise KeyProblem(f"{path}: not an Ed25519 key (publisher keys are Ed25519); create one with: {INIT} --key FILE")
    return SigningKey(private, PublicKey.of(private.public_key()), path)


def load_pinned_key(given: str) -> PublicKey:
    """`--origin-key KEY_OR_FILE`: the text `ed25519:<base64>`, or a file holding it or a PEM public key."""
    if given.startswith(PREFIX):
        return parse_public_key(given, f"--origin-key {given[:60]!r}")
    path = Path(given)
    text = _read(path, f"--origin-key {given}: no such file; give the public key (ed25519:...) that "
                       "polymath-host publisher-key public prints, or a file holding it")
    where = f"--origin-key {given}"
    if "PRIVATE KEY-----" in text:
        raise KeyProblem(f"{where}: holds a private key, which must never be on a replica: give its public key "
                         f"(polymath-host publisher-key public --key {given})")
    if "-----BEGIN PUBLIC KEY-----" in text:
        try:
            key = serialization.load_pem_public_key(text.encode())
        except ValueError:
            raise KeyProblem(f"{where}: not a readable PEM public key") from None
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise KeyProblem(f"{where}: not an Ed25519 public key (publisher keys are Ed25519)")
        return PublicKey.of(key)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if len(lines) != 1:
        raise KeyProblem(f"{where}: should hold one public key (ed25519:...), found {len(lines)} lines")
    return parse_public_key(lines[0], where)


def parse_public_key(text: str, where: str) -> PublicKey:
    problem = KeyProblem(f"{where}: not an Ed25519 public key (ed25519: and the base64 of 32 bytes, as "
                         "polymath-host publisher-key public prints it)")
    if not text.startswith(PREFIX):
        raise problem
    try:
        raw = base64.b64decode(text[len(PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise problem from None
    if len(raw) != 32:
        raise problem
    return PublicKey.of(ed25519.Ed25519PublicKey.from_public_bytes(raw))


def _read(path: Path, missing: str) -> str:
    try:
        with path.open("rb") as file:
            body = file.read(KEY_FILE_LIMIT + 1)
    except FileNotFoundError:
        raise KeyProblem(missing) from None
    except IsADirectoryError:
        raise KeyProblem(f"{path}: is a folder, not a key file") from None
    except OSError as problem:
        raise KeyProblem(f"{path}: cannot be read ({problem.strerror})") from None
    if len(body) > KEY_FILE_LIMIT:
        raise KeyProblem(f"{path}: over {KEY_FILE_LIMIT:,} bytes: not a key file")
    try:
        return body.decode("ascii")
    except UnicodeDecodeError:
        raise KeyProblem(f"{path}: not a key file (keys are ASCII text)") from None
