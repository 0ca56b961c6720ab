"""The access file an edge replica needs: what verifies tokens and nothing that issues them.

`polymath-host publish --access FILE` publishes this edition beside the libraries, so the admin's
private keys never leave the admin's machine. Kept: the issuer, the public half of every EdDSA
and ES256 key, revocations, the default private tag, the `restricted` signals and the trusted
identity providers. Left out, each with one line saying so: HS256 keys (the verifying secret is the
signing secret) and legacy opaque tokens (the file holds them in the clear), so tokens of those
kinds are refused by replicas; the `issued` records (only the admin's `token list` reads them).

A trusted issuer's keys are fetched by each replica from the provider, unless the publisher embeds
them (`publish --issuer-keys embed`): then they are fetched here, now, and written into the edition
(`jwks`, beside the `jwks_uri` they came from), and replicas that may not reach the provider verify with those until the
next publish brings newer ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .config import load_settings, read_json_object
from .errors import AccessConfigError
from .fetching import FetchFailed
from .issuer_keys import fetch_key_set
from .jwks import JwksRefused
from .keys import HS256


def edge_edition(path: Path, *, embed_issuer_keys: bool = False) -> tuple[bytes, list[str]]:
    """The edge edition of the access file at `path` (checked first: AccessConfigError), and what was left out
    or fetched. With `embed_issuer_keys`, a provider whose keys cannot be fetched now is an AccessConfigError."""
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
    if data.get("trusted_issuers"):
        edition["trusted_issuers"] = [_issuer_for_edges(entry, f"{path}: trusted_issuers[{index}]", embed_issuer_keys,
                                                        notes)
                                      for index, entry in enumerate(data["trusted_issuers"])]
    return (json.dumps(edition, indent=1, ensure_ascii=False) + "\n").encode(), notes


def _issuer_for_edges(entry: dict[str, Any], where: str, embed: bool, notes: list[str]) -> dict[str, Any]:
    if not embed or "jwks" in entry:
        return dict(entry)
    try:
        fetched = fetch_key_set(entry["issuer"], entry.get("jwks_uri"))
    except (FetchFailed, JwksRefused) as problem:
        raise AccessConfigError(f"{where}: --issuer-keys embed: {problem}") from None
    notes.append(f"embedded the keys of {entry['issuer']} (kid {', '.join(fetched.keys.kids)}) fetched from "
                 f"{fetched.jwks_uri}: replicas verify its tokens with them until the next publish")
    # No date beside them: a publish that finds the same keys publishes the same edition (nothing to upload).
    return {**entry, "jwks_uri": fetched.jwks_uri, "jwks": fetched.document}
