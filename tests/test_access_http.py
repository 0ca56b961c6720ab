"""Access control seen from the outside (SPEC §3, §4, §5): what each caller may learn over HTTP.

Most tests talk to `create_app` in-process over `httpx.ASGITransport`; the ones about reloading
across processes and about logs run a real server (`run_host`). Every access file and token is
made by the admin CLI (`access.cli.main`, or `python -m host` itself), never by hand, except the
forged tokens, which are built here the way an attacker would build them.

The world: four folders of libraries of one model.

- `bare`: `public.json`, 10 public bits, nothing else.
- `elsewhere`: the same `public.json`, plus `access/alpha/notes.json` and `access/beta/plans.json`.
- `full`: `public.json` with the same 10 public bits interleaved with 3 bits tagged `alpha` and 2
  tagged `beta` in the file itself, plus the two private files.
- `edited`: `bare` with one public bit's text changed.

A caller without a tag must not be able to tell `bare`, `elsewhere` and `full` apart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import numpy as np
import pytest
from components import access_cli
from librarian import TEST_MODEL, b64, brute_force_ranking, unit_vectors, write_library
from starlette.applications import Starlette

from access import AccessControl, files
from host.service.settings import Settings
from host.web.app import create_app

pytestmark = pytest.mark.anyio

PROJECT = Path(__file__).resolve().parents[1]
DIMENSION = 8
ISSUER = "https://library.test"

PUBLIC = unit_vectors(10, DIMENSION, seed=71)
PUBLIC_TOKENS = [5, 12, 30, 8, 21, 3, 40, 9, 15, 11]
ALPHA_INLINE = unit_vectors(3, DIMENSION, seed=72)  # in full/public.json, "access_tag": "alpha"
BETA_INLINE = unit_vectors(2, DIMENSION, seed=73)  # in full/public.json, "access_tag": "beta"
ALPHA_FILE = unit_vectors(4, DIMENSION, seed=74)  # access/alpha/notes.json
BETA_FILE = unit_vectors(4, DIMENSION, seed=75)  # access/beta/plans.json
PRIVATE_TOKENS = [2, 50, 7, 25]
ALPHA_BITS = len(ALPHA_INLINE) + len(ALPHA_FILE)
BETA_BITS = len(BETA_INLINE) + len(BETA_FILE)

# Queries aimed straight at private bits (they would rank first if visible), at public ones, and at nothing.
QUERIES = {
    "alpha file": ALPHA_FILE[0],
    "alpha inline": ALPHA_INLINE[1],
    "beta inline": BETA_INLINE[0],
    "public": PUBLIC[4],
    "random": unit_vectors(1, DIMENSION, seed=79)[0],
}
BUDGETS = [("token", 1), ("token", 7), ("token", 29), ("token", 120), ("token", 10_000),
           ("bit", 1), ("bit", 3), ("bit", 8), ("bit", 1000)]
PRIVATE_MARKERS = ("confidential", "/alpha/", "/beta/", "alpha", "beta")


# ---- the world on disk -------------------------------------------------------------------------------------


def make_bit(kind: str, number: int, vector: np.ndarray, tokens: int, **extra: Any) -> dict[str, Any]:
    secret_word = "confidential " if kind != "public" else ""
    return {
        "text": f"{secret_word}{kind} bit {number} " + " ".join(f"{kind}{number}w{n}" for n in range(tokens)),
        "embedding": b64(vector),
        "token_count": tokens,
        "info": {"url": f"https://example.com/{kind}/{number}", "title": f"{kind} {number}"},
        **extra,
    }


def public_bits(edited: bool = False) -> list[dict[str, Any]]:
    bits = [make_bit("public", n, vector, PUBLIC_TOKENS[n]) for n, vector in enumerate(PUBLIC)]
    if edited:
        bits[3]["text"] += " (corrected)"
    return bits


def private_bits(kind: str, vectors: np.ndarray, first: int = 0, **extra: Any) -> list[dict[str, Any]]:
    return [make_bit(kind, first + n, vector, PRIVATE_TOKENS[n % len(PRIVATE_TOKENS)], **extra)
            for n, vector in enumerate(vectors)]


def library(bits: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": 1, "embedding_model": TEST_MODEL, "bits": bits}


def interleaved_public_json() -> dict[str, Any]:
    """The 10 public bits in their order, with the inline private bits between them."""
    alpha = private_bits("alpha", ALPHA_INLINE, first=100, access_tag="alpha")
    beta = private_bits("beta", BETA_INLINE, first=100, access_tag="beta")
    public = public_bits()
    bits = [public[0], alpha[0], public[1], public[2], beta[0], public[3], alpha[1], public[4], public[5],
            public[6], beta[1], public[7], public[8], alpha[2], public[9]]
    return library(bits)


def write_private_files(libraries: Path) -> None:
    write_library(libraries / "access" / "alpha" / "notes.json", library(private_bits("alpha", ALPHA_FILE)))
    write_library(libraries / "access" / "beta" / "plans.json", library(private_bits("beta", BETA_FILE)))


def build_folders(root: Path) -> dict[str, Path]:
    folders = {name: root / name / "libraries" for name in ("bare", "elsewhere", "full", "edited")}
    write_library(folders["bare"] / "public.json", library(public_bits()))
    write_library(folders["elsewhere"] / "public.json", library(public_bits()))
    write_private_files(folders["elsewhere"])
    write_library(folders["full"] / "public.json", interleaved_public_json())
    write_private_files(folders["full"])
    write_library(folders["edited"] / "public.json", library(public_bits(edited=True)))
    return folders


# ---- the admin CLI ----------------------------------------------------------------------------------------


def init_access(path: Path, alg: str = "HS256") -> Path:
    access_cli("access", "init", "--access", path, "--issuer", ISSUER, "--alg", alg)
    return path


def issue(path: Path, subject: str, *tags: str, expires: str = "1h") -> str:
    tag_args = [arg for tag in tags for arg in ("--tag", tag)]
    return access_cli("token", "issue", subject, *tag_args, "--expires", expires, "--access", path)


def revoke(path: Path, target: str) -> None:
    access_cli("token", "revoke", target, "--access", path)


def add_legacy_tokens(path: Path, tokens: dict[str, dict[str, Any]]) -> None:
    """The legacy `tokens` map is edited by hand in real life; here through the same atomic writer."""
    files.update(path, lambda data: data.setdefault("tokens", {}).update(tokens))


def set_restricted(path: Path, **restricted: Any) -> None:
    files.update(path, lambda data: data.__setitem__("restricted", restricted))


def access_data(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def unverified_claims(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


# ---- forging tokens, as an attacker would ------------------------------------------------------------------


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def b64url_json(value: Any) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def hand_signed(header: dict[str, Any], claims: dict[str, Any], hmac_key: bytes | None) -> str:
    """A JWT built by hand: HMAC-SHA256 over header.payload with any key bytes, or no signature."""
    signing_input = f"{b64url_json(header)}.{b64url_json(claims)}"
    signature = b64url(hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()) if hmac_key else ""
    return f"{signing_input}.{signature}"


def hmac_secret(entry: dict[str, Any]) -> bytes:
    text = entry["secret"]
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def claims_for(subject: str, tags: list[str], **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": ISSUER, "sub": subject, "access_tags": tags, "iat": now,
            "jti": secrets.token_hex(16), "exp": now + 3600, **changes}


def with_payload_changed(token: str, **changes: Any) -> str:
    header, _, signature = token.split(".")
    return f"{header}.{b64url_json({**unverified_claims(token), **changes})}.{signature}"


# ---- fixtures -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    folders: dict[str, Path]
    access: Path  # access.SECRET.json, made by the CLI
    tokens: dict[str, str]  # valid credentials by name
    refused: dict[str, tuple[str, set[str]]]  # name -> (token, reasons it may be refused for)
    apps: dict[str, Starlette]

    def secrets(self) -> list[str]:
        """Every piece of key material in the access file, as text that must never be shown."""
        found = []
        for key in access_data(self.access)["keys"]:
            found += [key[field] for field in ("secret", "private_key") if field in key]
        found += [entry["token"] for entry in access_data(self.access)["tokens"].values()]
        return found


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def make_app(libraries: Path, access_file: Path | None, *, check_interval: float = 1.0, **options: Any) -> Starlette:
    settings = Settings(libraries=libraries, cache_dir=libraries.parent / "compiled", access=access_file,
                        watch_interval=0, **options)
    return create_app(settings, access=AccessControl.from_file(access_file, check_interval=check_interval))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("access_http")
    folders = build_folders(root)
    path = init_access(root / "access.SECRET.json")
    hs256 = access_data(path)["keys"][0]

    tokens = {
        "alpha": issue(path, "ann@example.com", "alpha"),
        "beta": issue(path, "ben@example.com", "beta"),
        "both": issue(path, "cat@example.com", "alpha", "beta"),
        "legacy alpha": "sk_carol_" + secrets.token_hex(12),
        "legacy both": "sk_dave_" + secrets.token_hex(12),
    }
    revoked_by_jti = issue(path, "rita@example.com", "alpha")
    revoke(path, unverified_claims(revoked_by_jti)["jti"])
    revoked_by_subject = issue(path, "sam@example.com", "alpha")
    revoked_legacy = "sk_mallory_" + secrets.token_hex(12)
    add_legacy_tokens(path, {
        "carol": {"token": tokens["legacy alpha"], "access_tags": ["alpha"]},
        "dave": {"token": tokens["legacy both"], "access_tags": ["alpha", "beta"], "description": "both teams"},
        "mallory": {"token": revoked_legacy, "access_tags": ["alpha"]},
    })
    revoke(path, "sam@example.com")
    revoke(path, "mallory")
    access_cli("access", "rotate", "--alg", "EdDSA", "--access", path)
    eddsa = access_data(path)["keys"][-1]
    tokens["alpha, signed with EdDSA"] = issue(path, "eve@example.com", "alpha")
    assert jwt.get_unverified_header(tokens["alpha, signed with EdDSA"])["alg"] == "EdDSA"

    everything = ["alpha", "beta"]
    refused = {
        "alg none": (hand_signed({"alg": "none", "typ": "JWT", "kid": hs256["kid"]}, claims_for("x", everything), None),
                     {"wrong algorithm", "malformed token", "bad signature"}),
        "alg none without kid": (hand_signed({"alg": "none", "typ": "JWT"}, claims_for("x", everything), None),
                                 {"missing key id", "wrong algorithm", "malformed token"}),
        "wrong key": (jwt.encode(claims_for("x", everything), secrets.token_bytes(32), algorithm="HS256",
                                 headers={"kid": hs256["kid"]}), {"bad signature"}),
        "HS256 with the EdDSA public key as secret": (
            hand_signed({"alg": "HS256", "typ": "JWT", "kid": eddsa["kid"]}, claims_for("x", everything),
                        eddsa["public_key"].encode()), {"wrong algorithm"}),
        "HS256 with the EdDSA public key as secret, HS256 kid": (
            hand_signed({"alg": "HS256", "typ": "JWT", "kid": hs256["kid"]}, claims_for("x", everything),
                        eddsa["public_key"].encode()), {"bad signature"}),
        "changed payload": (with_payload_changed(tokens["alpha"], access_tags=everything), {"bad signature"}),
        "changed payload, EdDSA": (with_payload_changed(tokens["alpha, signed with EdDSA"], access_tags=everything),
                                   {"bad signature"}),
        "wrong aud": (jwt.encode(claims_for("x", everything, aud="https://other.test"), hmac_secret(hs256),
                                 algorithm="HS256", headers={"kid": hs256["kid"]}), {"wrong audience"}),
        "wrong iss": (jwt.encode(claims_for("x", everything, iss="https://other.test"), hmac_secret(hs256),
                                 algorithm="HS256", headers={"kid": hs256["kid"]}), {"wrong issuer"}),
        "expired": (jwt.encode(claims_for("x", everything, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600),
                               hmac_secret(hs256), algorithm="HS256", headers={"kid": hs256["kid"]}), {"expired"}),
        "revoked jti": (revoked_by_jti, {"revoked"}),
        "revoked subject": (revoked_by_subject, {"revoked"}),
        "revoked legacy name": (revoked_legacy, {"revoked"}),
        "garbage aaa.bbb.ccc": ("aaa.bbb.ccc", {"malformed token"}),
        "garbage header with unknown kid": (f"{b64url_json({'alg': 'HS256', 'kid': 'nope'})}.e30.c2ln",
                                            {"unknown key id"}),
        "garbage with empty signature": (f"{b64url_json({'alg': 'HS256', 'kid': hs256['kid']})}.e30.",
                                         {"wrong algorithm", "malformed token", "bad signature",
                                          "missing claim: iss", "missing claim: exp"}),
        "garbage, 9 KiB": ("eyJ" + "A" * 9000 + ".e30.c2ln", {"malformed token"}),
    }
    apps = {name: make_app(folder, path) for name, folder in folders.items()}
    return World(folders, path, tokens, refused, apps)


def connect(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test")


@pytest.fixture
async def full(world: World) -> AsyncIterator[httpx.AsyncClient]:
    async with connect(world.apps["full"]) as client:
        yield client


# ---- asking ------------------------------------------------------------------------------------------------


def query(vector: np.ndarray, count_type: str = "bit", count: int = 1000, omit: str = "embedding") -> dict[str, Any]:
    return {"query_embedding": b64(vector), "query_embedding_model": TEST_MODEL, "count": count,
            "count_type": count_type, "omit": omit}


def carrying(token: str | None, via: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """Request options presenting `token` as the body's `access_token` field ("field"), a Bearer header
    ("bearer"), or the URL's `access_token` parameter ("url", which every door refuses)."""
    if token is None:
        return {"json": fields} if fields is not None else {}
    if via == "url":
        return {"params": {"access_token": token}, **({"json": fields} if fields is not None else {})}
    if via == "bearer":
        options: dict[str, Any] = {"headers": {"Authorization": f"Bearer {token}"}}
        if fields is not None:
            options["json"] = fields
        return options
    assert fields is not None, "only a query body has an access_token field"
    return {"json": {**fields, "access_token": token}}


async def ask(client: httpx.AsyncClient, fields: dict[str, Any], token: str | None = None,
              via: str = "field") -> httpx.Response:
    return await client.post("/", **carrying(token, via, fields))


async def answer(client: httpx.AsyncClient, fields: dict[str, Any], token: str | None = None,
                 via: str = "field") -> dict[str, Any]:
    response = await ask(client, fields, token, via)
    assert response.status_code == 200, response.text
    return response.json()


def kinds(result: dict[str, Any]) -> dict[str, int]:
    """How many returned bits are public, alpha and beta (from their URLs)."""
    found = {"public": 0, "alpha": 0, "beta": 0}
    for bit in result["bits"]:
        found[bit["info"]["url"].split("/")[3]] += 1
    return found


def assert_clean(response: httpx.Response, *forbidden: str) -> None:
    """Neither the body nor any header holds a forbidden string."""
    shown = response.text + "\n" + "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    for text in forbidden:
        assert text not in shown, f"{text[:24]}... shown in a response"


def assert_refused(response: httpx.Response, token: str, reasons: set[str], world: World) -> None:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert list(response.json()) == ["error"]
    assert "\n" not in error and error.startswith("the access token was refused: ")
    assert error.removeprefix("the access token was refused: ") in reasons, error
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    assert_clean(response, token, *token.split(".")[1:2], *world.secrets(), "confidential")


# ---- restricted bits never show, and change nothing ---------------------------------------------------------


@pytest.mark.parametrize("count_type, count", BUDGETS, ids=[f"{t}-{c}" for t, c in BUDGETS])
async def test_an_anonymous_answer_is_byte_identical_to_a_host_without_the_private_files(
    world: World, count_type: str, count: int
) -> None:
    async with connect(world.apps["bare"]) as bare, connect(world.apps["elsewhere"]) as elsewhere, \
            connect(world.apps["full"]) as full:
        for name, vector in QUERIES.items():
            fields = query(vector, count_type, count, omit="")
            reference = await ask(bare, fields)
            for other in (elsewhere, full):
                response = await ask(other, fields)
                assert response.status_code == 200
                assert response.content == reference.content, f"query aimed at {name}"
                assert_clean(response, *PRIVATE_MARKERS)


async def test_an_anonymous_msgpack_answer_is_byte_identical_too(world: World) -> None:
    async with connect(world.apps["bare"]) as bare, connect(world.apps["full"]) as full:
        fields = query(QUERIES["alpha file"], "token", 29, omit="")
        headers = {"Accept": "application/msgpack"}
        reference = await bare.post("/", json=fields, headers=headers)
        response = await full.post("/", json=fields, headers=headers)

    assert response.headers["content-type"] == "application/msgpack"
    assert response.content == reference.content


@pytest.mark.parametrize("count_type, count", [("token", 29), ("bit", 3)])
async def test_the_private_bits_would_have_ranked_first_for_a_holder(
    full: httpx.AsyncClient, world: World, count_type: str, count: int
) -> None:
    """The comparisons above mean something: these queries do reach private bits when allowed."""
    anonymous = await answer(full, query(QUERIES["alpha file"], count_type, count))
    holder = await answer(full, query(QUERIES["alpha file"], count_type, count), world.tokens["alpha"])

    assert holder["bits"][0]["info"]["url"] == "https://example.com/alpha/0"
    assert kinds(anonymous)["alpha"] == 0 and anonymous != holder


async def test_an_anonymous_ranking_is_the_brute_force_ranking_of_the_public_bits(full: httpx.AsyncClient) -> None:
    result = await answer(full, query(QUERIES["alpha inline"], "bit", 1000))

    expected = [f"https://example.com/public/{row}" for row in brute_force_ranking(PUBLIC, QUERIES["alpha inline"])]
    assert [bit["info"]["url"] for bit in result["bits"]] == expected
    assert result["details"] == {"counts": {"bits": 10}, "best_score": result["bits"][0]["similarity"]}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Enough bits for approximate search: 300 public, and 150 `alpha` ones between them plus 100 `beta` in a file."""
    root = tmp_path_factory.mktemp("access_http_big")
    vectors = unit_vectors(300, DIMENSION, seed=90)
    public = [make_bit("public", n, vector, 3 + n % 17) for n, vector in enumerate(vectors)]
    alpha = private_bits("alpha", unit_vectors(150, DIMENSION, seed=91), access_tag="alpha")
    mixed = [bit for pair in zip(public[:150], alpha) for bit in pair] + public[150:]
    write_library(root / "bare" / "libraries" / "public.json", library(public))
    write_library(root / "full" / "libraries" / "public.json", library(mixed))
    write_library(root / "full" / "libraries" / "access" / "beta" / "plans.json",
                  library(private_bits("beta", unit_vectors(100, DIMENSION, seed=92))))
    return {"bare": root / "bare" / "libraries", "full": root / "full" / "libraries"}


@pytest.mark.parametrize("search", [{"search": "approximate", "oversample": 8},
                                    {"search": "auto", "approximate_from": 400, "oversample": 8}],
                         ids=["approximate", "auto, over the threshold only with the private bits"])
async def test_an_anonymous_answer_is_byte_identical_with_approximate_search_too(
    big: dict[str, Path], world: World, search: dict[str, Any]
) -> None:
    async with connect(make_app(big["bare"], world.access, **search)) as bare, \
            connect(make_app(big["full"], world.access, **search)) as full:
        for vector in unit_vectors(12, DIMENSION, seed=93):
            for count_type, count in [("bit", 3), ("bit", 10), ("token", 40)]:
                fields = query(vector, count_type, count, omit="")
                reference = await ask(bare, fields)
                response = await ask(full, fields)
                assert response.status_code == 200
                assert response.content == reference.content


# ---- restricted counts and message ---------------------------------------------------------------------


@pytest.fixture
def restricted_access(tmp_path: Path) -> Path:
    """A fresh access file from the CLI, for changing the `restricted` settings."""
    return init_access(tmp_path / "access.SECRET.json")


def without_best_score(details: dict[str, Any]) -> dict[str, Any]:
    """An answer's details but the best bit's score (the tests above check it)."""
    return {key: value for key, value in details.items() if key != "best_score"}


HOLDER_OF = {("alpha",): "alpha", ("beta",): "beta", ("alpha", "beta"): "both"}


async def test_restricted_counts_are_absent_by_default(full: httpx.AsyncClient, world: World) -> None:
    for token in (None, world.tokens["alpha"]):
        result = await answer(full, query(QUERIES["alpha file"]), token)
        assert set(result["details"]) == {"counts", "best_score"}
        assert set(result["details"]["counts"]) == {"bits"}


@pytest.mark.parametrize("subject_tags, held_back", [((), ALPHA_BITS + BETA_BITS), (("alpha",), BETA_BITS),
                                                      (("beta",), ALPHA_BITS), (("alpha", "beta"), 0)])
async def test_the_restricted_count_is_the_number_of_bits_held_back(
    world: World, restricted_access: Path, subject_tags: tuple[str, ...], held_back: int
) -> None:
    set_restricted(restricted_access, count=True)
    token = issue(restricted_access, "reader", *subject_tags) if subject_tags else None
    async with connect(make_app(world.folders["full"], restricted_access)) as client:
        counted = await answer(client, query(QUERIES["random"], "bit", 1000), token)
    async with connect(world.apps["full"]) as client:
        plain = await answer(client, query(QUERIES["random"], "bit", 1000), HOLDER_OF.get(subject_tags)
                             and world.tokens[HOLDER_OF[subject_tags]])

    assert counted["details"]["counts"] == {"bits": 10 + sum(ALPHA_BITS if t == "alpha" else BETA_BITS
                                                              for t in subject_tags), "restricted": held_back}
    assert "message" not in counted["details"]
    assert counted["bits"] == plain["bits"]  # counting changes nothing else


async def test_the_restricted_count_follows_the_budget(world: World, restricted_access: Path) -> None:
    set_restricted(restricted_access, count=True)
    async with connect(make_app(world.folders["full"], restricted_access)) as client:
        aimed_at_private = await answer(client, query(QUERIES["alpha file"], "bit", 1))
        aimed_at_public = await answer(client, query(QUERIES["public"], "bit", 1))

    assert aimed_at_private["details"]["counts"] == {"bits": 1, "restricted": 1}
    assert aimed_at_public["details"]["counts"] == {"bits": 1, "restricted": 0}


async def test_the_restricted_message_is_shown_only_when_something_was_held_back(
    world: World, restricted_access: Path
) -> None:
    set_restricted(restricted_access, message="Ask the librarian for access.")
    both = issue(restricted_access, "reader", "alpha", "beta")
    async with connect(make_app(world.folders["full"], restricted_access)) as client:
        anonymous = await answer(client, query(QUERIES["alpha file"], "bit", 1000))
        holder_of_all = await answer(client, query(QUERIES["alpha file"], "bit", 1000), both)
        nothing_held_back = await answer(client, query(QUERIES["public"], "bit", 1))

    assert without_best_score(anonymous["details"]) == {
        "counts": {"bits": 10}, "message": "Restricted results were omitted. Ask the librarian for access."}
    assert without_best_score(holder_of_all["details"]) == {"counts": {"bits": 10 + ALPHA_BITS + BETA_BITS}}
    assert without_best_score(nothing_held_back["details"]) == {"counts": {"bits": 1}}


async def test_a_host_without_private_bits_never_shows_the_restricted_message(
    world: World, restricted_access: Path
) -> None:
    set_restricted(restricted_access, count=True, message="Ask the librarian.")
    async with connect(make_app(world.folders["bare"], restricted_access)) as client:
        result = await answer(client, query(QUERIES["alpha file"], "bit", 1000))

    assert without_best_score(result["details"]) == {"counts": {"bits": 10, "restricted": 0}}


# ---- which token sees what -----------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["field", "bearer"])
@pytest.mark.parametrize("credential, expected", [
    (None, {"public": 10, "alpha": 0, "beta": 0}),
    ("alpha", {"public": 10, "alpha": ALPHA_BITS, "beta": 0}),
    ("alpha, signed with EdDSA", {"public": 10, "alpha": ALPHA_BITS, "beta": 0}),
    ("beta", {"public": 10, "alpha": 0, "beta": BETA_BITS}),
    ("both", {"public": 10, "alpha": ALPHA_BITS, "beta": BETA_BITS}),
    ("legacy alpha", {"public": 10, "alpha": ALPHA_BITS, "beta": 0}),
    ("legacy both", {"public": 10, "alpha": ALPHA_BITS, "beta": BETA_BITS}),
])
async def test_a_token_sees_exactly_the_bits_of_its_tags(
    full: httpx.AsyncClient, world: World, credential: str | None, expected: dict[str, int], via: str
) -> None:
    token = world.tokens[credential] if credential else None

    result = await answer(full, query(QUERIES["random"], "bit", 1000), token, via)

    assert kinds(result) == expected
    assert all("access_tag" not in bit for bit in result["bits"])


async def test_a_legacy_token_works_from_the_python_client_s_multipart_form(full: httpx.AsyncClient,
                                                                          world: World) -> None:
    fields = {key: str(value) for key, value in query(QUERIES["alpha file"], "bit", 1000).items()}
    fields["access_token"] = world.tokens["legacy alpha"]

    response = await full.post("/", files={name: (None, value) for name, value in fields.items()})

    assert kinds(response.json()) == {"public": 10, "alpha": ALPHA_BITS, "beta": 0}


@pytest.mark.parametrize("token", ["sk_nobody_knows_this", "not-a-jwt", "two.dots", "sk_" + "x" * 5000])
async def test_an_unknown_opaque_token_is_anonymous_not_refused(full: httpx.AsyncClient, token: str) -> None:
    anonymous = await ask(full, query(QUERIES["alpha file"]))

    for via in ("field", "bearer"):
        response = await ask(full, query(QUERIES["alpha file"]), token, via)
        assert response.status_code == 200
        assert response.content == anonymous.content
        assert_clean(response, token)


@pytest.mark.parametrize("options", [
    {"json": {"access_token": ""}},
    {"json": {"access_token": "   "}},
    {"headers": {"Authorization": "Bearer "}},
    {"headers": {"Authorization": "Bearer"}},
], ids=["empty field", "blank field", "empty bearer", "bare bearer"])
async def test_an_empty_access_token_is_anonymous(full: httpx.AsyncClient, options: dict[str, Any]) -> None:
    anonymous = await ask(full, query(QUERIES["alpha file"]))
    fields = {**query(QUERIES["alpha file"]), **options.get("json", {})}

    response = await full.post("/", json=fields, headers=options.get("headers", {}))

    assert response.status_code == 200
    assert response.content == anonymous.content
    assert response.headers["cache-control"].startswith("public")


# ---- the result cache never leaks ----------------------------------------------------------------------


async def _reference(world: World, fields: dict[str, Any], token: str | None) -> bytes:
    """The answer from a host that has never answered anything (an empty cache)."""
    async with connect(make_app(world.folders["full"], world.access)) as client:
        response = await ask(client, fields, token)
    assert response.status_code == 200
    return response.content


@pytest.mark.parametrize("order", [("alpha", None), (None, "alpha"), ("alpha", "beta"), ("beta", "alpha"),
                                   ("both", None), (None, "both")])
async def test_the_result_cache_gives_every_caller_their_own_answer(world: World, order: tuple) -> None:
    fields = query(QUERIES["alpha inline"], "token", 120, omit="")
    async with connect(make_app(world.folders["full"], world.access)) as client:
        answers = [await ask(client, fields, world.tokens[name] if name else None) for name in order]
        again = [await ask(client, fields, world.tokens[name] if name else None) for name in order]

    for name, response, repeated in zip(order, answers, again):
        expected = await _reference(world, fields, world.tokens[name] if name else None)
        assert response.content == expected, f"first answer for {name or 'anonymous'}"
        assert repeated.content == expected, f"cached answer for {name or 'anonymous'}"
    assert answers[0].content != answers[1].content


async def test_a_revoked_token_is_refused_right_after_its_answer_was_cached(world: World, tmp_path: Path) -> None:
    path = init_access(tmp_path / "access.SECRET.json")
    token = issue(path, "leaver@example.com", "alpha")
    fields = query(QUERIES["alpha file"])
    async with connect(make_app(world.folders["full"], path, check_interval=0)) as client:
        first = await ask(client, fields, token)
        cached = await ask(client, fields, token)
        hits = (await client.get("/metrics")).text
        revoke(path, unverified_claims(token)["jti"])
        after = await ask(client, fields, token)
        bearer_after = await ask(client, fields, token, "bearer")

    assert first.status_code == cached.status_code == 200 and cached.content == first.content
    assert "polymath_query_cache_hits_total 1" in hits
    assert_refused(after, token, {"revoked"}, world)
    assert_refused(bearer_after, token, {"revoked"}, world)


# ---- ETags of /libraries/{name}.json ------------------------------------------------------------------


async def fetch(world: World, folder: str, path: str, token: str | None = None, via: str = "bearer",
                headers: dict[str, str] | None = None) -> httpx.Response:
    async with connect(world.apps[folder]) as client:
        options = carrying(token, via)
        options["headers"] = {**options.get("headers", {}), **(headers or {})}
        return await client.get(path, **options)


async def test_the_anonymous_etag_ignores_private_bits_elsewhere_and_in_the_same_library(world: World) -> None:
    responses = {folder: await fetch(world, folder, "/libraries/public.json")
                 for folder in ("bare", "elsewhere", "full")}

    assert {response.status_code for response in responses.values()} == {200}
    assert len({response.headers["etag"] for response in responses.values()}) == 1
    assert len({response.content for response in responses.values()}) == 1
    assert_clean(responses["full"], *PRIVATE_MARKERS)


async def test_the_anonymous_etag_changes_when_public_content_changes(world: World) -> None:
    bare = await fetch(world, "bare", "/libraries/public.json")
    edited = await fetch(world, "edited", "/libraries/public.json")

    assert edited.headers["etag"] != bare.headers["etag"]


async def test_a_holder_who_sees_more_gets_another_etag(world: World) -> None:
    anonymous = await fetch(world, "full", "/libraries/public.json")
    alpha = await fetch(world, "full", "/libraries/public.json", world.tokens["alpha"])
    both = await fetch(world, "full", "/libraries/public.json", world.tokens["both"])
    beta_with_nothing_more = await fetch(world, "elsewhere", "/libraries/public.json", world.tokens["beta"])
    anonymous_elsewhere = await fetch(world, "elsewhere", "/libraries/public.json")

    assert len({anonymous.headers["etag"], alpha.headers["etag"], both.headers["etag"]}) == 3
    assert alpha.json()["details"]["counts"]["bits"] == 10 + len(ALPHA_INLINE)
    assert beta_with_nothing_more.headers["etag"] == anonymous_elsewhere.headers["etag"]


async def test_a_holder_s_etag_sent_anonymously_never_gets_a_304(world: World) -> None:
    anonymous = await fetch(world, "full", "/libraries/public.json")
    alpha = await fetch(world, "full", "/libraries/public.json", world.tokens["alpha"])
    notes = await fetch(world, "full", "/libraries/access/alpha/notes.json", world.tokens["alpha"])

    own = await fetch(world, "full", "/libraries/public.json", headers={"If-None-Match": anonymous.headers["etag"]})
    holders = await fetch(world, "full", "/libraries/public.json", headers={"If-None-Match": alpha.headers["etag"]})
    private = await fetch(world, "full", "/libraries/access/alpha/notes.json",
                          headers={"If-None-Match": notes.headers["etag"]})
    beta_holder = await fetch(world, "full", "/libraries/access/alpha/notes.json", world.tokens["beta"],
                              headers={"If-None-Match": notes.headers["etag"]})
    holder_with_anonymous_etag = await fetch(world, "full", "/libraries/public.json", world.tokens["alpha"],
                                             headers={"If-None-Match": anonymous.headers["etag"]})

    assert own.status_code == 304  # conditional GET works, so the refusals below are meaningful
    assert holders.status_code == 200 and holders.content == anonymous.content
    assert private.status_code == 404 and beta_holder.status_code == 404
    assert_clean(private, "confidential", notes.headers["etag"].strip('"'))
    assert holder_with_anonymous_etag.status_code == 200 and holder_with_anonymous_etag.content == alpha.content


# ---- /libraries and private library files ------------------------------------------------------------------


async def test_libraries_hides_private_libraries_from_anonymous_callers(world: World) -> None:
    bare = await fetch(world, "bare", "/libraries")
    full = await fetch(world, "full", "/libraries")

    assert full.json() == {"libraries": [{"name": "public", "url": "/libraries/public.json",
                                          "embedding_model": TEST_MODEL, "dimension": DIMENSION, "bits": 10}]}
    assert full.content == bare.content
    assert_clean(full, *PRIVATE_MARKERS, "notes", "plans")


@pytest.mark.parametrize("credential, expected", [
    ("alpha", {"public": 10 + len(ALPHA_INLINE), "access/alpha/notes": len(ALPHA_FILE)}),
    ("beta", {"public": 10 + len(BETA_INLINE), "access/beta/plans": len(BETA_FILE)}),
    ("legacy both", {"public": 15, "access/alpha/notes": 4, "access/beta/plans": 4}),
])
async def test_libraries_lists_what_a_token_may_see(world: World, credential: str, expected: dict[str, int]) -> None:
    response = await fetch(world, "full", "/libraries", world.tokens[credential])

    assert {entry["name"]: entry["bits"] for entry in response.json()["libraries"]} == expected


@pytest.mark.parametrize("credential, status", [(None, 404), ("beta", 404), ("legacy alpha", 200), ("alpha", 200),
                                                ("both", 200), ("sk_unknown_opaque", 404)])
async def test_a_private_library_file_is_served_only_to_its_tag(world: World, credential: str | None, status: int) -> None:
    token = world.tokens.get(credential, credential) if credential else None

    response = await fetch(world, "full", "/libraries/access/alpha/notes.json", token)
    missing = await fetch(world, "full", "/libraries/access/alpha/nothing.json", token)

    assert response.status_code == status
    if status == 200:
        assert kinds(response.json()) == {"public": 0, "alpha": len(ALPHA_FILE), "beta": 0}
    else:
        # Exactly as if it did not exist: the same message, naming only what the caller asked for.
        assert response.json()["error"] == missing.json()["error"].replace("nothing", "notes")
        assert_clean(response, "confidential", *world.secrets(), *([token] if token else []))


async def test_a_model_served_only_by_private_libraries_is_not_revealed(world: World, tmp_path: Path) -> None:
    """A private-only model is neither listed in errors nor answerable, and does not stop the default model."""
    libraries = tmp_path / "libraries"
    write_library(libraries / "public.json", library(public_bits()))
    write_library(libraries / "access" / "alpha" / "secret-model.json",
                  {**library(private_bits("alpha", unit_vectors(2, 4, seed=80))), "embedding_model": "acme:secret-4"})
    async with connect(make_app(libraries, world.access)) as client, \
            connect(world.apps["bare"]) as bare:
        unnamed = await ask(client, {k: v for k, v in query(QUERIES["random"]).items() if k != "query_embedding_model"})
        reference = await ask(bare, {k: v for k, v in query(QUERIES["random"]).items() if k != "query_embedding_model"})
        named = await ask(client, {**query(unit_vectors(1, 4, seed=81)[0]), "query_embedding_model": "acme:secret-4"})
        unknown = await ask(client, {**query(QUERIES["random"]), "query_embedding_model": "acme:nothing-4"})
        holder = await ask(client, {**query(unit_vectors(1, 4, seed=81)[0]), "query_embedding_model": "acme:secret-4"},
                           world.tokens["alpha"])

    assert unnamed.status_code == 200 and unnamed.content == reference.content
    assert named.status_code == unknown.status_code == 400
    assert named.json()["error"] == unknown.json()["error"].replace("acme:nothing-4", "acme:secret-4")
    assert_clean(unknown, "acme:secret-4", "confidential")
    assert holder.status_code == 200 and kinds(holder.json())["alpha"] == 2


async def test_with_restricted_counts_on_a_private_only_model_answers_with_the_count(
    tmp_path: Path, restricted_access: Path
) -> None:
    """The admin opted in to saying that bits were held back, so the model is answered, with nothing in it."""
    set_restricted(restricted_access, count=True)
    libraries = tmp_path / "libraries"
    write_library(libraries / "public.json", library(public_bits()))
    write_library(libraries / "access" / "alpha" / "secret-model.json",
                  {**library(private_bits("alpha", unit_vectors(2, 4, seed=80))), "embedding_model": "acme:secret-4"})
    async with connect(make_app(libraries, restricted_access)) as client:
        result = await answer(client, {**query(unit_vectors(1, 4, seed=81)[0]),
                                       "query_embedding_model": "acme:secret-4"})

    assert result["bits"] == [] and result["details"]["counts"] == {"bits": 0, "restricted": 2}


@pytest.mark.parametrize("signal", ["count", "message"])
async def test_with_restricted_signals_on_a_private_only_model_is_still_never_named_nor_the_default(
    tmp_path: Path, restricted_access: Path, signal: str
) -> None:
    set_restricted(restricted_access, **({"count": True} if signal == "count" else {"message": "Ask us."}))
    libraries = tmp_path / "libraries"
    write_library(libraries / "public.json", library(public_bits()))
    write_library(libraries / "access" / "alpha" / "secret-model.json",
                  {**library(private_bits("alpha", unit_vectors(2, 4, seed=80))), "embedding_model": "acme:secret-4"})
    async with connect(make_app(libraries, restricted_access)) as client:
        unnamed = await ask(client, {k: v for k, v in query(QUERIES["random"]).items() if k != "query_embedding_model"})
        unknown = await ask(client, {**query(QUERIES["random"]), "query_embedding_model": "acme:nothing-4"})

    assert unnamed.status_code == 200 and unnamed.json()["embedding_model"] == TEST_MODEL
    assert unknown.status_code == 400
    assert_clean(unknown, "acme:secret-4", "confidential")


# ---- every token failure is a 401 ---------------------------------------------------------------------


ENDPOINTS = ["POST /", "GET /libraries", "GET /libraries/public.json", "GET /libraries/access/alpha/notes.json"]
# A GET has no body: its token comes only as Bearer (a token in a URL is refused: tests/test_tokens_in_urls.py).
ENDPOINT_WAYS = [("POST /", "field"), *((endpoint, "bearer") for endpoint in ENDPOINTS)]


@pytest.mark.parametrize("endpoint, via", ENDPOINT_WAYS)
@pytest.mark.parametrize("failure", [
    "alg none", "alg none without kid", "wrong key", "HS256 with the EdDSA public key as secret",
    "HS256 with the EdDSA public key as secret, HS256 kid", "changed payload", "changed payload, EdDSA",
    "wrong aud", "wrong iss", "expired", "revoked jti", "revoked subject", "revoked legacy name",
    "garbage aaa.bbb.ccc", "garbage header with unknown kid", "garbage with empty signature", "garbage, 9 KiB",
])
async def test_every_token_failure_is_a_401_with_a_reason_and_a_challenge(
    full: httpx.AsyncClient, world: World, failure: str, via: str, endpoint: str
) -> None:
    token, reasons = world.refused[failure]
    method, path = endpoint.split(" ")

    if method == "POST":
        response = await ask(full, query(QUERIES["alpha file"]), token, via)
    else:
        response = await full.get(path, **carrying(token, via))

    assert_refused(response, token, reasons, world)


# ---- cache headers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint, via", [*ENDPOINT_WAYS, ("GET /libraries/access/beta/plans.json", "bearer")])
@pytest.mark.parametrize("credential", ["alpha", "legacy alpha", "sk_unknown_opaque"])
async def test_a_response_to_a_request_carrying_a_token_is_private(
    full: httpx.AsyncClient, world: World, credential: str, via: str, endpoint: str
) -> None:
    token = world.tokens.get(credential, credential)
    method, path = endpoint.split(" ")

    if method == "POST":
        response = await ask(full, query(QUERIES["alpha file"]), token, via)
    else:
        response = await full.get(path, **carrying(token, via))

    assert response.status_code in (200, 404)
    assert response.headers["cache-control"].startswith("private")
    assert "authorization" in response.headers["vary"].lower()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_an_anonymous_response_is_not_private(full: httpx.AsyncClient, endpoint: str) -> None:
    method, path = endpoint.split(" ")

    response = await (full.post("/", json=query(QUERIES["alpha file"])) if method == "POST" else full.get(path))

    assert "private" not in response.headers.get("cache-control", "")
    assert "authorization" in response.headers.get("vary", "").lower()


async def test_a_304_to_a_token_holder_is_private_too(world: World) -> None:
    first = await fetch(world, "full", "/libraries/public.json", world.tokens["alpha"])
    again = await fetch(world, "full", "/libraries/public.json", world.tokens["alpha"],
                        headers={"If-None-Match": first.headers["etag"]})

    assert again.status_code == 304
    assert again.headers["cache-control"].startswith("private")


# ---- key rotation ------------------------------------------------------------------------------------


async def test_a_token_survives_rotation_until_its_key_is_removed(world: World, tmp_path: Path) -> None:
    path = init_access(tmp_path / "access.SECRET.json")
    old_kid = access_data(path)["keys"][0]["kid"]
    before = issue(path, "ann@example.com", "alpha")
    fields = query(QUERIES["alpha file"])
    async with connect(make_app(world.folders["full"], path, check_interval=0)) as client:
        access_cli("access", "rotate", "--access", path)
        after = issue(path, "ann@example.com", "alpha")
        old_after_rotation = await ask(client, fields, before)
        new_after_rotation = await ask(client, fields, after)
        access_cli("access", "remove-key", old_kid, "--access", path)
        old_after_removal = await ask(client, fields, before)
        new_after_removal = await ask(client, fields, after)

    assert jwt.get_unverified_header(after)["kid"] != old_kid
    assert kinds(old_after_rotation.json())["alpha"] == ALPHA_BITS
    assert kinds(new_after_rotation.json())["alpha"] == ALPHA_BITS
    assert_refused(old_after_removal, before, {"unknown key id"}, world)
    assert kinds(new_after_removal.json())["alpha"] == ALPHA_BITS


# ---- a real server -----------------------------------------------------------------------------------


def poll(check: Any, seconds: float = 3.0) -> Any:
    """Call `check` until it returns something truthy, for up to `seconds`; its last value."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def real_query(url: str, token: str | None = None, via: str = "field") -> httpx.Response:
    return httpx.post(url, timeout=10, **carrying(token, via, query(QUERIES["alpha file"])))


def test_a_running_host_follows_access_file_changes_without_a_restart(world: World, run_host: Any,
                                                                       tmp_path: Path) -> None:
    libraries = tmp_path / "libraries"
    write_library(libraries / "public.json", interleaved_public_json())
    write_private_files(libraries)
    path = init_access(tmp_path / "access.SECRET.json")
    host = run_host(libraries, "--access", str(path))
    assert kinds(real_query(host.url).json())["alpha"] == 0

    # A key and a token the host has never seen, made by the real command in its own process.
    access_cli("access", "rotate", "--access", path)
    issued = subprocess.run([sys.executable, "-m", "host", "token", "issue", "zoe@example.com", "--tag", "alpha",
                             "--access", str(path)], capture_output=True, text=True, cwd=PROJECT, check=True)
    token = issued.stdout.strip()
    seen = poll(lambda: (response := real_query(host.url, token)).status_code == 200 and response)
    assert seen, "the new token was not accepted within 3 s"
    assert kinds(seen.json())["alpha"] == ALPHA_BITS

    revoke(path, "zoe@example.com")
    refused = poll(lambda: (response := real_query(host.url, token, "bearer")).status_code == 401 and response)
    assert refused, "the revoked token was still accepted after 3 s"
    assert refused.json()["error"] == "the access token was refused: revoked"
    assert host.process.poll() is None


def test_the_server_log_never_holds_a_token_or_a_key_secret(world: World, run_host: Any) -> None:
    from conftest import stop_host

    host = run_host(world.folders["full"], "--access", str(world.access), "--log-level", "debug",
                    cwd=world.access.parent)
    tokens = [world.tokens["alpha"], world.tokens["legacy both"], world.tokens["alpha, signed with EdDSA"],
              *(world.refused[name][0] for name in ("wrong key", "changed payload", "revoked jti",
                                                     "revoked legacy name", "expired")),
              "sk_unknown_opaque_" + secrets.token_hex(8)]
    statuses = []
    for token in tokens:
        for via in ("field", "bearer", "url"):  # a token in a URL is refused, and never logged either
            statuses.append(real_query(host.url, token, via).status_code)
        for via in ("bearer", "url"):
            statuses.append(httpx.get(f"{host.url}/libraries/access/alpha/notes.json", timeout=10,
                                      **carrying(token, via)).status_code)
    stop_host(host)
    log = host.log()

    assert {200, 400, 401, 404} <= set(statuses)
    assert log.count('"status": 401') >= 10 and log.count('"status": 200') >= 5  # this is the right log
    for token in tokens:
        assert token not in log
        for segment in token.split(".")[1:]:
            assert len(segment) < 8 or segment not in log
    for secret in world.secrets():
        for line in secret.splitlines():
            if len(line) >= 16:
                assert line not in log
