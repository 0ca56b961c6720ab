"""The access file an edge replica needs: what verifies tokens and nothing that issues them.

`polymath-host publish --access FILE` publishes this edition beside the libraries, so the admin's
private keys never leave the admin's machine. Kept: the issuer, the public half of every EdDSA
and ES256 key, revocations, the default private tag and the `restricted` signals. Left out, each
with one line saying so: HS256 keys (the verifying secret is the signing secret) and legacy opaque
tokens (the file holds them in the clear), so tokens of those kinds are refused by replicas; the
`issued` records (only the admin's `token list` reads them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .config import load_settings, read_json_object
from .keys import HS256


def edge_edition(path: Path) -> tuple[bytes, list[str]]:
    """The edge edition of the access file at `path` (checked first: AccessConfigError), and what was left out."""
    load_settings(path)  # a file the host would refuse is never published
    data: dict[str, Any] = read_json_object(path.read_text(encoding="utf-8"), str(path))
    notes = []
    keys = []
    for key in data.get("keys", []):
        if key["alg"] == HS256:
            notes.append(f"left out HS256 key {key['kid']}: its secret signs tokens too; replicas refuse the tokens it "
                         "signed (for edges, rotate to a public-key algorithm: polymath-host access rotate --alg EdDSA)")
            continue
        keys.append({"kid": key["kid"], "alg": key["alg"], "public_key": key["public_key"]})
    if data.get("tokens"):
        notes.append(f"left out {len(data['tokens'])} legacy opaque token(s): the file holds them in the clear; "
                     "replicas refuse them (issue JWTs instead: polymath-host token issue)")
    edition: dict[str, Any] = {field: data[field] for field in ("issuer", "default_private_access_tag", "restricted", "revoked")
               if field in data}
    edition["keys"] = keys
    return (json.dumps(edition, indent=1, ensure_ascii=False) + "\n").encode(), notes
