"""The page's data for one caller: plain dataclasses built from the query core, nothing rendered.

The templates render a `PageData`; `GET /` with `Accept: application/json` sends it as JSON (the
same contract). Everything comes from `host.search.query.run_query` (ranked sections), from
`sampling.sample_rows` (random ones) and `host.results.bits.result_bit` (each bit), for the caller's
grant only:

- a bit, a library, a model or a count the grant may not see is never in it; what a caller
  without tags gets is exactly what a host without private libraries gives (same seed);
- `access_tag` is set only on a bit the caller's grant holds the tag of;
- `href` is set only for `http:` and `https:` URLs: a `javascript:` or `data:` URL in a
  library file is shown, never linked;
- nothing falls back silently: every substitution comes with a notice, and what the query core
  says of how it made an answer (its notes) is a notice too.

The whole host's page lists its publishers (host/catalog/selection.py: first folders, each with the
libraries and bits the caller may see, linking to its own page at `/p/{name}/`), a library outside
any folder as itself; a publisher's page (`PageInputs.scope`) lists its libraries and searches and
samples only them. Either lists at most MAX_LISTED entries: `/libraries` pages through every one.
What a page lists is kept (`PageInputs.listings`) per generation, grant and publisher: counting the
bits 10,000 libraries show a caller takes ~30 ms.

A text search is ranked in the request's mode, as `POST /` ranks one (hybrid unless asked
otherwise); a model no embedder serves is searched by keywords alone in hybrid mode (with a
notice), and shown as a sample in vector mode. "More like this" is by meaning, whatever the mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

import numpy as np

from access import Grant
from host.catalog.generations import Catalog
from host.catalog.libraries import Library
from host.catalog.model_index import ModelIndex
from host.catalog.selection import publishers
from host.library.visibility import unscoped
from host.results.bits import result_bit
from host.search.query import Mode, Query, SearchPolicy, as_mask, narrowing_mask, run_query
from host.web.middleware.publisher_prefix import library_href, root_href
from host.web.page.kept import Kept
from host.web.page.maps import LibraryMap, Projection, ProjectionCache, library_map, project_library
from host.web.page.request import MAX_BITS, Budget, Notice, PageRequest, page_href
from host.web.page.sampling import sample_rows

SITE_NAME = "Polymath library host"
MAX_LISTED = 1000  # entries the page lists (publishers and libraries): /libraries pages through them all
MAX_DESCRIPTION_CHARACTERS = 1000
NO_TEXT_SEARCH = ("No embedder serves this host's libraries: a search is ranked by keywords alone (the words "
                  "it holds, not what it means). “More like this” still follows meaning.")
RankedBy = Literal["similarity", "keywords", "fused"]


@dataclass(frozen=True)
class BitView:
    id: str
    anchor: str  # the element id of this bit on the page (paging links jump to it)
    title: str
    href: str | None  # the bit's URL when it is http(s), else None: shown, not linked
    url: str
    description: str | None
    text: str
    similarity: float | None  # None in a random sample (nothing was asked) and a keyword search (no vector)
    score: float | None  # the rank score when the section is not ranked by similarity: BM25, or the fused 0-1 score
    token_count: int
    cut_from: int | None  # the bit's own token count when its text was cut to fit the budget
    library: str
    access_tag: str | None  # only on a bit whose tag the caller's grant holds
    like_href: str


@dataclass(frozen=True)
class Section:
    heading: str
    model: str
    kind: Literal["ranked", "sample"]
    bits: tuple[BitView, ...]
    ranked_by: RankedBy | None = None  # ranked: what `score` is (fused: meaning and keywords), or similarity alone
    more_href: str | None = None  # ranked: the same question with twice the budget
    another_href: str | None = None  # sample: a fresh sample
    permalink_href: str | None = None  # sample: this very sample again (its seed)


@dataclass(frozen=True)
class LibraryView:
    name: str
    page_href: str
    file_href: str  # /libraries/<name>.json, percent-encoded
    map_href: str  # /libraries/<name>/map.svg, percent-encoded
    bit_count: int  # that this caller may see
    private_bit_count: int  # of those, the ones their token shows
    embedding_model: str
    description: str | None  # the library file's details.message
    searchable: bool  # an embedder serves its model


@dataclass(frozen=True)
class PublisherView:
    """A folder of libraries on the whole host's page (a publisher), as one caller sees it."""

    name: str
    page_href: str  # /p/<name>/, its own page (percent-encoded)
    libraries_href: str  # /p/<name>/libraries, its libraries as JSON
    library_count: int  # that this caller may see
    bit_count: int  # likewise
    private_bit_count: int  # of those, the ones their token shows


Listing = tuple[tuple[LibraryView, ...], tuple[PublisherView, ...], int]  # libraries, folders, how many in all


@dataclass(frozen=True)
class CallerView:
    subject: str
    access_tags: tuple[str, ...]


@dataclass(frozen=True)
class PageData:
    title: str
    query: str
    like: str | None
    library: str | None  # the library page's library, when one is asked for and visible
    budget: Budget
    mode: Mode  # how a text search is ranked: hybrid, vector or keyword
    search_available: bool  # a library to search: keywords need no embedder
    search_note: str | None  # set when no embedder serves any of them: searches go by keywords alone
    caller: CallerView | None
    notices: tuple[Notice, ...]
    libraries: tuple[LibraryView, ...]  # a publisher's libraries; the whole host's outside any folder
    sections: tuple[Section, ...]
    map: LibraryMap | None = None
    score_threshold: float | None = None  # a text search shows only bits scoring at least this
    root: str = "/"  # the page's own path: "/", or "/p/<name>/" for a publisher's page
    publisher: str | None = None  # the name of a publisher's page (/p/<name>/)
    publishers: tuple[PublisherView, ...] = ()  # the whole host's page: its folders of libraries
    listed_of: int = 0  # how many libraries (a publisher's) or entries (the whole host's) there are to list
    library_view: LibraryView | None = None  # the library page's library


@dataclass(frozen=True)
class PageInputs:
    """Everything `build_page` needs; the text query's vectors are embedded beforehand (async)."""

    catalog: Catalog
    request: PageRequest
    grant: Grant
    policy: SearchPolicy
    seed: int  # the random sample's: the request's, or a fresh one
    searchable: frozenset[str] = frozenset()  # models an embedder serves
    vectors: Mapping[str, np.ndarray] = field(default_factory=dict)  # the query text's, by model
    failures: Mapping[str, str] = field(default_factory=dict)  # why embedding the query failed, by model
    notices: tuple[Notice, ...] = ()  # from the edge: a refused or unknown token
    token_presented: bool = False
    projections: ProjectionCache | None = None
    publisher: str | None = None  # a publisher's page: its name (/p/<name>/)...
    scope: frozenset[str] | None = None  # ...and its libraries this caller may see (None: the whole host)
    listings: Kept[Listing] | None = None  # what pages list, kept (_listing)


def visible_models(catalog: Catalog, grant: Grant) -> list[ModelIndex]:
    return [index for index in catalog.models.values() if index.visible_count(grant.access_tags)]


def visible_library(catalog: Catalog, name: str | None, grant: Grant,
                    scope: frozenset[str] | None = None) -> Library | None:
    """The library of that name if the caller may see a bit of it (and it is in `scope`, when given)."""
    library = catalog.library(name) if name and (scope is None or name in scope) else None
    return library if library is not None and library.visible_bit_count(grant.access_tags) else None


def models_to_search(catalog: Catalog, request: PageRequest, grant: Grant,
                     scope: frozenset[str] | None = None) -> list[str]:
    """The models a text query is embedded for: those answering on this page, unless it is ranked by
    keywords alone."""
    if not request.query or request.mode == "keyword":
        return []
    return [index.model for index in _scope(catalog, request, grant, scope)]


def _scope(catalog: Catalog, request: PageRequest, grant: Grant,
           scope: frozenset[str] | None = None) -> list[ModelIndex]:
    """The models answering on this page: the library page's, a publisher's libraries', or every visible one."""
    library = visible_library(catalog, request.library, grant, scope)
    models = visible_models(catalog, grant)
    if library is not None:
        return [index for index in models if index.model == library.embedding_model]
    if scope is not None:
        wanted = {found.embedding_model for name in scope if (found := catalog.library(name)) is not None}
        return [index for index in models if index.model in wanted]
    return models


def web_link(url: str) -> str | None:
    """`url` when a browser may follow it from the page: http(s) with a host, nothing hidden in it."""
    if any(ord(character) <= 0x20 or ord(character) == 0x7F for character in url):
        return None  # browsers drop tabs and newlines from URLs: "java\tscript:" is javascript:
    parts = urlsplit(url)
    return url if parts.scheme.lower() in ("http", "https") and parts.netloc else None


def library_map_href(name: str, root: str = "/") -> str:
    return library_href(name, root, "/map.svg")


def build_page(inputs: PageInputs) -> PageData:
    catalog, request, grant, scope = inputs.catalog, inputs.request, inputs.grant, inputs.scope
    notices = list(inputs.notices) + list(request.notices)
    whose = "the whole host" if inputs.publisher is None else f"“{inputs.publisher[:100]}”"
    if inputs.publisher is not None and not scope:
        notices.append(Notice("error", f"There is no library or folder of libraries named {whose} here."))
    library = visible_library(catalog, request.library, grant, scope)
    if request.library and library is None:
        notices.append(Notice("warning", f"There is no library named “{request.library[:100]}” here. "
                                         f"These are the libraries of {whose}."))
    models = _scope(catalog, replace(request, library=None), grant, scope)
    searchable = [index.model for index in models if index.model in inputs.searchable]
    builder = _SectionBuilder(inputs, library, notices)
    sections = builder.sections(_scope(catalog, request, grant, scope))
    listed, folders, listed_of = _listing(inputs)
    if listed_of > MAX_LISTED:
        notices.append(Notice("info", f"The first {MAX_LISTED:,} of {listed_of:,} are listed here: "
                                      f"{request.root}libraries lists every library, page by page."))
    if grant.subject is not None:
        tags = ", ".join(sorted(grant.access_tags)) or "none"
        notices.append(Notice("info", f"Your token ({grant.subject[:100]}) shows private bits tagged: {tags}. "
                                      "They are marked with their tag."))
    elif inputs.token_presented and not any(notice.level == "error" for notice in notices):
        notices.append(Notice("warning", "This host does not know your token: the page shows what anyone may see."))
    title = f"{request.query[:80]} · {SITE_NAME}" if request.query else (
        f"{library.name} · {SITE_NAME}" if library is not None else
        f"{inputs.publisher} · {SITE_NAME}" if inputs.publisher is not None else SITE_NAME)
    return PageData(
        title=title,
        query=request.query,
        like=request.like,
        library=library.name if library is not None else None,
        budget=request.budget,
        mode=request.mode,
        score_threshold=request.score_threshold,
        search_available=bool(models),
        search_note=None if searchable or not models else NO_TEXT_SEARCH,
        caller=CallerView(grant.subject, tuple(sorted(grant.access_tags))) if grant.subject is not None else None,
        notices=tuple(notices),
        libraries=listed,
        sections=tuple(sections),
        map=build_library_map(catalog, library, grant, request, inputs.projections) if library is not None else None,
        root=request.root,
        publisher=inputs.publisher,
        publishers=folders,
        listed_of=listed_of,
        library_view=_library_view(library, grant, inputs.searchable, request.root) if library is not None else None,
    )


def _listing(inputs: PageInputs) -> Listing:
    """What the page lists, at most MAX_LISTED, and how many there are: a publisher's libraries, or the
    whole host's publishers (a library outside any folder as itself). Kept by everything it depends on."""
    if inputs.listings is None:
        return _list(inputs)
    key = (inputs.catalog.generation, inputs.grant.access_tags, inputs.publisher, inputs.request.root,
           inputs.searchable)
    return inputs.listings.get_or_make(key, lambda: _list(inputs))


def _list(inputs: PageInputs) -> Listing:
    catalog, grant, root = inputs.catalog, inputs.grant, inputs.request.root
    if inputs.scope is not None:
        names = sorted(inputs.scope)
        return tuple(_library_view(library, grant, inputs.searchable, root) for name in names[:MAX_LISTED]
                     if (library := catalog.library(name)) is not None), (), len(names)
    tags = grant.access_tags
    visible = []
    for name in catalog.names:
        library = catalog.library(name)
        bits = library.visible_bit_count(tags) if library is not None else 0
        if library is not None and bits:
            visible.append((name, bits, bits - library.visible_bit_count(frozenset()) if tags else 0))
    groups = publishers(visible)
    libraries, folders = [], []
    for group in groups[:MAX_LISTED]:
        library = catalog.library(group.name) if group.is_library else None
        if library is not None:
            libraries.append(_library_view(library, grant, inputs.searchable, root))
        else:
            href = root_href(group.name)
            folders.append(PublisherView(group.name, href, f"{href}libraries", group.libraries, group.bits,
                                         group.private_bits))
    return tuple(libraries), tuple(folders), len(groups)


def _library_view(library: Library, grant: Grant, searchable: frozenset[str], root: str = "/") -> LibraryView:
    visible = library.visible_bit_count(grant.access_tags)
    message = library.details.get("message")
    description = " ".join(message.split()) if isinstance(message, str) and message.strip() else None
    if description is not None and len(description) > MAX_DESCRIPTION_CHARACTERS:
        description = description[:MAX_DESCRIPTION_CHARACTERS] + "…"
    return LibraryView(
        name=library.name,
        page_href=page_href(PageRequest(root=root), library=library.name),
        file_href=library_href(library.name, root),
        map_href=library_map_href(library.name, root),
        bit_count=visible,
        private_bit_count=visible - library.visible_bit_count(frozenset()),
        embedding_model=library.embedding_model,
        description=description,
        searchable=library.embedding_model in searchable,
    )


class _SectionBuilder:
    """One section per model answering on this page: ranked by the query or a liked bit, or a sample."""

    def __init__(self, inputs: PageInputs, library: Library | None, notices: list[Notice]) -> None:
        self.inputs = inputs
        self.request = inputs.request
        self.library = library
        self.notices = notices
        self.rng = np.random.default_rng(inputs.seed)
        self.only = frozenset({library.name}) if library is not None else inputs.scope

    def sections(self, models: list[ModelIndex]) -> list[Section]:
        request = self.request
        if request.like:
            liked = [(index, row) for index in models if (row := self._visible_row(index, request.like)) is not None]
            if liked:
                return [self._more_like(index, row, position) for position, (index, row) in enumerate(liked)]
            self.notices.append(Notice("warning", f"No bit you may see has the id {request.like[:16]}…: it may have "
                                                  "been changed or removed. Here is a random sample instead."))
        sections = []
        for position, index in enumerate(models):
            searched = self._searched(index, position) if request.query else None
            sections.append(searched if searched is not None else self._sample(index, position))
        return sections

    def _searched(self, index: ModelIndex, position: int) -> Section | None:
        """The text search of one model in the request's mode; None (a sample instead, said in a
        notice) when a vector search has no vector."""
        request = self.request
        mode, vector = request.mode, self.inputs.vectors.get(index.model)
        failure = self.inputs.failures.get(index.model)
        if mode != "keyword" and vector is None:
            if mode == "vector":
                self.notices.append(Notice("error", f"Searching {index.model} failed: {failure}. Here is a random "
                                                    "sample of it instead.") if failure is not None else
                                    Notice("warning", f"Text search by meaning does not reach {index.model}: no "
                                                      "embedder serves it here. Here is a random sample of it instead."))
                return None
            self.notices.append(Notice("error", f"Searching {index.model} by meaning failed: {failure}. It is ranked "
                                                "by keywords alone instead.") if failure is not None else
                                Notice("info", f"No embedder serves {index.model} here: ranked by keywords alone."))
            mode = "keyword"
        return self._ranked(index, vector if mode != "keyword" else None, "Search results", position, mode)

    def _visible_row(self, index: ModelIndex, bit_id: str) -> int | None:
        mask = self._visible_mask(index)
        matches = index.ids == bytes.fromhex(bit_id)
        rows = np.flatnonzero(matches if mask is None else matches & mask)
        return int(rows[0]) if len(rows) else None

    def _more_like(self, index: ModelIndex, row: int, position: int) -> Section:
        segment, local = index.locate(row)
        title = _title(segment.record(local)["info"])
        vector = np.asarray(index.gather(np.array([row]))[0], dtype=np.float32)
        return self._ranked(index, vector, f"More like “{title[:120]}”", position)

    def _ranked(self, index: ModelIndex, vector: np.ndarray | None, heading: str, position: int,
                mode: Mode = "vector") -> Section:
        budget = self.request.budget
        text = self.request.query if mode != "vector" else None
        threshold = self.request.score_threshold if self.request.query else None  # a text search's
        query = Query(vector, budget.count, budget.count_type, libraries=self.only, text=text, mode=mode,
                      score_threshold=threshold)
        selection = run_query(index, query, self.inputs.grant, self.inputs.policy)
        self.notices.extend(Notice("info", _sentence(note)) for note in selection.notes)
        if threshold is not None and not len(selection.rows) and selection.best_score is not None:
            self.notices.append(Notice("info", f"Nothing in {index.model} scores {threshold:.2f} or more for this "
                                               f"search: its best bit scores {selection.best_score:.2f}."))
        rows = selection.rows
        if len(rows) > MAX_BITS:
            self.notices.append(Notice("info", f"The page shows the first {MAX_BITS} of the {len(rows):,} bits "
                                               "that fit this budget."))
            rows = rows[:MAX_BITS]
        similarities = [None] * len(rows) if selection.scores is None else selection.scores[:len(rows)].tolist()
        ranks = [None] * len(rows) if selection.ranks is None else selection.ranks[:len(rows)].tolist()
        bits = self._bit_views(index, rows, similarities, selection.first_bit_cut_to, position, ranks)
        more = None
        if self._more_to_show(index, query, len(rows)) and not budget.at_cap:
            more = page_href(self.request, budget=budget.doubled()) + f"#{_anchor(position, len(rows))}"
        ranked_by: RankedBy = "similarity" if selection.ranks is None else ("keywords" if mode == "keyword" else "fused")
        return Section(heading, index.model, "ranked", bits, ranked_by=ranked_by, more_href=more)

    def _more_to_show(self, index: ModelIndex, query: Query, shown: int) -> bool:
        """Whether a larger budget would show more: every visible bit is in a ranking by meaning, only
        those holding a keyword in one by keywords (asked for one bit more to know)."""
        if shown >= self._visible_count(index):
            return False
        if query.mode != "keyword" and query.score_threshold is None:
            return True
        one_more = replace(query, count=shown + 1, count_type="bit")
        return len(run_query(index, one_more, self.inputs.grant, self.inputs.policy).rows) > shown

    def _sample(self, index: ModelIndex, position: int) -> Section:
        budget = self.request.budget
        rows, cut_to = sample_rows(index, self._visible_mask(index), budget.count, budget.count_type, MAX_BITS,
                                   self.rng)
        bits = self._bit_views(index, rows, [None] * len(rows), cut_to, position)
        fresh = page_href(self.request, query="", like=None, seed=None)
        return Section("A random sample", index.model, "sample", bits, another_href=fresh,
                       permalink_href=page_href(self.request, query="", like=None, seed=self.inputs.seed))

    def _visible_mask(self, index: ModelIndex) -> np.ndarray | None:
        visible = index.visible_rows(self.inputs.grant.access_tags)
        only = as_mask(index, narrowing_mask(index, Query(np.zeros(0, np.float32), 1, "bit", libraries=self.only)))
        if only is None:
            return visible
        return only if visible is None else visible & only

    def _visible_count(self, index: ModelIndex) -> int:
        mask = self._visible_mask(index)
        return index.bit_count if mask is None else int(np.count_nonzero(mask))

    def _bit_views(self, index: ModelIndex, rows: np.ndarray, similarities: list[float | None], cut_to: int | None,
                   section: int, ranks: list[float | None] | None = None) -> tuple[BitView, ...]:
        views = []
        for place, (row, similarity, rank) in enumerate(zip(rows.tolist(), similarities, ranks or [None] * len(rows))):
            segment, local = index.locate(row)
            cut = cut_to if place == 0 else None
            bit = result_bit(segment, local, similarity=similarity, score=rank, cut_to_tokens=cut)
            tag = unscoped(index.tags[int(index.tag_ids[row])]) or None
            views.append(self._bit_view(bit, index.library_of(row).name, tag,
                                        int(segment.token_counts[local]) if cut else None, _anchor(section, place)))
        return tuple(views)

    def _bit_view(self, bit: dict[str, Any], library: str, tag: str | None, cut_from: int | None,
                  anchor: str) -> BitView:
        info = bit["info"]
        description = info.get("description")
        return BitView(
            id=bit["id"],
            anchor=anchor,
            title=_title(info),
            href=web_link(info["url"]),
            url=info["url"],
            description=description if isinstance(description, str) and description.strip() else None,
            text=bit["text"],
            similarity=float(bit["similarity"]) if bit.get("similarity") is not None else None,
            score=float(bit["score"]) if bit.get("score") is not None else None,
            token_count=bit["token_count"],
            cut_from=cut_from,
            library=library,
            access_tag=tag,
            like_href=page_href(self.request, query="", like=bit["id"], seed=None),
        )


def build_library_map(catalog: Catalog, library: Library, grant: Grant, request: PageRequest,
                      projections: ProjectionCache | None = None) -> LibraryMap:
    """The map of the bits of `library` that `grant` may see; its points link to "more like this"
    within the library, keeping `request`'s budget."""
    index = catalog.models[library.embedding_model]
    [position] = index.positions_of([library.name])
    visible = index.visible_rows(grant.access_tags)
    tags = library.visible_tags(grant.access_tags)

    def make() -> Projection:
        return project_library(index, position, visible)

    key = (catalog.generation, library.name, tags)
    projection = projections.get_or_make(key, make) if projections is not None else make()
    base = replace(request, query="", seed=None, library=library.name)
    return library_map(projection, library.name, library_map_href(library.name, request.root),
                       lambda bit_id: page_href(base, like=bit_id))


def _sentence(note: str) -> str:
    """A note of the query core ("the query has no keyword ...") as a sentence for a person."""
    return note[:1].upper() + note[1:] + ("" if note.endswith(".") else ".")


def _anchor(section: int, place: int) -> str:
    return f"bit-{section + 1}-{place + 1}"


def _title(info: dict[str, Any]) -> str:
    title = info.get("title")
    return title if isinstance(title, str) and title.strip() else str(info["url"])
