"""A bucket writer: someone holding a leaked write credential for an origin, and no publisher key.

They can put any object, so they can rewrite `manifest.json` to name a library of their own, an
access file without a revocation, or an access file granting tags to tokens they sign with a key
of their own; sign the forgery with their own publisher key or paste a real signature beside it;
or put back an older manifest the publisher really signed. They work at a real origin, through the
origin's own client (as an attacker would with the same credential): a forgery's objects are put
first, and `put_manifest` makes it the manifest in force once its signature (if any) is there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from access.config import parse_settings
from access.keys import EDDSA, generate_key_entry
from access.tokens import issue_token
from host.origin.base import Origin
from host.origin.history import MANIFESTS
from host.origin.manifest import MANIFEST_KEY, MANIFEST_LIMIT, OBJECTS
from host.origin.publisher_keys import new_key_file
from host.origin.signatures import sign_manifest, signature_key


@dataclass
class BucketWriter:
    origin: Origin

    def current(self) -> tuple[bytes, dict[str, Any]]:
        body = self.read(MANIFEST_KEY)
        return body, json.loads(body)

    def read(self, key: str) -> bytes:
        fetched = self.origin.fetch(key, limit=MANIFEST_LIMIT)
        assert fetched is not None
        return fetched.body

    def history(self) -> list[bytes]:
        """Every manifest the publisher wrote, oldest first (from their history names)."""
        keys = sorted(item.key for item in self.origin.list_objects(f"{MANIFESTS}/"))
        return [self.read(key) for key in keys]

    def put_object(self, body: bytes) -> dict[str, Any]:
        digest = hashlib.sha256(body).hexdigest()
        self.origin.put(f"{OBJECTS}/{digest}", body)
        return {"sha256": digest, "size": len(body)}

    def put_manifest(self, body: bytes) -> bytes:
        self.origin.put(MANIFEST_KEY, body)
        return body

    @staticmethod
    def render(document: dict[str, Any]) -> bytes:
        document = {**document, "published_at": "2099-01-01T00:00:00.000000Z"}  # "newer" than anything
        return (json.dumps(document, indent=1) + "\n").encode()

    def add_library(self, path: str, library: bytes) -> bytes:
        """A manifest of the current set and one more library of theirs (not yet in force)."""
        _, document = self.current()
        document["libraries"].append({"path": path, **self.put_object(library), "mtime_ns": 1})
        return self.render(document)

    def edit_access(self, change: Callable[[dict[str, Any]], None]) -> bytes:
        """A manifest of the current set with its access file changed by `change` (not yet in force)."""
        _, document = self.current()
        access = json.loads(self.read(f"{OBJECTS}/{document['access']['sha256']}"))
        change(access)
        document["access"] = self.put_object((json.dumps(access, indent=1) + "\n").encode())
        return self.render(document)

    def grant_tag(self, tag: str) -> tuple[bytes, str]:
        """Their own EdDSA key added to the access file, and a token it signs granting `tag`."""
        entry = generate_key_entry(EDDSA, "forged")
        holder: list[dict[str, Any]] = []
        body = self.edit_access(lambda access: (access["keys"].append(
            {"kid": entry["kid"], "alg": EDDSA, "public_key": entry["public_key"]}), holder.append(access)))
        settings = parse_settings({"issuer": holder[0].get("issuer", "polymath-host"), "keys": [entry]}, "forger")
        return body, issue_token(settings, "mallory", [tag]).token

    def sign_with_own_key(self, body: bytes, folder: Path) -> None:
        """A signature object for `body`, by a publisher key the forger made."""
        key = new_key_file(folder / "forger.SECRET.pem")
        self.origin.put(signature_key(body), sign_manifest(body, [key]))

    def paste_signature(self, body: bytes, real: bytes) -> None:
        """The publisher's real signatures of `real`, in a signature object naming `body`, where `body`'s would be."""
        document = json.loads(self.read(signature_key(real)))
        document["manifest_sha256"] = hashlib.sha256(body).hexdigest()
        self.origin.put(signature_key(body), json.dumps(document).encode())

    def replay(self, body: bytes) -> bytes:
        """An older manifest the publisher signed, put back as the current one."""
        return self.put_manifest(body)
