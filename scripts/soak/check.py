"""Is an answer right? The Python check, and the settings of its twin for wrk (check.lua).

An answer is right only if: it is 200; every similarity is +-s of the bit its text names
(embeddings and records of one version); each library's bits come from a single version; the bits
are exactly the top of the ranking over the libraries present (no gap, no skipping ahead,
descending); the budget holds; against e0, library 0 (never deleted) is present and so is the
private library for the token holder; private bits never reach anonymous callers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .model import KINDS, PRIVATE, TEXT, bits_in_version, similarity

CHECK_LUA = Path(__file__).with_name("check.lua")  # the same check, for wrk


def check_answer(status: int, body: bytes) -> str | None:
    """None if the answer is right, else what is wrong with it."""
    if status != 200:
        return f"status {status}: {body[:200]!r}"
    result = json.loads(body)
    bits = result["bits"]
    if result["details"]["counts"]["bits"] != len(bits):
        return "details.counts.bits disagrees with the bits"
    if len(bits) not in KINDS:
        return f"unexpected number of bits {len(bits)}"
    caller, count_type, count = KINDS[len(bits)]
    sign = 1 if bits[0]["similarity"] > 0 else -1
    versions: dict[int, int] = {}
    parsed = []
    for position, bit in enumerate(bits):
        match = TEXT.match(bit["text"])
        if not match:
            return f"unexpected text {bit['text'][:60]!r}"
        library, version, row, kind = int(match[1]), int(match[2]), int(match[3]), match[4]
        if abs(bit["similarity"] - sign * similarity(library, version, row)) > 2e-5:
            return f"similarity {bit['similarity']} is not that of L={library} V={version} i={row}"
        if position and not bit["similarity"] < bits[position - 1]["similarity"]:
            return "not in descending order"
        if versions.setdefault(library, version) != version:
            return f"library {library} mixes versions {versions[library]} and {version}"
        if (kind == "priv") != (library == PRIVATE):
            return "access tag of the wrong library"
        if kind == "priv" and caller == "anonymous":
            return "a private bit reached an anonymous caller"
        if bit["info"]["url"] != f"https://soak.example/{library}/{version}/{row}":
            return "info of another bit"
        parsed.append((library, row))
    # Against e0, bits 0 and 1 of every library lead the ranking, so every library served shows up:
    # library 0 always, and the private one for the token holder. (Against -e0 the longest
    # versions lead, and a library may rightly fall below the budget.)
    if sign > 0 and 0 not in versions:
        return "library 0 is missing"
    if sign > 0 and caller == "token" and PRIVATE not in versions:
        return "the token holder did not get the private library"
    expected = sorted(((library, row) for library, version in versions.items()
                       for row in range(bits_in_version(version))),
                      key=lambda pair: sign * (10 * pair[1] + pair[0]))
    if parsed != expected[: len(parsed)]:
        return "not the top of the ranking (a gap or a skip)"
    if count_type == "token" and sum(bit["token_count"] for bit in bits) > count:
        return "over the token budget"
    return None


def lua_settings(requests: list[dict[str, Any]], failures: Path) -> str:
    """The settings file of check.lua: a Lua chunk that returns the requests, PRIVATE, KINDS and where failures go."""
    def text(value: str) -> str:
        return json.dumps(value)  # a JSON string is a valid Lua string literal here (ASCII only)

    rows = []
    for request in requests:
        headers = ", ".join(f"[{text(key)}] = {text(value)}" for key, value in request["headers"].items())
        rows.append(f"{{headers = {{{headers}}}, body = {text(request['body'])}}}")
    kinds = ", ".join(f"[{bits}] = {{{'true' if caller == 'token' else 'false'}, {text(count_type)}, {count}}}"
                      for bits, (caller, count_type, count) in KINDS.items())
    return (f"return {{\n  requests = {{{', '.join(rows)}}},\n  private = {PRIVATE},\n  kinds = {{{kinds}}},\n"
            f"  failures = {text(str(failures))},\n}}\n")
