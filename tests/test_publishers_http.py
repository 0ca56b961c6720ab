"""Publishers on one host: `libraries` on every door, `/p/{name}/` as a host of its own, `/libraries` in
pages, and names that try to leave their folder (issue 36: items 2 and 4, and its bad input).

The host holds small libraries whose right answers are known: every bit's URL names its library,
and every bit holds the word "jonah", so a keyword query for it returns every bit a caller may see
of what was selected, and the libraries the answer came from are read off the URLs. The libraries:

    sample                        (outside any folder)
    blog, blog/a, blog/b          (a library and a folder of the same name)
    blog/access/members/c         (private: tag members)
    blog-x, blogger               (neighbours of blog that blog never selects)
    news/sports, news/politics
    access/team/drafts            (private: tag team)
    shelf/000 ... shelf/119       (one bit each: pages of /libraries)
    mixed/ada, mixed/other        (a second model, test:other-4, beside the first)

Most tests run the app in-process; the clients and the raw paths (which an HTTP client would
normalise before sending) go to a real `serve`.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from conftest import start_host, stop_host
from librarian import b64, write_library
from polymath_host_client import HostError, PolymathClient
from starlette.applications import Starlette
from starlette.testclient import TestClient
from word_embedder import WordEmbedder

from host.catalog.selection import BadName, check_name, publishers, selected, starting_with
from host.embedders.service import Embedders
from host.service.harness import RunningHost
from host.service.settings import Settings
from host.web.app import create_app

pytestmark = pytest.mark.anyio

EMBED = WordEmbedder()
OTHER_MODEL = "test:other-4"
MEMBERS_TOKEN = "sk_members_0123456789abcdef"
TEAM_TOKEN = "sk_team_0123456789abcdef"
SHELF = [f"shelf/{number:03d}" for number in range(120)]
PUBLIC = ["sample", "blog", "blog/a", "blog/b", "blog-x", "blogger", "news/sports", "news/politics", *SHELF]
PRIVATE = {"blog/access/members/c": "members", "access/team/drafts": "team"}
BITS_EACH = 2  # every library but the shelf's
NOT_FOUND = "there is no library or folder of libraries named {!r} here"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def bit(library: str, number: int) -> dict[str, Any]:
    text = f"jonah {library.replace('/', ' ')} passage {number}"
    return {"text": text, "embedding": b64(EMBED.embed([text])[0]), "token_count": 5,
            "info": {"url": f"https://example.com/{library}/{number}", "title": f"{library} {number}"}}


def write_host(root: Path) -> Path:
    folder = root / "libraries"
    for name in [*PUBLIC, *PRIVATE]:
        count = 1 if name.startswith("shelf/") else BITS_EACH
        write_library(folder / f"{name}.json", {"version": 1, "embedding_model": EMBED.model,
                                                "bits": [bit(name, number) for number in range(count)]})
    write_library(folder / "mixed" / "ada.json", {"version": 1, "embedding_model": EMBED.model,
                                                  "bits": [bit("mixed/ada", 0)]})
    write_library(folder / "mixed" / "other.json", {"version": 1, "embedding_model": OTHER_MODEL, "bits": [
        {"text": "jonah elsewhere", "embedding": b64([1, 0, 0, 0]), "token_count": 2,
         "info": {"url": "https://example.com/mixed/other/0"}}]})
    access = root / "access.SECRET.json"
    access.write_text(json.dumps({"tokens": {"member": {"token": MEMBERS_TOKEN, "access_tags": ["members"]},
                                             "teammate": {"token": TEAM_TOKEN, "access_tags": ["team"]}}}))
    access.chmod(0o600)
    return folder


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("publishers")
    write_host(root)
    return root


def settings(root: Path) -> Settings:
    return Settings(libraries=root / "libraries", cache_dir=root / "compiled", access=root / "access.SECRET.json",
                    watch_interval=0)


@pytest.fixture(scope="module")
def app(root: Path) -> Starlette:
    return create_app(settings(root), embedders=Embedders([EMBED]))


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test") as client:
        yield client


@pytest.fixture(scope="module")
def served(root: Path) -> Iterator[RunningHost]:
    running = start_host(root / "libraries", "--access", str(root / "access.SECRET.json"))
    yield running
    stop_host(running)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def libraries_of(answer: dict[str, Any]) -> set[str]:
    """The libraries an answer's bits came from, read off their URLs."""
    return {bit["info"]["url"].removeprefix("https://example.com/").rpartition("/")[0] for bit in answer["bits"]}


def every_bit(**arguments: Any) -> dict[str, Any]:
    """A keyword query every bit matches, with a budget larger than them all."""
    return {"query": "jonah", "mode": "keyword", "count": 1000, "count_type": "bit", **arguments}


def assert_one_line_error(response: httpx.Response, status: int, message: str | None = None) -> str:
    assert response.status_code == status, response.text
    error: str = response.json()["error"]
    assert "\n" not in error and "Traceback" not in response.text
    if message is not None:
        assert error == message
    return error


# ---- names: what a name selects, and which names are refused ---------------------------------------


NAMES = tuple(sorted(["blog", "blog-x", "blog.old/a", "blog/a", "blog/b", "blog/deep/c", "blogger", "news/sports"]))


def test_a_name_selects_its_library_and_its_folder_never_its_neighbours() -> None:
    assert selected(NAMES, "blog") == ("blog", "blog/a", "blog/b", "blog/deep/c")
    assert selected(NAMES, "blog/deep") == ("blog/deep/c",)
    assert selected(NAMES, "blog/a") == ("blog/a",)
    assert selected(NAMES, "news") == ("news/sports",)
    assert selected(NAMES, "blo") == () and selected(NAMES, "nothing") == () and selected((), "blog") == ()


def test_a_page_of_names_starts_after_the_last_one_even_when_it_is_gone() -> None:
    assert list(starting_with(NAMES, "blog/")) == ["blog/a", "blog/b", "blog/deep/c"]
    assert list(starting_with(NAMES, "blog/", after="blog/a")) == ["blog/b", "blog/deep/c"]
    assert list(starting_with(NAMES, "blog/", after="blog/aa-removed-meanwhile")) == ["blog/b", "blog/deep/c"]
    assert list(starting_with(NAMES, "", after="news/sports")) == []


def test_publishers_are_first_folders_with_what_a_caller_may_see() -> None:
    found = publishers([("blog", 2, 0), ("blog/a", 3, 1), ("blog-x", 1, 0), ("news/sports", 4, 4)])

    assert [(item.name, item.libraries, item.bits, item.private_bits, item.is_library) for item in found] == [
        ("blog", 2, 5, 1, False), ("blog-x", 1, 1, 0, True), ("news", 1, 4, 4, False)]


@pytest.mark.parametrize("name", ["blog", "blog/a", "odd names/100% sure #1?", "café/ünïcode", "a.b/c-d_e"])
def test_well_formed_names_pass_as_they_are(name: str) -> None:
    assert check_name(name) == name
    assert check_name(name + "/") == name  # a folder may be written with its slash


@pytest.mark.parametrize(("name", "problem"), [
    ("..", "leaves its folder"),
    ("blog/../news", "leaves its folder"),
    ("./blog", "leaves its folder"),
    ("/etc/passwd", "is absolute"),
    ("blog\\..\\news", "holds a backslash"),
    ("%2e%2e", "is percent-encoded: decoded, it leaves its folder"),
    ("blog/%2E%2E/news", "is percent-encoded: decoded, it leaves its folder"),
    ("%252e%252e/etc", "is percent-encoded: decoded, it leaves its folder"),
    ("%2fetc%2fpasswd", "is percent-encoded: decoded, it is absolute"),
    ("blog%5c..", "is percent-encoded: decoded, it holds a backslash"),
    ("blog\x00.json", "holds a control character"),
    ("blog%00", "is percent-encoded: decoded, it holds a control character"),
    ("blog//a", "has an empty folder name"),
    ("", "is empty"),
    ("x" * 1025, "is 1,025 characters long"),
    ("a/" + "x" * 256, "has a folder or file name over 255 characters"),
])
def test_a_name_that_tries_to_leave_its_folder_is_refused_in_one_line(name: str, problem: str) -> None:
    with pytest.raises(BadName) as refused:
        check_name(name)
    assert problem in str(refused.value) and "\n" not in str(refused.value)
    assert len(str(refused.value)) < 200


# ---- POST / takes `libraries` ----------------------------------------------------------------------


async def test_libraries_narrows_post_slash_to_one_library(client: httpx.AsyncClient) -> None:
    response = await client.post("/", json=every_bit(libraries="blog/a"))

    assert response.status_code == 200
    assert libraries_of(response.json()) == {"blog/a"} and len(response.json()["bits"]) == BITS_EACH


async def test_a_folders_name_selects_its_libraries_and_the_library_of_that_name(client: httpx.AsyncClient) -> None:
    anonymous = (await client.post("/", json=every_bit(libraries="blog"))).json()
    member = (await client.post("/", json=every_bit(libraries=["blog"]), headers=bearer(MEMBERS_TOKEN))).json()

    assert libraries_of(anonymous) == {"blog", "blog/a", "blog/b"}  # never blog-x nor blogger
    assert libraries_of(member) == {"blog", "blog/a", "blog/b", "blog/access/members/c"}


async def test_several_names_select_all_of_theirs(client: httpx.AsyncClient) -> None:
    answer = (await client.post("/", json=every_bit(libraries=["news/sports", "blog/b", "news"]))).json()

    assert libraries_of(answer) == {"news/sports", "news/politics", "blog/b"}


async def test_a_form_body_takes_one_name(client: httpx.AsyncClient) -> None:
    response = await client.post("/", data={"query": "jonah", "mode": "keyword", "count": "100", "count_type": "bit",
                                            "libraries": "news"})

    assert libraries_of(response.json()) == {"news/sports", "news/politics"}


async def test_libraries_of_one_model_choose_it_on_a_host_of_two(client: httpx.AsyncClient) -> None:
    whole_host = await client.post("/", json=every_bit())
    one_model = await client.post("/", json=every_bit(libraries="mixed/ada"))
    both = await client.post("/", json=every_bit(libraries="mixed"))
    named = await client.post("/", json=every_bit(libraries="mixed", query_embedding_model=OTHER_MODEL))

    assert "query_embedding_model is required" in assert_one_line_error(whole_host, 400)
    assert libraries_of(one_model.json()) == {"mixed/ada"}
    assert_one_line_error(both, 400, f"these libraries use different embedding models ({OTHER_MODEL}, {EMBED.model}): "
                                     "ask the libraries of one model at a time")
    assert named.json()["embedding_model"] == OTHER_MODEL and libraries_of(named.json()) == {"mixed/other"}


async def test_a_private_library_is_refused_exactly_as_one_that_does_not_exist(client: httpx.AsyncClient) -> None:
    private = await client.post("/", json=every_bit(libraries="access/team/drafts"))
    absent = await client.post("/", json=every_bit(libraries="access/team/nothing"))
    private_folder = await client.post("/", json=every_bit(libraries="access"))
    granted = await client.post("/", json=every_bit(libraries="access"), headers=bearer(TEAM_TOKEN))

    assert_one_line_error(private, 404, NOT_FOUND.format("access/team/drafts"))
    assert_one_line_error(absent, 404, NOT_FOUND.format("access/team/nothing"))
    assert_one_line_error(private_folder, 404, NOT_FOUND.format("access"))
    assert libraries_of(granted.json()) == {"access/team/drafts"}


@pytest.mark.parametrize("libraries", ["../sample", "/sample", "blog\\a", "%2e%2e/sample", "blog/\x00",
                                       "x" * 5000, ["blog", ".."], [], 7, [7], ["blog"] * 1001])
async def test_a_bad_libraries_argument_is_a_400_naming_it(client: httpx.AsyncClient, libraries: Any) -> None:
    error = assert_one_line_error(await client.post("/", json=every_bit(libraries=libraries)), 400)

    assert "libraries" in error and len(error) < 200


# ---- /p/{name}/: a host of its own -----------------------------------------------------------------


async def test_post_under_a_prefix_answers_from_its_libraries_only(client: httpx.AsyncClient) -> None:
    blog = (await client.post("/p/blog/", json=every_bit())).json()
    member = (await client.post("/p/blog/", json=every_bit(), headers=bearer(MEMBERS_TOKEN))).json()
    one = (await client.post("/p/blog/a/", json=every_bit())).json()
    narrowed = (await client.post("/p/blog/", json=every_bit(libraries="blog/b"))).json()

    assert libraries_of(blog) == {"blog", "blog/a", "blog/b"}
    assert libraries_of(member) == {"blog", "blog/a", "blog/b", "blog/access/members/c"}
    assert libraries_of(one) == {"blog/a"}
    assert libraries_of(narrowed) == {"blog/b"}


async def test_a_prefix_of_one_model_needs_no_model_on_a_host_of_two(client: httpx.AsyncClient) -> None:
    answer = await client.post("/p/news/", json={"query_embedding": b64(EMBED.embed(["jonah"])[0]), "count": 100,
                                                  "count_type": "bit"})

    assert answer.status_code == 200 and libraries_of(answer.json()) == {"news/sports", "news/politics"}


async def test_a_name_outside_the_prefix_is_not_there(client: httpx.AsyncClient) -> None:
    outside = await client.post("/p/blog/", json=every_bit(libraries="news/sports"))
    neighbour = await client.post("/p/blog/", json=every_bit(libraries="blogger"))

    assert_one_line_error(outside, 404, NOT_FOUND.format("news/sports"))
    assert_one_line_error(neighbour, 404, NOT_FOUND.format("blogger"))


@pytest.mark.parametrize("path", ["/p/nowhere/", "/p/access/", "/p/access/team/drafts/", "/p/blog/access/"])
@pytest.mark.parametrize(("method", "suffix"), [("POST", ""), ("GET", "libraries"), ("GET", "libraries/sample.json")])
async def test_a_prefix_with_nothing_the_caller_may_see_is_a_404_on_every_path(
        client: httpx.AsyncClient, path: str, method: str, suffix: str) -> None:
    name = path.removeprefix("/p/").removesuffix("/")
    response = await client.request(method, path + suffix, json=every_bit() if method == "POST" else None)

    assert_one_line_error(response, 404, NOT_FOUND.format(name) if suffix != "libraries/sample.json" else None)


async def test_a_token_opens_its_private_folder_as_a_host(client: httpx.AsyncClient) -> None:
    answer = await client.post("/p/access/", json=every_bit(), headers=bearer(TEAM_TOKEN))
    listed = await client.get("/p/access/libraries", headers=bearer(TEAM_TOKEN))

    assert libraries_of(answer.json()) == {"access/team/drafts"}
    assert [entry["name"] for entry in listed.json()["libraries"]] == ["access/team/drafts"]
    assert listed.headers["cache-control"] == "private, no-cache"


async def test_libraries_under_a_prefix_are_its_own_with_urls_under_it(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/p/blog/libraries")).json()["libraries"]

    assert [(entry["name"], entry["url"], entry["bits"]) for entry in listed] == [
        ("blog", "/p/blog/libraries/blog.json", 2), ("blog/a", "/p/blog/libraries/blog/a.json", 2),
        ("blog/b", "/p/blog/libraries/blog/b.json", 2)]
    file = await client.get(listed[1]["url"])
    assert file.status_code == 200 and [bit["info"]["url"] for bit in file.json()["bits"]] == [
        "https://example.com/blog/a/0", "https://example.com/blog/a/1"]
    assert (await client.get("/p/blog/libraries/news/sports.json")).status_code == 404
    assert (await client.get("/p/blog/libraries/blog/a/map.svg")).headers["content-type"] == "image/svg+xml"
    assert (await client.get("/p/blog/libraries/news/sports/map.svg")).status_code == 404


async def test_every_answer_under_a_prefix_links_to_the_prefix(client: httpx.AsyncClient) -> None:
    under = await client.get("/p/news/libraries")
    odd = await client.get("/p/blog/a/libraries")
    refused = await client.post("/p/news/", json=every_bit(libraries="blog"))
    whole_host = await client.get("/libraries")

    assert under.headers["link"] == '</p/news/>; rel="polymath"'
    assert odd.headers["link"] == '</p/blog/a/>; rel="polymath"'
    assert refused.status_code == 404 and refused.headers["link"] == '</p/news/>; rel="polymath"'
    assert whole_host.headers["link"] == '</>; rel="polymath"'


async def test_a_prefix_without_its_slash_redirects_to_it(client: httpx.AsyncClient) -> None:
    response = await client.get("/p/blog/a?seed=3")

    assert response.status_code == 307 and response.headers["location"] == "http://host.test/p/blog/a/?seed=3"


async def test_the_host_s_own_paths_are_not_under_a_prefix(client: httpx.AsyncClient) -> None:
    for path in ["/p/blog/healthz", "/p/blog/metrics", "/p/blog/static/page.js"]:
        response = await client.get(path, follow_redirects=True, headers={"Accept": "application/json"})
        assert response.status_code == 404, path  # the root of a library of that name, which is not there
        assert response.json()["error"] == NOT_FOUND.format(path.removeprefix("/p/"))


async def test_the_openapi_document_is_served_under_a_prefix_too(client: httpx.AsyncClient) -> None:
    response = await client.get("/p/blog/openapi.json")

    assert response.status_code == 200 and "/libraries" in response.json()["paths"]


@pytest.mark.parametrize("path", ["/p/%2e%2e/", "/p/blog/%2E%2E/news/", "/p/%2e%2e%2fetc/libraries",
                                  "/p/blog%5c..%5cnews/", "/p/blog%00/", "/p/blog%2500/", "/p//etc/", "/p/",
                                  "/p/" + "x" * 1100 + "/libraries"])
async def test_a_prefix_name_that_leaves_its_folder_is_a_400_in_one_line(client: httpx.AsyncClient, path: str) -> None:
    for method in ("GET", "POST"):
        response = await client.request(method, path)
        error = assert_one_line_error(response, 400)
        assert error.startswith("the name in /p/{name}/ ") and len(error) < 200


async def test_a_refused_prefix_name_under_a_dialects_path_is_refused_in_its_dialects_shape(
        client: httpx.AsyncClient) -> None:
    ragflow = await client.get("/p/%2e%2e/api/v1/datasets")
    dify = await client.post("/p/%2e%2e/dify/retrieval", json={})
    openai = await client.get("/p/%2e%2e/v1/vector_stores")
    message = "the name in /p/{name}/ '..' leaves its folder: . and .. are not names"

    assert ragflow.status_code == 400 and ragflow.json() == {"code": 400, "message": message, "data": None}
    assert dify.status_code == 400 and dify.json() == {"error_code": 400, "error_msg": message}
    assert openai.status_code == 400 and openai.json()["error"]["message"] == message
    assert ragflow.headers["link"] == '</>; rel="polymath"'


# ---- /p/{name}/: the page ------------------------------------------------------------------------


async def test_the_whole_hosts_page_lists_publishers_with_what_the_caller_may_see(client: httpx.AsyncClient) -> None:
    anonymous = (await client.get("/", headers={"Accept": "application/json"})).json()
    member = (await client.get("/", headers={"Accept": "application/json", **bearer(MEMBERS_TOKEN)})).json()

    folders = {entry["name"]: entry for entry in anonymous["publishers"]}
    assert sorted(folders) == ["blog", "mixed", "news", "shelf"]  # `access` holds nothing anyone may see
    assert folders["blog"] == {"name": "blog", "page_href": "/p/blog/", "libraries_href": "/p/blog/libraries",
                               "library_count": 3, "bit_count": 6, "private_bit_count": 0}
    assert folders["shelf"]["library_count"] == 120 and folders["shelf"]["bit_count"] == 120
    assert [entry["name"] for entry in anonymous["libraries"]] == ["blog-x", "blogger", "sample"]
    assert anonymous["listed_of"] == 7
    member_blog = next(entry for entry in member["publishers"] if entry["name"] == "blog")
    assert (member_blog["library_count"], member_blog["bit_count"], member_blog["private_bit_count"]) == (4, 8, 2)
    again = (await client.get("/", headers={"Accept": "application/json"})).json()  # lists are kept by grant
    assert again["publishers"] == anonymous["publishers"] and again["libraries"] == anonymous["libraries"]


async def test_a_publishers_page_shows_and_samples_its_libraries_only(client: httpx.AsyncClient) -> None:
    page = (await client.get("/p/blog/?seed=5&count=100", headers={"Accept": "application/json"})).json()

    assert page["root"] == "/p/blog/" and page["publisher"] == "blog" and page["publishers"] == []
    assert [entry["name"] for entry in page["libraries"]] == ["blog", "blog/a", "blog/b"]
    assert page["libraries"][1]["page_href"] == "/p/blog/?library=blog%2Fa"
    shown = {bit["library"] for section in page["sections"] for bit in section["bits"]}
    assert shown == {"blog", "blog/a", "blog/b"}
    assert all(section["permalink_href"].startswith("/p/blog/?") for section in page["sections"])


async def test_a_publishers_page_keeps_its_form_and_links_under_the_prefix(client: httpx.AsyncClient) -> None:
    html = (await client.get("/p/news/?q=jonah")).text

    assert '<link rel="polymath" href="/p/news/">' in html
    assert '<form class="search" action="/p/news/" method="get" role="search">' in html
    assert '<a href="/p/news/libraries">Libraries (JSON)</a>' in html
    links = [href for href in _hrefs(html) if not href.startswith(("/static/", "https://"))]  # bits', the manual
    assert links and all(href.startswith("/p/news/") for href in links), links
    searched = (await client.get("/p/news/?q=jonah&mode=keyword&count=100",
                                 headers={"Accept": "application/json"})).json()
    assert {bit["library"] for bit in searched["sections"][0]["bits"]} == {"news/sports", "news/politics"}


def _hrefs(html: str) -> list[str]:
    return [part.split('"', 1)[0].replace("&amp;", "&") for part in html.split('href="')[1:]]


async def test_a_publishers_page_for_nothing_visible_is_a_404_page(client: httpx.AsyncClient) -> None:
    html = await client.get("/p/access/")
    data = await client.get("/p/access/", headers={"Accept": "application/json"})

    assert html.status_code == 404 and "There is no library or folder of libraries named “access” here." in html.text
    assert "drafts" not in html.text
    assert_one_line_error(data, 404, NOT_FOUND.format("access"))


async def test_a_library_page_outside_the_prefix_is_not_shown(client: httpx.AsyncClient) -> None:
    page = (await client.get("/p/blog/?library=news/sports", headers={"Accept": "application/json"})).json()

    assert page["library"] is None and page["library_view"] is None
    warnings = [notice["text"] for notice in page["notices"] if notice["level"] == "warning"]
    assert warnings == ["There is no library named “news/sports” here. These are the libraries of “blog”."]


# ---- GET /libraries: pages, a prefix, the answer of old -------------------------------------------


async def test_libraries_without_arguments_answers_as_it_always_did(client: httpx.AsyncClient) -> None:
    body = (await client.get("/libraries")).json()

    assert list(body) == ["libraries"]
    names = [entry["name"] for entry in body["libraries"]]
    assert names == sorted([*PUBLIC, "mixed/ada", "mixed/other"])
    assert body["libraries"][names.index("sample")] == {
        "name": "sample", "url": "/libraries/sample.json", "embedding_model": EMBED.model, "dimension": 8, "bits": 2}


async def test_pages_of_libraries_follow_their_cursors_to_the_whole_list(client: httpx.AsyncClient) -> None:
    everything = [entry["name"] for entry in (await client.get("/libraries")).json()["libraries"]]
    pages, cursor = [], None
    while True:
        params = {"limit": "50", **({"cursor": cursor} if cursor else {})}
        body = (await client.get("/libraries", params=params)).json()
        pages.append([entry["name"] for entry in body["libraries"]])
        cursor = body["next_cursor"]
        if cursor is None:
            break

    assert [len(page) for page in pages] == [50, 50, 30]
    assert [name for page in pages for name in page] == everything


async def test_a_prefix_filters_the_names_and_pages_within_them(client: httpx.AsyncClient) -> None:
    first = (await client.get("/libraries", params={"prefix": "shelf/1", "limit": "15"})).json()
    second = (await client.get("/libraries", params={"prefix": "shelf/1", "limit": "15",
                                                      "cursor": first["next_cursor"]})).json()
    blog = (await client.get("/libraries", params={"prefix": "blog"})).json()

    assert [entry["name"] for entry in first["libraries"]] == [f"shelf/1{number:02d}" for number in range(15)]
    assert [entry["name"] for entry in second["libraries"]] == [f"shelf/1{number:02d}" for number in range(15, 20)]
    assert second["next_cursor"] is None
    assert [entry["name"] for entry in blog["libraries"]] == ["blog", "blog-x", "blog/a", "blog/b", "blogger"]


async def test_pages_count_only_what_the_caller_may_see(client: httpx.AsyncClient) -> None:
    anonymous = (await client.get("/libraries", params={"prefix": "blog/", "limit": "2"})).json()
    member = (await client.get("/libraries", params={"prefix": "blog/", "limit": "2"},
                               headers=bearer(MEMBERS_TOKEN))).json()

    assert [entry["name"] for entry in anonymous["libraries"]] == ["blog/a", "blog/b"]
    assert anonymous["next_cursor"] is None  # the private library after them is not there for this caller
    assert [entry["name"] for entry in member["libraries"]] == ["blog/a", "blog/access/members/c"]
    assert member["next_cursor"] is not None


async def test_a_prefix_under_a_publishers_prefix_stays_inside_it(client: httpx.AsyncClient) -> None:
    inside = (await client.get("/p/blog/libraries", params={"prefix": "blog/a"})).json()
    outside = (await client.get("/p/blog/libraries", params={"prefix": "news"})).json()
    broad = (await client.get("/p/blog/libraries", params={"prefix": "b", "limit": "2"})).json()

    assert [entry["name"] for entry in inside["libraries"]] == ["blog/a"]
    assert outside["libraries"] == []
    assert [entry["name"] for entry in broad["libraries"]] == ["blog", "blog/a"]


@pytest.mark.parametrize(("params", "message"), [
    ({"limit": "0"}, "limit must be an integer from 1 to 1000, got '0'"),
    ({"limit": "1001"}, "limit must be an integer from 1 to 1000, got '1001'"),
    ({"limit": "ten"}, "limit must be an integer from 1 to 1000, got 'ten'"),
    ({"cursor": "not-a-cursor"}, "cursor 'not-a-cursor' is not one this host gave: pass next_cursor as it came"),
    ({"cursor": "n%%%"}, "cursor 'n%%%' is not one this host gave: pass next_cursor as it came"),
    ({"prefix": "blog\x00"}, "prefix must be the start of a library name (at most 1,024 characters, no control "
                             "characters), got 'blog\\x00'"),
])
async def test_a_bad_page_argument_is_a_400_naming_it(client: httpx.AsyncClient, params: dict[str, str],
                                                       message: str) -> None:
    assert_one_line_error(await client.get("/libraries", params=params), 400, message)


async def test_a_cursor_alone_asks_for_a_page_of_a_hundred(client: httpx.AsyncClient) -> None:
    first = (await client.get("/libraries", params={"limit": "1"})).json()
    rest = (await client.get("/libraries", params={"cursor": first["next_cursor"]})).json()

    assert len(rest["libraries"]) == 100 and rest["next_cursor"] is not None


# ---- the dialects: the same names, the same prefix -----------------------------------------------


async def test_ragflow_datasets_under_a_prefix_are_its_libraries(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/p/news/api/v1/datasets")).json()
    retrieval = (await client.post("/p/news/api/v1/retrieval", json={
        "question": "jonah", "dataset_ids": ["news"], "vector_similarity_weight": 0, "top_k": 100})).json()
    outside = (await client.post("/p/news/api/v1/retrieval", json={"question": "jonah", "dataset_ids": ["blog"]})).json()
    sdk_slash = await client.get("/p/news//api/v1/datasets")  # RAGFlow("key", "http://host/p/news/")

    assert sorted(dataset["name"] for dataset in listed["data"]) == ["news/politics", "news/sports"]
    assert {chunk["document_keyword"].rpartition("/")[0] for chunk in retrieval["data"]["chunks"]} == {
        "https://example.com/news/sports", "https://example.com/news/politics"}
    assert outside == {"code": 102, "message": "You don't own the dataset blog.", "data": None}
    assert sorted(dataset["name"] for dataset in sdk_slash.json()["data"]) == ["news/politics", "news/sports"]


async def test_ragflow_takes_a_datasets_id_or_a_folders_name(client: httpx.AsyncClient) -> None:
    ids = {dataset["name"]: dataset["id"] for dataset in (await client.get("/api/v1/datasets")).json()["data"]}
    by_id = (await client.post("/api/v1/retrieval", json={
        "question": "jonah", "dataset_ids": [ids["blog/a"]], "vector_similarity_weight": 0})).json()
    by_name = (await client.post("/api/v1/retrieval", json={
        "question": "jonah", "dataset_ids": ["blog"], "vector_similarity_weight": 0, "top_k": 100})).json()
    bad = (await client.post("/api/v1/retrieval", json={"question": "jonah", "dataset_ids": ["../blog"]})).json()

    assert {chunk["dataset_id"] for chunk in by_id["data"]["chunks"]} == {ids["blog/a"]}
    assert {chunk["dataset_id"] for chunk in by_name["data"]["chunks"]} == {ids["blog"], ids["blog/a"], ids["blog/b"]}
    assert bad["code"] == 101 and "leaves its folder" in bad["message"]


async def test_dify_knowledge_may_be_a_folder_and_stays_under_the_prefix(client: httpx.AsyncClient) -> None:
    def ask(knowledge_id: str) -> dict[str, Any]:
        return {"knowledge_id": knowledge_id, "query": "jonah",
                "retrieval_setting": {"top_k": 50, "score_threshold": 0, "mode": "keyword"}}

    folder = (await client.post("/dify/retrieval", json=ask("news"))).json()
    under = (await client.post("/p/blog/dify/retrieval", json=ask("blog"))).json()
    outside = await client.post("/p/blog/dify/retrieval", json=ask("news"))
    missing_prefix = await client.post("/p/nowhere/dify/retrieval", json=ask("news"))

    assert {record["metadata"]["library"] for record in folder["records"]} == {"news/sports", "news/politics"}
    assert {record["metadata"]["library"] for record in under["records"]} == {"blog", "blog/a", "blog/b"}
    assert outside.status_code == 404 and outside.json()["error_code"] == 2001
    assert missing_prefix.status_code == 404 and missing_prefix.json() == {
        "error_code": 404, "error_msg": NOT_FOUND.format("nowhere")}


async def test_openai_vector_stores_under_a_prefix_are_its_libraries(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/p/blog/v1/vector_stores", params={"order": "asc"})).json()
    folder = (await client.post("/p/blog/v1/vector_stores/blog/search", json={"query": "jonah",
                                                                              "max_num_results": 50})).json()
    outside = await client.post("/p/blog/v1/vector_stores/news%2Fsports/search", json={"query": "jonah"})
    retrieved = await client.get("/p/blog/v1/vector_stores/news%2Fsports")
    refused = await client.post("/p/blog/v1/vector_stores/blog/files", json={})

    assert sorted(store["id"] for store in listed["data"]) == ["blog", "blog/a", "blog/b"]
    assert {result["attributes"]["library"] for result in folder["data"]} == {"blog", "blog/a", "blog/b"}
    assert outside.status_code == 404 and outside.json()["error"]["message"].startswith("No vector store found")
    assert retrieved.status_code == 404
    assert refused.status_code == 405 and "managing a vector store's files" in refused.json()["error"]["message"]


def test_mcp_under_a_prefix_searches_and_lists_its_libraries(app: Starlette) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    def call(path: str, tool: str, **arguments: Any) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        response = client.post(path, content=json.dumps(message), headers=headers)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["result"]
        return result

    with TestClient(app) as client:
        listed = call("/p/news/mcp", "libraries")
        searched = call("/p/news/mcp", "search", query="jonah", mode="keyword", count=100, count_type="bit")
        folder = call("/mcp", "search", query="jonah", mode="keyword", library="blog", count=100, count_type="bit")
        outside = call("/p/news/mcp", "search", query="jonah", library="blog")

    assert [entry["name"] for entry in listed["structuredContent"]["libraries"]] == ["news/politics", "news/sports"]
    assert libraries_of(searched["structuredContent"]) == {"news/sports", "news/politics"}
    assert libraries_of(folder["structuredContent"]) == {"blog", "blog/a", "blog/b"}
    assert outside["isError"] and outside["content"][0]["text"].endswith(
        NOT_FOUND.format("blog") + "; the libraries tool lists them")


# ---- a real server: the unchanged Python client, and raw paths -----------------------------------


def test_the_python_client_given_a_prefix_sees_only_that_publisher(served: RunningHost) -> None:
    with PolymathClient(f"{served.url}/p/news") as news, PolymathClient(f"{served.url}/p/blog/", MEMBERS_TOKEN) as blog:
        assert [library.name for library in news.libraries()] == ["news/politics", "news/sports"]
        answer = news.query("jonah", mode="keyword", count=100, count_type="bit")
        passages = blog.retrieve("jonah", k=20, mode="keyword")
        with pytest.raises(HostError) as refused:
            news.retrieve("jonah", libraries=["blog"])

    assert {bit.url.rpartition("/")[0] for bit in answer.bits} == {
        "https://example.com/news/sports", "https://example.com/news/politics"}
    assert {passage.library for passage in passages} == {"blog", "blog/a", "blog/b", "blog/access/members/c"}
    assert refused.value.status == 404


@pytest.mark.parametrize("path", ["/p/../libraries", "/p/blog/../../etc/passwd/", "/p/./sample/",
                                  "/p/%2e%2e/libraries", "/p/blog%2f..%2f..%2fetc/", "/p/..%5c..%5cetc/",
                                  "/p/%00/", "/p/" + "a" * 2000 + "/"])
def test_raw_paths_that_leave_their_folder_are_a_400_from_a_real_server(served: RunningHost, path: str) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", int(served.url.rsplit(":", 1)[1]), timeout=10)
    try:
        connection.request("GET", path)  # sent as it is: no client normalises the dots away
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()

    assert response.status == 400, body
    error = json.loads(body)["error"]
    assert error.startswith("the name in /p/{name}/ ") and "\n" not in error and b"Traceback" not in body
    assert b"root:" not in body  # nothing was read


def test_a_prefix_in_a_url_is_percent_encoded_once(served: RunningHost) -> None:
    response = httpx.get(f"{served.url}/p/{quote('news/sports')}/libraries", timeout=10)

    assert [entry["name"] for entry in response.json()["libraries"]] == ["news/sports"]
    assert response.headers["link"] == '</p/news/sports/>; rel="polymath"'


def test_vectors_of_a_prefix_rank_as_the_whole_host_narrowed_to_it(served: RunningHost) -> None:
    vector = np.asarray(EMBED.embed(["jonah news sports passage 1"])[0], np.float32)
    body = {"query_embedding": b64(vector), "count": 3, "count_type": "bit"}
    under = httpx.post(f"{served.url}/p/news/", json=body, timeout=10).json()
    narrowed = httpx.post(f"{served.url}/", json={**body, "libraries": ["news"]}, timeout=10).json()

    assert under["bits"] == narrowed["bits"] and under["bits"][0]["info"]["url"] == "https://example.com/news/sports/1"
