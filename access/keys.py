"""Signing keys: parsing the `keys` entries of `access.SECRET.json` and making new ones.

Each key has exactly one algorithm. Verification always uses that algorithm and the key
object prepared here (raw bytes for HMAC, a `cryptography` public key object for
EdDSA/ES256), so a token can never pick its own algorithm or have an asymmetric public
key reinterpreted as an HMAC secret (RFC 8725 §2.1, §3.1).

Key entries on disk:

    {"kid": "2026-11-22", "alg": "HS256", "secret": "<base64url of >= 32 random bytes>"}
    {"kid": "k2", "alg": "EdDSA", "public_key": "<PEM>", "private_key": "<PEM, issuers only>"}
    {"kid": "k3", "alg": "ES256", "public_key": "<PEM>", "private_key": "<PEM, issuers only>"}
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from .errors import AccessConfigError

HS256 = "HS256"
EDDSA = "EdDSA"
ES256 = "ES256"
ALGORITHMS = (HS256, EDDSA, ES256)

# RFC 7518 §3.2: an HS256 key must be at least as long as the hash output.
MIN_HMAC_SECRET_BYTES = 32
# What `access init` / `access rotate` generate.
NEW_HMAC_SECRET_BYTES = 32

PublicKey: TypeAlias = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey: TypeAlias = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
VerifyKey: TypeAlias = bytes | PublicKey
SignKey: TypeAlias = bytes | PrivateKey

_BASE64URL = re.compile(r"[A-Za-z0-9_-]+={0,2}")

_FIELDS = {
    HS256: ({"kid", "alg", "secret"}, {"kid", "alg", "secret"}),
    EDDSA: ({"kid", "alg", "public_key"}, {"kid", "alg", "public_key", "private_key"}),
    ES256: ({"kid", "alg", "public_key"}, {"kid", "alg", "public_key", "private_key"}),
}


@dataclass(frozen=True)
class Key:
    """One usable key. ``sign_key`` is None on hosts that may verify but not issue."""

    kid: str
    alg: str
    verify_key: VerifyKey
    sign_key: SignKey | None

    @property
    def symmetric(self) -> bool:
        return self.alg == HS256


def parse_key(entry: Any, where: str) -> Key:
    """Turn one `keys[i]` entry into a Key, or raise AccessConfigError.

    ``where`` is the prefix for messages, e.g. ``"access.SECRET.json: keys[0]"``.
    Messages never include the secret or private key material.
    """
    if not isinstance(entry, dict):
        raise AccessConfigError(f"{where}: must be an object with kid, alg and key fields")
    alg = entry.get("alg")
    if alg not in ALGORITHMS:
        raise AccessConfigError(f"{where}.alg: {_short(alg)} is not supported; use one of {', '.join(ALGORITHMS)}")
    kid = entry.get("kid")
    if not isinstance(kid, str) or not kid.strip():
        raise AccessConfigError(f"{where}.kid: must be a non-empty string")
    required, allowed = _FIELDS[alg]
    missing = sorted(required - entry.keys())
    if missing:
        raise AccessConfigError(f"{where}.{missing[0]}: missing (required for {alg} keys)")
    unknown = sorted(entry.keys() - allowed)
    if unknown:
        raise AccessConfigError(f"{where}.{unknown[0]}: not a field of {alg} keys")
    if alg == HS256:
        secret = _decode_hmac_secret(entry["secret"], f"{where}.secret")
        return Key(kid=kid, alg=alg, verify_key=secret, sign_key=secret)
    public = _load_public_key(entry["public_key"], alg, f"{where}.public_key")
    private = None
    if entry.get("private_key") is not None:
        private = _load_private_key(entry["private_key"], alg, f"{where}.private_key")
        if _public_bytes(private.public_key()) != _public_bytes(public):
            raise AccessConfigError(f"{where}.private_key: does not match public_key")
    return Key(kid=kid, alg=alg, verify_key=public, sign_key=private)


def generate_key_entry(alg: str, kid: str) -> dict[str, str]:
    """A fresh key entry, ready to append to `keys` (includes private material)."""
    if alg == HS256:
        secret = secrets.token_bytes(NEW_HMAC_SECRET_BYTES)
        return {"kid": kid, "alg": alg, "secret": base64.urlsafe_b64encode(secret).rstrip(b"=").decode()}
    private: PrivateKey
    if alg == EDDSA:
        private = ed25519.Ed25519PrivateKey.generate()
    elif alg == ES256:
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError(f"unsupported algorithm {alg!r}")
    private_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "kid": kid,
        "alg": alg,
        "public_key": _public_bytes(private.public_key()).decode(),
        "private_key": private_pem,
    }


def new_kid(existing: set[str], now: datetime | None = None) -> str:
    """A key id that says when the key was made: ``2026-11-22``, then ``2026-11-22.2``..."""
    base = (now or datetime.now(UTC)).strftime("%Y-%m-%d")
    kid, n = base, 1
    while kid in existing:
        n += 1
        kid = f"{base}.{n}"
    return kid


def _decode_hmac_secret(value: Any, where: str) -> bytes:
    # Only the url-safe alphabet, with or without '=' padding.
    if not isinstance(value, str) or not _BASE64URL.fullmatch(value):
        raise AccessConfigError(f"{where}: must be base64url text (A-Z a-z 0-9 - _)")
    try:
        secret = base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))
    except (binascii.Error, ValueError):
        raise AccessConfigError(f"{where}: is not valid base64url text") from None
    if len(secret) < MIN_HMAC_SECRET_BYTES:
        raise AccessConfigError(
            f"{where}: decodes to {len(secret)} bytes; HS256 needs at least {MIN_HMAC_SECRET_BYTES} random bytes"
        )
    return secret


def _load_public_key(value: Any, alg: str, where: str) -> PublicKey:
    if not isinstance(value, str) or "-----BEGIN PUBLIC KEY-----" not in value:
        raise AccessConfigError(f"{where}: must be a PEM public key (-----BEGIN PUBLIC KEY-----)")
    try:
        key = serialization.load_pem_public_key(value.encode())
    except ValueError:
        raise AccessConfigError(f"{where}: is not a readable PEM public key") from None
    _check_key_type(key, alg, where)
    return key  # type: ignore[return-value]


def _load_private_key(value: Any, alg: str, where: str) -> PrivateKey:
    if not isinstance(value, str) or "PRIVATE KEY-----" not in value:
        raise AccessConfigError(f"{where}: must be an unencrypted PEM private key")
    try:
        key = serialization.load_pem_private_key(value.encode(), password=None)
    except (ValueError, TypeError):
        raise AccessConfigError(f"{where}: is not a readable unencrypted PEM private key") from None
    _check_key_type(key, alg, where)
    return key  # type: ignore[return-value]


def _check_key_type(key: object, alg: str, where: str) -> None:
    if alg == EDDSA and not isinstance(key, (ed25519.Ed25519PublicKey, ed25519.Ed25519PrivateKey)):
        raise AccessConfigError(f"{where}: EdDSA keys must be Ed25519")
    if alg == ES256 and not (
        isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)) and isinstance(key.curve, ec.SECP256R1)
    ):
        raise AccessConfigError(f"{where}: ES256 keys must be on the P-256 curve")


def _public_bytes(key: PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
