"""An identity provider's published keys (a JWK Set, RFC 7517): read strictly, public signing keys only.

A key set is refused whole (`JwksRefused`) when it holds what a public key set must never hold: a
symmetric (`oct`) key, whose secret would then be public, or a private key's parts (`d`, `p`...).
Keys this host cannot or must not verify with are skipped, each with one line saying why: keys for
encryption (`use: enc`), other curves (X25519), RSA keys under 2048 bits, unknown key types.

Each key keeps its algorithm family (RSA: RS*/PS*; EC P-256: ES256; EC P-384: ES384; OKP Ed25519 or
Ed448: EdDSA) and, if the set names one, its own `alg`; `KeySet.select(kid, alg)` hands out only a
key whose family fits the token's algorithm (which the issuer's allow-list admitted first). The key
is a `cryptography` public key object, so PyJWT can never take it for an HMAC secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from jwt.exceptions import InvalidKeyError

RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
SUPPORTED_ALGORITHMS = (*RSA_ALGORITHMS, "ES256", "ES384", "EdDSA")
MAX_KEYS = 100
MIN_RSA_BITS = 2048
_PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
_THUMBPRINT_MEMBERS = {"RSA": ("e", "kty", "n"), "EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x")}
_EC_ALGORITHM = {"P-256": "ES256", "P-384": "ES384"}


class JwksRefused(Exception):
    """A key set that must not be used at all; the message is one line naming where and why."""


@dataclass(frozen=True)
class PublicJwk:
    kid: str | None
    algorithms: tuple[str, ...]  # what this key may verify: its family, narrowed to its own `alg` if given
    key: Any  # a cryptography public key object
    thumbprint: str  # RFC 7638, base64url: names the key material whatever its kid

    def fits(self, alg: str) -> bool:
        return alg in self.algorithms


@dataclass(frozen=True)
class KeySet:
    keys: tuple[PublicJwk, ...]
    skipped: tuple[str, ...] = ()  # one line per key left out

    @property
    def kids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(key.kid or "(no kid)" for key in self.keys))

    @property
    def algorithms(self) -> frozenset[str]:
        return frozenset(alg for key in self.keys for alg in key.algorithms)

    @cached_property
    def thumbprints(self) -> frozenset[str]:
        return frozenset(key.thumbprint for key in self.keys)

    def holds(self, thumbprint: str) -> bool:
        return thumbprint in self.thumbprints

    def knows(self, kid: str | None) -> bool:
        return kid is None or any(key.kid == kid for key in self.keys)

    def select(self, kid: str | None, alg: str) -> PublicJwk | str:
        """The key for a token's `kid` and `alg`, or why there is none: `unknown key id` (no key has this
        kid), `wrong algorithm` (keys with this kid do not fit `alg`), `missing key id` (no kid, and not
        exactly one key of the set fits `alg`)."""
        if kid is None:
            fitting = [key for key in self.keys if key.fits(alg)]
            return fitting[0] if len(fitting) == 1 else "missing key id"
        named = [key for key in self.keys if key.kid == kid]
        if not named:
            return "unknown key id"
        return next((key for key in named if key.fits(alg)), "wrong algorithm")


def parse_jwks(document: Any, where: str) -> KeySet:
    """Read a JWK Set document (already decoded JSON); JwksRefused for one that must not be used."""
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise JwksRefused(f"{where}: is not a JWK Set (an object with a list of keys)")
    entries = document["keys"]
    if len(entries) > MAX_KEYS:
        raise JwksRefused(f"{where}: holds {len(entries)} keys; a provider's set holds a few (at most {MAX_KEYS})")
    keys, skipped = [], []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise JwksRefused(f"{where}: keys[{index}] is not an object")
        kid = entry.get("kid")
        named = f"keys[{index}]" + (f" (kid {kid!r:.60})" if isinstance(kid, str) else "")
        if entry.get("kty") == "oct":
            raise JwksRefused(f"{where}: {named} is a symmetric (oct) key: a published key set must hold only public "
                              "keys, so this one is refused whole")
        private = [name for name in _PRIVATE_MEMBERS if name in entry]
        if private:
            raise JwksRefused(f"{where}: {named} holds private key material ({', '.join(private)}): a published key "
                              "set must hold only public keys, so this one is refused whole")
        key = _public_key(entry)
        if isinstance(key, str):
            skipped.append(f"{named}: {key}")
        else:
            if kid is not None and not isinstance(kid, str):
                raise JwksRefused(f"{where}: {named}: kid is not a string")
            keys.append(PublicJwk(kid, *key))
    return KeySet(tuple(keys), tuple(skipped))


def _public_key(entry: Mapping[str, Any]) -> tuple[tuple[str, ...], Any, str] | str:
    """(algorithms, key object, thumbprint) for a usable signing key, or why it is skipped."""
    if entry.get("use", "sig") != "sig":
        return f"its use is {entry.get('use')!r:.20}, not sig"
    key_ops = entry.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        return "its key_ops do not include verify"
    kty = entry.get("kty")
    key: Any
    try:
        if kty == "RSA":
            key = RSAAlgorithm.from_jwk(dict(entry))
            if not isinstance(key, rsa.RSAPublicKey):
                return "not an RSA public key"
            if key.key_size < MIN_RSA_BITS:
                return f"an RSA key of {key.key_size} bits (at least {MIN_RSA_BITS} are needed)"
            family: tuple[str, ...] = RSA_ALGORITHMS
        elif kty == "EC":
            key = ECAlgorithm.from_jwk(dict(entry))
            family_alg = _EC_ALGORITHM.get(entry.get("crv", ""))
            if not isinstance(key, ec.EllipticCurvePublicKey) or family_alg is None:
                return f"an EC key on {entry.get('crv')!r:.20} (P-256 for ES256 and P-384 for ES384 are taken)"
            family = (family_alg,)
        elif kty == "OKP":
            key = OKPAlgorithm.from_jwk(dict(entry))
            if not isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
                return f"an OKP key on {entry.get('crv')!r:.20}, not a signing curve (Ed25519 or Ed448)"
            family = ("EdDSA",)
        else:
            return f"key type {kty!r:.20} is not one this host verifies with (RSA, EC, OKP)"
    except (InvalidKeyError, ValueError, TypeError, KeyError) as problem:
        return f"not a readable {kty} key ({str(problem)[:80] or type(problem).__name__})"
    alg = entry.get("alg")
    if alg is not None:
        if alg not in family:
            return f"its alg {alg!r:.20} does not fit a {kty} key this host verifies with"
        family = (alg,)
    return family, key, _thumbprint(entry, kty)


def _thumbprint(entry: Mapping[str, Any], kty: str) -> str:
    members = {name: entry[name] for name in _THUMBPRINT_MEMBERS[kty]}
    digest = hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
