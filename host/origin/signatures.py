"""A published set's signature: Ed25519 over the manifest's exact bytes, in an object of its own.

The manifest names every object by its SHA-256 (the library files, the compiled stores, the access
file's edge edition), so a signature over the manifest's bytes covers all of them. It travels as a
detached object named by the manifest's own digest,

    signatures/<sha256 of manifest.json's bytes>.json
    {"format": "polymath-host/signature-1", "manifest_sha256": "<hex>",
     "signatures": [{"key": "ed25519:<base64>", "signature": "<base64 of 64 bytes>"}]}

written before `manifest.json`, like every object the manifest needs. Named by the digest, it is
never overwritten and always matches the manifest it was fetched for (a replica cannot see a new
manifest with an old signature, as it could with one `manifest.json.sig`), and `manifest.json`
stays as it was, so replicas of earlier versions, and replicas that pin no key, read it unchanged.
Several keys may sign one manifest: during a key rotation, replicas pinning either key accept it.

What is signed is a fixed context line and the manifest's bytes, so a signature of this key can
never be taken for anything but a manifest's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature

from host.origin.manifest import ManifestError
from host.origin.publisher_keys import PublicKey, SigningKey

FORMAT = "polymath-host/signature-1"
SIGNATURES = "signatures"
SIGNATURE_LIMIT = 64 << 10  # bytes: a few keys' signatures
CONTEXT = b"polymath-host/signed-manifest-1\n"

UNSIGNED = "unsigned"  # no signature object, or one that lists no signature
UNPINNED = "unpinned_key"  # signed, but by no key the replica pins
BAD = "bad_signature"  # a pinned key's signature that does not verify, or a malformed signature object
REPLAYED = "replayed"  # validly signed, but not published after the set in force
REASONS = (UNSIGNED, UNPINNED, BAD, REPLAYED)


class SignatureRefused(ManifestError):
    """A manifest refused because of its signature; `reason` is one of REASONS (a metric's label)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def manifest_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def signature_key(body: bytes) -> str:
    """Where the signature of the manifest `body` is stored."""
    return f"{SIGNATURES}/{manifest_digest(body)}.json"


def sign_manifest(body: bytes, keys: Sequence[SigningKey]) -> bytes:
    """The signature object of the manifest `body`, signed by every key of `keys`."""
    signatures = [{"key": key.public.text, "signature": base64.b64encode(key.private.sign(CONTEXT + body)).decode()}
                  for key in keys]
    document = {"format": FORMAT, "manifest_sha256": manifest_digest(body), "signatures": signatures}
    return (json.dumps(document, indent=1) + "\n").encode()


def signers(document: bytes) -> frozenset[str]:
    """The keys a signature object says signed (not verified: for `publish` to tell whether to sign again)."""
    try:
        return frozenset(entry["key"] for entry in _signatures(document, "", None))
    except ManifestError:
        return frozenset()


def verify_manifest(body: bytes, document: bytes | None, pinned: Sequence[PublicKey], where: str) -> PublicKey:
    """The pinned key whose signature of `body` verifies, or SignatureRefused naming `where` and why."""
    if document is None:
        raise SignatureRefused(f"{where}: not signed (no {signature_key(body)}): refused, as --origin-key asks; "
                               "publish it with polymath-host publish --sign", UNSIGNED)
    entries = _signatures(document, where, manifest_digest(body))
    if not entries:
        raise SignatureRefused(f"{where}: its signature object lists no signature: refused; publish with --sign", UNSIGNED)
    trusted = {key.text: key for key in pinned}
    failed = []
    for entry in entries:
        key = trusted.get(entry["key"])
        if key is None:
            continue
        try:
            key.key.verify(entry["signature"], CONTEXT + body)
        except InvalidSignature:
            failed.append(key)
            continue
        return key
    if failed:
        raise SignatureRefused(f"{where}: its signature by {failed[0].short} does not verify: refused (the manifest "
                               "or its signature was altered)", BAD)
    named = ", ".join(sorted(entry["key"][:20] + "..." for entry in entries))
    raise SignatureRefused(f"{where}: signed only by {named}, which --origin-key does not pin: refused (a forged set, "
                           "or a new publisher key: pin it with --origin-key)", UNPINNED)


def _signatures(document: bytes, where: str, digest: str | None) -> list[dict[str, Any]]:
    """The entries of a signature object, their signatures decoded; SignatureRefused (BAD) when malformed."""
    def malformed(what: str) -> SignatureRefused:
        return SignatureRefused(f"{where}: its signature object is malformed ({what}): refused", BAD)

    try:
        parsed = json.loads(document.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise malformed("not JSON") from None
    if not isinstance(parsed, dict) or set(parsed) != {"format", "manifest_sha256", "signatures"}:
        raise malformed("fields are not format, manifest_sha256 and signatures")
    if parsed["format"] != FORMAT:
        raise malformed(f"format is not {FORMAT!r}")
    if digest is not None and parsed["manifest_sha256"] != digest:
        raise SignatureRefused(f"{where}: its signature object is for another manifest: refused", BAD)
    if not isinstance(parsed["signatures"], list):
        raise malformed("signatures is not a list")
    entries = []
    for entry in parsed["signatures"]:
        if not isinstance(entry, dict) or set(entry) != {"key", "signature"} or not all(
                isinstance(value, str) for value in entry.values()):
            raise malformed("a signature is not {key, signature}")
        try:
            signature = base64.b64decode(entry["signature"], validate=True)
        except (binascii.Error, ValueError):
            raise malformed("a signature is not base64") from None
        entries.append({"key": entry["key"], "signature": signature})
    return entries
