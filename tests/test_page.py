"""The page (SPEC §9) without a browser: `GET /` in-process over httpx, its data, its safety.

The world, on disk:

- `science.json`: 10 public bits of model test:unit-8, with `details.message` as its description;
  in the `private` world the same file also holds 2 bits tagged `team`;
- `odd names/100% sure #1?.json`: 3 public bits whose links and titles are hostile, in a library
  whose name needs percent-encoding;
- in the `private` world only: `access/team/drafts.json` (3 bits of test:unit-8) and
  `access/team/secret-model.json` (a model only private libraries serve).

A caller without a token must get byte for byte what a host without the private bits gives.
Text queries use the real OpenAI-compatible embedder against a real local embedding service
(tests/embedding_service.py), on a library of model test:remote-16.
"""

from __future__ import annotations

import html
import json
import re
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from embedding_service import EmbeddingService, Reply, running_service, unit_vector
from librarian import TEST_MODEL, brute_force_ranking, make_bit, reference_budget, unit_vectors, write_library
from starlette.applications import Starlette

from access import AccessControl
from access.keys import generate_key_entry
from access.tokens import issue_token
from host.catalog.generations import load_catalog
from host.embedders.openai_http import OpenAIEmbedder
from host.embedders.service import Embedders
from host.library.canonical import canonical_id
from host.library.embeddings import decode_embedding
from host.service.settings import Settings
from host.web.app import create_app
from host.web.middleware.security_headers import CONTENT_SECURITY_POLICY
from host.web.page.maps import MAX_POINTS, principal_plane
from host.web.page.rendering import asset_versions
from host.web.page.request import MAX_BITS
from host.web.page.sampling import sample_rows

pytestmark = pytest.mark.anyio

DIMENSION = 8
PUBLIC = unit_vectors(10, DIMENSION, seed=41)
TEAM_INLINE = unit_vectors(2, DIMENSION, seed=42)
DRAFTS = unit_vectors(3, DIMENSION, seed=43)
ODD = unit_vectors(3, DIMENSION, seed=44)
SECRET_MODEL = "secret:model-4"
REMOTE = "test:remote-16"
DESCRIPTION = "Ten bits about science, <b>not bold</b> & friends."
ODD_NAME = "odd names/100% sure #1?"
HOSTILE_TITLE = '<img src=x onerror="alert(1)"> Hostile & "quoted"'
HOSTILE_TEXT = "</details></article><script>alert(document.cookie)</script> the end"
LEGACY_TOKEN = "sk_legacy_team_0123456789"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def science_bits(with_private: bool) -> list[dict[str, Any]]:
    bits = [make_bit(n, vector, 10 + n) for n, vector in enumerate(PUBLIC)]
    if with_private:
        team = [make_bit(100 + n, vector, 12, access_tag="team") for n, vector in enumerate(TEAM_INLINE)]
        bits = [*bits[:3], team[0], *bits[3:7], team[1], *bits[7:]]
    return bits


def odd_bits() -> list[dict[str, Any]]:
    return [
        make_bit(200, ODD[0], 5, info={"url": "javascript:alert(1)", "title": HOSTILE_TITLE}),
        make_bit(201, ODD[1], 5, info={"url": "java\tscript:alert(2)", "title": "Tabbed scheme",
                                       "description": "a <i>described</i> bit"}),
        {**make_bit(202, ODD[2], 5, info={"url": "https://example.com/ok?a=1&b=2", "title": "Fine link"}),
         "text": HOSTILE_TEXT},
    ]


def library(bits: list[dict[str, Any]], model: str = TEST_MODEL, **top: Any) -> dict[str, Any]:
    return {"version": 1, "embedding_model": model, "bits": bits, **top}


@dataclass(frozen=True)
class World:
    root: Path
    access: Path

    @property
    def libraries(self) -> Path:
        return self.root / "libraries"

    def app(self, embedders: Embedders | None = None, **settings: Any) -> Starlette:
        return create_app(Settings(libraries=self.libraries, cache_dir=self.root / "compiled", access=self.access,
                                   watch_interval=0, **settings), embedders=embedders or Embedders([]))


def make_world(root: Path, with_private: bool) -> World:
    write_library(root / "libraries" / "science.json",
                  library(science_bits(with_private), details={"message": DESCRIPTION}))
    write_library(root / "libraries" / f"{ODD_NAME}.json", library(odd_bits()))
    if with_private:
        drafts = [make_bit(300 + n, vector, 8) for n, vector in enumerate(DRAFTS)]
        write_library(root / "libraries" / "access" / "team" / "drafts.json",
                      library(drafts, details={"message": "Drafts nobody may know of."}))
        secret = [make_bit(400 + n, vector, 8) for n, vector in enumerate(unit_vectors(3, 4, seed=45))]
        write_library(root / "libraries" / "access" / "team" / "secret-model.json", library(secret, SECRET_MODEL))
    access = root / "access.SECRET.json"
    access.write_text(json.dumps({"issuer": "https://library.test", "keys": [generate_key_entry("HS256", "k1")],
                                  "tokens": {"legacy": {"token": LEGACY_TOKEN, "access_tags": ["team"]}}}))
    access.chmod(0o600)
    return World(root, access)


@pytest.fixture(scope="module")
def private_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("private-world"), with_private=True)


@pytest.fixture(scope="module")
def public_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("public-world"), with_private=False)


def connect(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test")


@pytest.fixture
async def client(private_world: World) -> AsyncIterator[httpx.AsyncClient]:
    async with connect(private_world.app()) as connected:
        yield connected


def team_token(world: World, **options: Any) -> str:
    return issue_token(AccessControl.from_file(world.access).settings, "bob@example.com", ["team"], **options).token


def bit_id(number: int, vector: np.ndarray, tokens: int) -> str:
    bit = make_bit(number, vector, tokens)
    return canonical_id(bit["info"]["url"], bit["text"])


PUBLIC_IDS = [bit_id(n, vector, 10 + n) for n, vector in enumerate(PUBLIC)]
TEAM_IDS = [bit_id(100 + n, vector, 12) for n, vector in enumerate(TEAM_INLINE)]
DRAFT_IDS = [bit_id(300 + n, vector, 8) for n, vector in enumerate(DRAFTS)]
ARTICLE = re.compile(r'<article class="bit[^"]*" id="[^"]+" data-bit-id="([0-9a-f]{64})"')


def shown_ids(page: str) -> list[str]:
    return ARTICLE.findall(page)


def notices(page: str) -> list[tuple[str, str]]:
    return [(level, html.unescape(text))
            for level, text in re.findall(r'<p class="notice notice-(\w+)" role="\w+">([^<]*)</p>', page)]


async def page_json(client: httpx.AsyncClient, path: str, **headers: str) -> dict[str, Any]:
    response = await client.get(path, headers={"Accept": "application/json", **headers})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


# ---- what a first visit shows ------------------------------------------------------------------------------


async def test_the_first_visit_is_a_strict_csp_page_with_the_libraries_and_a_random_sample(
        client: httpx.AsyncClient) -> None:
    response = await client.get("/")

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "public, no-store"
    assert response.headers["vary"] == "Authorization, Accept"
    page = response.text
    assert '<link rel="polymath" href="/">' in page
    assert "<style" not in page and " style=" not in page and "<script>" not in page
    assert re.search(r"<[^>]*\son[a-z]+\s*=", page) is None  # no event handler attribute anywhere
    assert '<a class="library-name" href="/?library=science">science</a>' in page
    assert "10 bits · test:unit-8" in page and "Ten bits about science, &lt;b&gt;not bold&lt;/b&gt; &amp; friends." in page
    assert "drafts" not in page and SECRET_MODEL not in page
    assert "A random sample" in page and 'class="similarity"' not in page
    assert len(shown_ids(page)) == 10 and set(shown_ids(page)) <= set(PUBLIC_IDS) | set(odd_ids())


def odd_ids() -> list[str]:
    return [canonical_id(bit["info"]["url"], bit["text"]) for bit in odd_bits()]


async def test_the_page_data_comes_as_json_to_a_program_that_asks_for_it(client: httpx.AsyncClient) -> None:
    data = await page_json(client, "/?seed=5&count=3")

    assert data["budget"] == {"count": 3, "count_type": "bit"}
    assert data["mode"] == "hybrid"
    assert data["search_available"] is True and data["search_note"].startswith("No embedder serves this host's")
    [section] = data["sections"]
    assert section["kind"] == "sample" and section["model"] == TEST_MODEL and len(section["bits"]) == 3
    assert all(bit["similarity"] is None and bit["access_tag"] is None for bit in section["bits"])
    assert section["permalink_href"] == "/?count=3&count_type=bit&seed=5"
    science = next(item for item in data["libraries"] if item["name"] == "science")
    assert science == {"name": "science", "page_href": "/?library=science", "file_href": "/libraries/science.json",
                       "map_href": "/libraries/science/map.svg", "bit_count": 10, "private_bit_count": 0,
                       "embedding_model": TEST_MODEL, "description": DESCRIPTION, "searchable": False}


async def test_a_seed_gives_the_same_sample_and_no_seed_a_fresh_one(client: httpx.AsyncClient) -> None:
    first = shown_ids((await client.get("/?seed=11")).text)
    again = shown_ids((await client.get("/?seed=11")).text)
    fresh = {tuple(shown_ids((await client.get("/")).text)) for _ in range(5)}

    assert first == again
    assert len(fresh) > 1  # 13 bits, 10 drawn in order: five equal draws would be a broken sampler


# ---- safe by construction ----------------------------------------------------------------------------------


async def test_markup_in_a_library_is_text_and_only_http_links_are_links(client: httpx.AsyncClient) -> None:
    page = (await client.get("/?count=100")).text

    assert "<img src=x" not in page and "<script>alert" not in page and "</details></article><script>" not in page
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt; Hostile &amp; &#34;quoted&#34;" in page
    assert "&lt;/details&gt;&lt;/article&gt;&lt;script&gt;alert(document.cookie)&lt;/script&gt;" in page
    assert "javascript:" not in page.replace('title="javascript:alert(1)"', "")  # shown as a tooltip, never linked
    assert 'href="java' not in page
    assert '<span title="javascript:alert(1)">' in page and '<span title="java\tscript:alert(2)">Tabbed scheme</span>' in page
    assert '<a href="https://example.com/ok?a=1&amp;b=2" rel="noopener noreferrer">Fine link</a>' in page
    assert '<p class="bit-description">a &lt;i&gt;described&lt;/i&gt; bit</p>' in page


async def test_library_urls_are_percent_encoded_and_lead_to_the_library(client: httpx.AsyncClient) -> None:
    whole_host = await page_json(client, "/")
    folder = next(item for item in whole_host["publishers"] if item["name"] == "odd names")
    assert folder["page_href"] == "/p/odd%20names/" and folder["library_count"] == 1 and folder["bit_count"] == 3
    data = await page_json(client, folder["page_href"])
    odd = next(item for item in data["libraries"] if item["name"] == ODD_NAME)

    prefix = "/p/odd%20names"
    assert odd["file_href"] == f"{prefix}/libraries/odd%20names/100%25%20sure%20%231%3F.json"
    assert odd["map_href"] == f"{prefix}/libraries/odd%20names/100%25%20sure%20%231%3F/map.svg"
    assert odd["page_href"] == f"{prefix}/?library=odd+names%2F100%25+sure+%231%3F"
    file = await client.get(odd["file_href"])
    assert file.status_code == 200 and len(file.json()["bits"]) == 3
    assert (await client.get(odd["map_href"])).headers["content-type"] == "image/svg+xml"
    library_page = await page_json(client, odd["page_href"])
    assert library_page["library"] == ODD_NAME and library_page["map"]["shown"] == 3


async def test_a_library_in_a_folder_still_has_its_page_on_the_whole_host(client: httpx.AsyncClient) -> None:
    library_page = await page_json(client, "/?library=odd+names%2F100%25+sure+%231%3F")

    assert library_page["library"] == ODD_NAME and library_page["map"]["shown"] == 3
    assert library_page["library_view"]["file_href"] == "/libraries/odd%20names/100%25%20sure%20%231%3F.json"


# ---- nothing private without a token -----------------------------------------------------------------------


PATHS = [
    "/?seed=7",
    "/?seed=7&count=100",
    "/?seed=8&count=40&count_type=token",
    f"/?like={PUBLIC_IDS[4]}",
    f"/?like={PUBLIC_IDS[4]}&count=100",
    f"/?like={TEAM_IDS[0]}&seed=3",  # a private bit's id: no different from an unknown one
    f"/?like={DRAFT_IDS[1]}&seed=3",
    "/?library=science&seed=9",
    f"/?library=science&like={PUBLIC_IDS[2]}",
    "/?library=access/team/drafts&seed=2",
    "/?library=access/team/secret-model&seed=2",
    "/?q=anything&seed=4",
    "/?q=bit+number+word3_4+word100_1&count=6",  # hybrid, by keywords here: a private bit's word counts for nothing
    "/?q=bit+number+word3_4+word100_1&mode=keyword&count=40&count_type=token",
    "/?q=number+word100_1&mode=keyword&library=science",
    "/?q=number&mode=vector&seed=4",
    "/libraries/science/map.svg",
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("accept", ["text/html", "application/json"])
async def test_without_a_token_the_page_is_byte_identical_to_a_host_without_private_bits(
        private_world: World, public_world: World, path: str, accept: str) -> None:
    # Both hosts have an embedder for the model only private libraries serve: it must change nothing.
    embedder = OpenAIEmbedder("http://127.0.0.1:9/v1", "m", model=SECRET_MODEL, dimension=4, key="-")
    async with connect(private_world.app(Embedders([embedder]))) as private, \
            connect(public_world.app(Embedders([embedder]))) as public:
        with_private = await private.get(path, headers={"Accept": accept})
        without = await public.get(path, headers={"Accept": accept})

    assert with_private.status_code == without.status_code
    assert with_private.content == without.content
    assert with_private.headers == without.headers


async def test_a_private_library_page_is_the_whole_host_with_a_notice(client: httpx.AsyncClient) -> None:
    page = (await client.get("/?library=access/team/drafts")).text

    assert notices(page) == [("warning", "There is no library named “access/team/drafts” here. "
                                         "These are the libraries of the whole host.")]
    assert (await client.get("/libraries/access/team/drafts/map.svg")).status_code == 404


# ---- a token shows what it grants, privately ---------------------------------------------------------------


async def test_a_token_shows_its_private_bits_marked_with_their_tag_and_privately(
        client: httpx.AsyncClient, private_world: World) -> None:
    token = team_token(private_world)
    response = await client.get(f"/?like={TEAM_IDS[0]}&count=100", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200
    assert response.headers["cache-control"] == "private, no-store"
    assert "Authorization" in response.headers["vary"]
    page = response.text
    ids = shown_ids(page)
    assert ids[0] == TEAM_IDS[0] and set(TEAM_IDS + DRAFT_IDS + PUBLIC_IDS) <= set(ids)
    private_cards = re.findall(r'<article class="bit bit-private" id="[^"]+" data-bit-id="([0-9a-f]{64})"', page)
    assert sorted(private_cards) == sorted(TEAM_IDS + DRAFT_IDS)
    assert page.count('<span class="tag" title="private: your token grants this tag">team</span>') == 5
    assert ("info", "Your token (bob@example.com) shows private bits tagged: team. They are marked with their tag.") \
        in notices(page)
    assert '<a class="publisher-name" href="/p/access/">access/</a>' in page and "(6 private)" in page
    assert f'data-model="{SECRET_MODEL}"' not in page  # a liked bit belongs to one model: no section for another


async def test_a_library_page_with_a_bearer_token_shows_its_private_map(client: httpx.AsyncClient,
                                                                        private_world: World) -> None:
    data = await page_json(client, "/?library=access/team/drafts", Authorization=f"Bearer {team_token(private_world)}")

    assert data["library"] == "access/team/drafts" and data["caller"] == {"subject": "bob@example.com",
                                                                           "access_tags": ["team"]}
    assert sorted(bit["id"] for bit in data["sections"][0]["bits"]) == sorted(DRAFT_IDS)
    assert all(point["private"] for point in data["map"]["points"])


async def test_the_page_refuses_a_token_in_its_url(client: httpx.AsyncClient, private_world: World) -> None:
    token = team_token(private_world)

    response = await client.get(f"/?library=access/team/drafts&access_token={token}")

    assert response.status_code == 400 and "Authorization: Bearer" in response.json()["error"]
    assert token not in response.text and "drafts" not in response.text


async def test_an_expired_token_gets_the_public_page_a_401_and_a_notice(
        client: httpx.AsyncClient, private_world: World) -> None:
    expired = team_token(private_world, expires_in=60, now=int(time.time()) - 3600)

    response = await client.get("/?seed=1", headers={"Authorization": f"Bearer {expired}"})

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    assert response.headers["cache-control"].startswith("private")
    assert notices(response.text) == [("error", "The access token was refused: expired. Ask for a new token; "
                                                "until then the page shows what anyone may see.")]
    public = (await client.get("/?seed=1")).text
    assert shown_ids(response.text) == shown_ids(public)
    as_json = await client.get("/", headers={"Authorization": f"Bearer {expired}", "Accept": "application/json"})
    assert as_json.status_code == 401 and as_json.json() == {"error": "the access token was refused: expired"}


async def test_a_token_this_host_does_not_know_is_said_to_grant_nothing(client: httpx.AsyncClient) -> None:
    response = await client.get("/?seed=1", headers={"Authorization": "Bearer sk_nobody_knows_this_one"})

    assert response.status_code == 200 and response.headers["cache-control"].startswith("private")
    assert notices(response.text) == [("warning", "This host does not know your token: the page shows what "
                                                  "anyone may see.")]
    legacy = await client.get(f"/?like={DRAFT_IDS[0]}", headers={"Authorization": f"Bearer {LEGACY_TOKEN}"})
    assert shown_ids(legacy.text)[0] == DRAFT_IDS[0]


# ---- notices instead of silent fallbacks -------------------------------------------------------------------


@pytest.mark.parametrize(("query", "expected"), [
    (f"like={'ab' * 32}", [("warning", "No bit you may see has the id abababababababab…: it may have been changed "
                                       "or removed. Here is a random sample instead.")]),
    ("like=not-an-id", [("warning", "“not-an-id” is not a bit id (64 hexadecimal digits), so there is nothing to "
                                    "find more like it. Here is a random sample instead.")]),
    ("library=nowhere", [("warning", "There is no library named “nowhere” here. These are the libraries of the "
                                     "whole host.")]),
    ("count=-3", [("warning", "The budget must be a whole number of at least 1, not “-3”; the page used 10.")]),
    ("count=²", [("warning", "The budget must be a whole number of at least 1, not “²”; the page used 10.")]),
    ("count=5000", [("info", "The page shows at most 100 bits at once, so it shows 100. "
                             "Programs can ask POST / for more.")]),
    ("count=" + "9" * 3000, [("info", "The page shows at most 100 bits at once, so it shows 100. "
                                 "Programs can ask POST / for more.")]),
    ("count_type=words", [("warning", "The budget is counted in tokens or bits, not “words”; "
                                      "it is counted in bits.")]),
    ("seed=-1", [("warning", "A sample's seed is a whole number up to 9223372036854775807, not “-1”; "
                             "here is a fresh sample.")]),
    ("q=hello&mode=vector", [("warning", f"Text search by meaning does not reach {TEST_MODEL}: no embedder serves "
                                         "it here. Here is a random sample of it instead.")]),
    ("mode=fuzzy", [("warning", "A search is ranked by vector, keyword, hybrid, not “fuzzy”; it is ranked by "
                                "meaning and keywords (hybrid).")]),
])
async def test_what_the_page_cannot_do_is_said_in_a_notice(
        client: httpx.AsyncClient, query: str, expected: list[tuple[str, str]]) -> None:
    response = await client.get(f"/?{query}")

    assert response.status_code == 200
    assert notices(response.text) == expected
    assert "A random sample" in response.text


async def test_a_long_search_is_cut_and_said_so(client: httpx.AsyncClient) -> None:
    page = (await client.get("/", params={"q": "word " * 3000})).text

    assert ("warning", "Your search is 14,999 characters long; only the first 10,000 were searched.") in notices(page)


async def test_notices_quote_the_visitors_value_escaped(client: httpx.AsyncClient) -> None:
    page = (await client.get("/", params={"like": "<script>x</script>"})).text

    assert "<script>x" not in page and "“&lt;script&gt;x&lt;/script&gt;” is not a bit id" in page


# ---- more like this, budgets, paging -----------------------------------------------------------------------


async def test_more_like_this_ranks_every_visible_bit_of_its_model_by_similarity(client: httpx.AsyncClient) -> None:
    data = await page_json(client, f"/?like={PUBLIC_IDS[4]}&count=100")

    [section] = data["sections"]
    assert section["kind"] == "ranked" and section["heading"] == "More like “Bit 4”"
    every = np.concatenate([PUBLIC, ODD])
    ids = PUBLIC_IDS + odd_ids()
    assert [bit["id"] for bit in section["bits"]] == [ids[row] for row in brute_force_ranking(every, PUBLIC[4])]
    assert section["bits"][0]["similarity"] == pytest.approx(1.0, abs=1e-6)
    assert section["more_href"] is None  # every bit is shown
    assert section["bits"][0]["like_href"] == f"/?like={PUBLIC_IDS[4]}&count=100&count_type=bit"


async def test_more_results_doubles_the_budget_and_jumps_to_the_first_new_bit(client: httpx.AsyncClient) -> None:
    first = await page_json(client, f"/?like={PUBLIC_IDS[4]}&count=3")
    more = first["sections"][0]["more_href"]

    assert more == f"/?like={PUBLIC_IDS[4]}&count=6&count_type=bit#bit-1-4"
    second = await page_json(client, more.split("#")[0])
    ids = [bit["id"] for bit in second["sections"][0]["bits"]]
    assert len(ids) == 6 and ids[:3] == [bit["id"] for bit in first["sections"][0]["bits"]]
    assert second["sections"][0]["bits"][3]["anchor"] == "bit-1-4"


async def test_a_token_budget_takes_bits_while_they_fit_and_cuts_a_lone_first_bit(client: httpx.AsyncClient) -> None:
    fitting = await page_json(client, f"/?like={PUBLIC_IDS[0]}&count=25&count_type=token")
    lone = await page_json(client, f"/?like={PUBLIC_IDS[9]}&count=4&count_type=token")

    every, tokens = np.concatenate([PUBLIC, ODD]), [10 + n for n in range(10)] + [5, 5, 5]
    ranked = brute_force_ranking(every, PUBLIC[0])
    taken, _ = reference_budget([tokens[row] for row in ranked], 25)
    assert [bit["token_count"] for bit in fitting["sections"][0]["bits"]] == [tokens[row] for row in ranked[:taken]]
    assert sum(bit["token_count"] for bit in fitting["sections"][0]["bits"]) <= 25 < sum(
        tokens[row] for row in ranked[: taken + 1])
    [cut] = lone["sections"][0]["bits"]
    assert cut["token_count"] == 4 and cut["cut_from"] == 19
    assert "(cut from 19 to fit the budget)" in (await client.get(f"/?like={PUBLIC_IDS[9]}&count=4&count_type=token")).text


async def test_a_library_page_ranks_and_samples_within_that_library_only(client: httpx.AsyncClient) -> None:
    ranked = await page_json(client, f"/?library=science&like={PUBLIC_IDS[4]}&count=100")
    sampled = await page_json(client, "/?library=science&count=100")

    assert sorted(bit["id"] for bit in ranked["sections"][0]["bits"]) == sorted(PUBLIC_IDS)
    assert sorted(bit["id"] for bit in sampled["sections"][0]["bits"]) == sorted(PUBLIC_IDS)
    assert ranked["sections"][0]["bits"][1]["like_href"].endswith("&library=science&count=100&count_type=bit")


# ---- text search -------------------------------------------------------------------------------------------


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[EmbeddingService, Starlette]]:
    """A library of model REMOTE, searchable by text through a real local embedding service."""
    vectors = np.stack([unit_vector(f"passage {n}", 16) for n in range(6)])
    bits = [make_bit(n, vector, 10) for n, vector in enumerate(vectors)]
    write_library(tmp_path / "libraries" / "remote.json", library(bits, REMOTE))
    with running_service(dimension=16) as service:
        embedder = OpenAIEmbedder(service.url, "remote-16", model=REMOTE, dimension=16, key="sk-test-secret-key",
                                  timeout=1.0, retries=1, backoff=0.01)
        yield service, create_app(Settings(libraries=tmp_path / "libraries", cache_dir=tmp_path / "compiled",
                                           watch_interval=0), embedders=Embedders([embedder], timeout=2.0))


async def test_a_text_search_ranks_by_the_embedded_text(remote: tuple[EmbeddingService, Starlette]) -> None:
    service, app = remote
    async with connect(app) as client:
        response = await client.get("/", params={"q": "passage  3", "count": "4"})
        data = await page_json(client, "/?q=passage+3&count=4")

    page = response.text
    assert 'value="passage 3"' in page and "<title>passage 3 · Polymath library host</title>" in page
    assert notices(page) == []
    [section] = data["sections"]
    assert section["heading"] == "Search results" and section["bits"][0]["title"] == "Bit 3"
    assert section["bits"][0]["similarity"] == pytest.approx(1.0, abs=1e-6)
    assert section["more_href"] == "/?q=passage+3&count=8&count_type=bit#bit-1-5"
    assert data["search_available"] is True and data["search_note"] is None
    assert service.requests[-1].body["input"] == ["passage 3"]


@pytest.mark.parametrize(("replies", "says"), [
    ([Reply(500, {"error": {"message": "overloaded"}})] * 2, "overloaded"),
    ([Reply(hang=5)], "did not answer within"),
])
async def test_a_failing_embedder_is_a_notice_and_a_sample_never_a_silent_one(
        remote: tuple[EmbeddingService, Starlette], replies: list[Reply], says: str) -> None:
    service, app = remote
    service.reply(*replies)
    async with connect(app) as client:
        response = await client.get("/", params={"q": "passage 1", "mode": "vector"})

    assert response.status_code == 200
    [(level, text)] = notices(response.text)
    assert level == "error" and text.startswith(f"Searching {REMOTE} failed: ") and says in text
    assert text.endswith("Here is a random sample of it instead.")
    assert "sk-test-secret-key" not in response.text and "A random sample" in response.text


async def test_a_failing_embedder_in_a_hybrid_search_leaves_the_keywords_and_says_so(
        remote: tuple[EmbeddingService, Starlette]) -> None:
    service, app = remote
    service.reply(*[Reply(500, {"error": {"message": "overloaded"}})] * 2)
    async with connect(app) as client:
        response = await client.get("/", params={"q": "word2_3 number", "count": "3"})

    [(level, text)] = notices(response.text)
    assert level == "error" and text.startswith(f"Searching {REMOTE} by meaning failed: ") and "overloaded" in text
    assert text.endswith("It is ranked by keywords alone instead.")
    assert "Search results" in response.text and shown_ids(response.text)[0] == bit_id_of(make_bit(2, np.zeros(16), 10))


def bit_id_of(bit: dict[str, Any]) -> str:
    return canonical_id(bit["info"]["url"], bit["text"])


# ---- how a search is ranked: the mode control ------------------------------------------------------------


async def test_the_mode_control_ranks_by_meaning_keywords_or_both(remote: tuple[EmbeddingService, Starlette]) -> None:
    _, app = remote
    async with connect(app) as client:
        hybrid = await page_json(client, "/?q=passage+3&count=4")
        vector = await page_json(client, "/?q=passage+3&count=4&mode=vector")
        keyword = await page_json(client, "/?q=word5_2+bit&count=4&mode=keyword")
        page = (await client.get("/", params={"q": "word5_2 bit", "count": "4", "mode": "keyword"})).text

    assert hybrid["mode"] == "hybrid" and hybrid["sections"][0]["ranked_by"] == "fused"
    assert all(bit["score"] is not None and bit["similarity"] is not None for bit in hybrid["sections"][0]["bits"])
    assert vector["sections"][0]["ranked_by"] == "similarity"
    assert all(bit["score"] is None for bit in vector["sections"][0]["bits"])
    assert vector["sections"][0]["bits"][0]["title"] == "Bit 3"
    [section] = keyword["sections"]
    assert section["ranked_by"] == "keywords" and section["bits"][0]["title"] == "Bit 5"
    assert all(bit["similarity"] is None and bit["score"] > 0 for bit in section["bits"])
    assert section["more_href"] == "/?q=word5_2+bit&count=8&count_type=bit&mode=keyword#bit-1-5"
    assert '<option value="keyword" selected>keywords</option>' in page
    assert 'class="score" title="keyword score, 0 to 1' in page and 'class="similarity"' not in page


async def test_a_keyword_search_shows_no_more_results_when_every_match_is_shown(
        remote: tuple[EmbeddingService, Starlette]) -> None:
    _, app = remote
    async with connect(app) as client:
        data = await page_json(client, "/?q=word5_2+word1_1&count=4&mode=keyword")
        stop_words = await client.get("/", params={"q": "of the", "mode": "keyword"})

    [section] = data["sections"]
    assert [bit["title"] for bit in section["bits"]] == ["Bit 1", "Bit 5"] or \
        [bit["title"] for bit in section["bits"]] == ["Bit 5", "Bit 1"]
    assert section["more_href"] is None
    assert notices(stop_words.text) == [("info", "The query has no keyword (only stop words or punctuation): "
                                                 "nothing matches it.")]


async def test_without_an_embedder_a_search_is_ranked_by_keywords_and_says_so(client: httpx.AsyncClient) -> None:
    response = await client.get("/", params={"q": "word3_4", "count": "3"})

    assert notices(response.text) == [("info", f"No embedder serves {TEST_MODEL} here: ranked by keywords alone.")]
    assert shown_ids(response.text) == [PUBLIC_IDS[3]]
    assert 'placeholder="Search by keywords"' in response.text


async def test_more_like_this_is_by_meaning_whatever_the_mode(client: httpx.AsyncClient) -> None:
    liked = await page_json(client, f"/?like={PUBLIC_IDS[4]}&mode=keyword&count=3")

    [section] = liked["sections"]
    assert section["ranked_by"] == "similarity" and section["bits"][0]["id"] == PUBLIC_IDS[4]
    assert all(bit["score"] is None and bit["similarity"] is not None for bit in section["bits"])
    assert liked["mode"] == "keyword"  # kept for the next search


# ---- the map -----------------------------------------------------------------------------------------------


SVG = "{http://www.w3.org/2000/svg}"


def points_of(svg: str) -> list[tuple[str, str, bool]]:
    """(href, title, private) of every point of a map."""
    root = ElementTree.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return [(link.attrib["href"], link.findtext(f"{SVG}title") or "",
             "map-point-private" in link.find(f"{SVG}circle").attrib["class"])  # type: ignore[union-attr]
            for link in root.iter(f"{SVG}a")]


async def test_a_library_map_links_every_visible_bit_to_more_like_it(client: httpx.AsyncClient,
                                                                     private_world: World) -> None:
    response = await client.get("/libraries/science/map.svg")
    token = team_token(private_world)
    with_token = await client.get("/libraries/science/map.svg", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"
    assert response.text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<svg ')
    assert response.headers["cache-control"] == "public, no-cache"
    points = points_of(response.text)
    assert sorted(href for href, _, _ in points) == sorted(f"/?like={bit}&library=science" for bit in PUBLIC_IDS)
    assert sorted(title for _, title, _ in points) == sorted(f"Bit {n}" for n in range(10))
    assert not any(private for _, _, private in points)
    assert with_token.headers["cache-control"] == "private, no-cache"
    assert sum(private for _, _, private in points_of(with_token.text)) == 2
    assert (await client.get("/libraries/science/map.svg")).content == response.content  # deterministic


async def test_the_page_embeds_the_same_map_inline(client: httpx.AsyncClient) -> None:
    page = (await client.get("/?library=science")).text
    standalone = (await client.get("/libraries/science/map.svg")).text

    inline = page[page.index('<svg class="map"'): page.index("</svg>") + len("</svg>")]
    assert inline in standalone
    assert "first two principal components" in page


async def test_a_large_library_is_mapped_from_a_fixed_sample(tmp_path: Path) -> None:
    vectors = unit_vectors(MAX_POINTS + 100, DIMENSION, seed=46)
    write_library(tmp_path / "libraries" / "large.json", library([make_bit(n, v, 1) for n, v in enumerate(vectors)]))
    app = create_app(Settings(libraries=tmp_path / "libraries", cache_dir=tmp_path / "compiled", watch_interval=0),
                     embedders=Embedders([]))
    async with connect(app) as client:
        data = await page_json(client, "/?library=large")
        again = await page_json(client, "/?library=large")

    assert data["map"]["shown"] == MAX_POINTS and data["map"]["total"] == MAX_POINTS + 100
    assert data["map"]["points"] == again["map"]["points"]


def test_the_maps_plane_is_the_exact_principal_plane() -> None:
    """The randomized SVD finds the exact SVD's first two components (up to sign) on real embeddings."""
    bits = json.loads((Path(__file__).resolve().parents[1] / "libraries" / "sample.json").read_text())["bits"]
    vectors = np.stack([decode_embedding(bit["embedding"]) for bit in bits]).astype(np.float64)

    coordinates, shares = principal_plane(vectors, np.random.default_rng(1))

    centred = vectors - vectors.mean(axis=0)
    _, singular, components = np.linalg.svd(centred, full_matrices=False)
    exact = centred @ components[:2].T
    for axis in range(2):
        correlation = np.corrcoef(coordinates[:, axis], exact[:, axis])[0, 1]
        assert abs(correlation) > 0.999, (axis, correlation)
    assert shares == pytest.approx(tuple(singular[:2] ** 2 / np.square(singular).sum()), rel=1e-3)


# ---- a truly random sample ---------------------------------------------------------------------------------


def test_a_random_sample_is_uniform_over_the_visible_bits_and_never_shows_hidden_ones(private_world: World) -> None:
    catalog = load_catalog(private_world.libraries, cache_dir=private_world.root / "compiled")
    index = catalog.models[TEST_MODEL]
    visible = index.visible_rows(frozenset())
    assert visible is not None
    public_rows = np.flatnonzero(visible)  # 13 rows: science's 10 public bits and the 3 odd ones
    rng = np.random.default_rng(20240611)
    draws, size = 6000, 4
    counts = np.zeros(index.bit_count, dtype=np.int64)
    firsts = np.zeros(index.bit_count, dtype=np.int64)

    for _ in range(draws):
        rows, cut = sample_rows(index, visible, size, "bit", MAX_BITS, rng)
        assert len(rows) == size == len(set(rows.tolist())) and cut is None
        counts[rows] += 1
        firsts[rows[0]] += 1

    assert counts[~visible].sum() == 0  # never a hidden bit
    expected = draws * size / len(public_rows)  # ~1846 each
    chi_square = float((((counts[public_rows] - expected) ** 2) / expected).sum())
    # 12 degrees of freedom: the 1-in-a-million bound is ~44; 80 only catches a broken sampler, and
    # with a fixed seed the statistic is the same on every run.
    assert chi_square < 80, counts[public_rows]
    assert firsts[public_rows].min() > draws / len(public_rows) / 2  # every bit is first about equally often


def test_a_token_budget_sample_takes_random_bits_while_they_fit(private_world: World) -> None:
    catalog = load_catalog(private_world.libraries, cache_dir=private_world.root / "compiled")
    index = catalog.models[TEST_MODEL]
    granted = index.visible_rows(frozenset({"team"}))
    seen: set[int] = set()
    rng = np.random.default_rng(3)

    for _ in range(500):
        rows, cut = sample_rows(index, granted, 40, "token", MAX_BITS, rng)
        total = int(index.token_counts[rows].sum())
        assert cut is None and total <= 40 and len(rows) >= 2
        seen.update(rows.tolist())

    assert seen == set(range(index.bit_count))  # the 18 bits a `team` token may see, each drawn at least once


# ---- static files ------------------------------------------------------------------------------------------


async def test_static_files_are_versioned_kept_a_year_and_checked_by_content(client: httpx.AsyncClient) -> None:
    page = (await client.get("/")).text
    linked = re.findall(r'(?:href|src)="(/static/[^"]+)"', page)
    assert sorted(url.split("?")[0] for url in linked) == ["/static/favicon.svg", "/static/page.css", "/static/page.js"]
    for url in linked:
        name, version = url.removeprefix("/static/").split("?v=")
        response = await client.get(url)
        assert response.status_code == 200 and version == asset_versions()[name]
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert response.headers["etag"] == f'"{version}"'
        assert response.headers["x-content-type-options"] == "nosniff"
        assert (await client.get(url, headers={"If-None-Match": f'"{version}"'})).status_code == 304
        unversioned = await client.get(f"/static/{name}")
        assert unversioned.headers["cache-control"] == "public, no-cache"
    types = {name: (await client.get(f"/static/{name}")).headers["content-type"] for name in asset_versions()}
    assert types["page.js"].startswith("text/javascript") and types["page.css"].startswith("text/css")
    assert types["favicon.svg"] == "image/svg+xml"
    missing = await client.get("/static/nothing.js")
    assert missing.status_code == 404 and missing.json() == {"error": "there is nothing at this path"}


async def test_head_of_the_page_answers_without_a_body(client: httpx.AsyncClient) -> None:
    response = await client.head("/")

    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
