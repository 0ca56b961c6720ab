"""Which libraries a request reaches, for one caller: its `/p/{name}/` prefix and the library names a
door was given (`POST /`'s `libraries`, RAGFlow's `dataset_ids`, Dify's `knowledge_id`, an OpenAI
vector store's id, MCP's `library`), resolved by host/catalog/selection.py. (The page's `library`
is one library's page, looked up by its exact name within the reach: host/web/page/data.py.)

- A name selects the library of that name and the libraries in the folder of that name, of those
  the caller may see a bit of. A name that selects none of them is refused exactly as one that
  does not exist (`NoSuchLibrary`: the same words, 404 where the door has statuses), so a private
  library's name tells nothing. A malformed name is `BadName` (400), never looked up.
- Under `/p/{name}/` (host/web/middleware/publisher_prefix.py) the request reaches only what that
  name selects (`Reach`): a name outside it is refused the same way, and a prefix that selects
  nothing the caller may see is a 404 for every path under it.

Each door turns the two refusals into its own shape; which libraries a name means is decided here
only, and the query core narrows to them (`Query.libraries`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from starlette.types import Scope

from host.catalog.generations import Catalog
from host.catalog.libraries import Library
from host.catalog.selection import BadName, check_name, selected
from host.search.errors import QueryError
from host.web.errors import HTTPError
from host.web.middleware.publisher_prefix import publisher


class NoSuchLibrary(LookupError):
    """A name that selects no library the caller may see here: absent, private, or outside the prefix."""

    def __init__(self, name: str) -> None:
        super().__init__(f"there is no library or folder of libraries named {name[:80]!r} here")
        self.name = name


def refusal(problem: BadName | NoSuchLibrary, headers: dict[str, str] | None = None) -> HTTPError:
    """The HTTP answer to a refused name: 400 malformed, 404 selecting nothing."""
    return HTTPError(400 if isinstance(problem, BadName) else 404, str(problem), headers)


def visible_selection(catalog: Catalog, access_tags: frozenset[str], name: str) -> list[Library]:
    """The libraries `name` selects that a caller holding `access_tags` may see a bit of, in name order."""
    found = []
    for selected_name in selected(catalog.names, name):
        library = catalog.library(selected_name)
        if library is not None and library.visible_bit_count(access_tags):
            found.append(library)
    return found


@dataclass(frozen=True)
class Reach:
    """What one request reaches: the whole host, or the libraries its `/p/{name}/` selects."""

    name: str | None = None  # the prefix's name; None: the whole host
    names: frozenset[str] | None = None  # the libraries in it the caller may see; None: every library

    def holds(self, library_name: str) -> bool:
        return self.names is None or library_name in self.names


def reach_of(scope: Scope, catalog: Catalog, access_tags: frozenset[str],
             headers: dict[str, str] | None = None) -> Reach:
    """This request's reach; HTTPError 404 (with `headers`) for a prefix that selects nothing visible."""
    name = publisher(scope)
    if name is None:
        return Reach()
    libraries = visible_selection(catalog, access_tags, name)
    if not libraries:
        raise refusal(NoSuchLibrary(name), headers)
    return Reach(name, frozenset(library.name for library in libraries))


def choose(catalog: Catalog, access_tags: frozenset[str], reach: Reach, names: Iterable[str],
           what: str = "library name") -> list[Library]:
    """The libraries `names` select within `reach` that the caller may see, each once, in the order
    named. BadName for a malformed name (`what` names the argument), NoSuchLibrary for one that selects
    nothing."""
    chosen: dict[str, Library] = {}
    for given in names:
        name = check_name(given, what)
        found = [library for library in visible_selection(catalog, access_tags, name) if reach.holds(library.name)]
        if not found:
            raise NoSuchLibrary(given)
        chosen.update((library.name, library) for library in found)
    return list(chosen.values())


def with_held_back(catalog: Catalog, reach: Reach, names: Iterable[str] | None) -> list[Library]:
    """Every library with bits that the request's prefix and `names` (None: the prefix itself) select,
    whether the caller may see a bit of it or not: what an answer counts as held back where the
    publisher tells readers so. Asked only once `choose` has taken the names."""
    within = None if reach.name is None else set(selected(catalog.names, reach.name))
    found: dict[str, Library] = {}
    for given in ([] if reach.name is None else [reach.name]) if names is None else names:
        for name in selected(catalog.names, check_name(given)):
            library = catalog.library(name)
            if library is not None and library.bit_count and (within is None or name in within):
                found[name] = library
    return list(found.values())


def in_reach(catalog: Catalog, reach: Reach) -> list[Library] | None:
    """The libraries of a prefix (those the caller may see), or None for the whole host."""
    if reach.names is None:
        return None
    return [library for name in sorted(reach.names) if (library := catalog.library(name)) is not None]


def one_model(libraries: Sequence[Library], model: str | None = None) -> str:
    """The embedding model to answer `libraries` from: `model` if one of theirs, else theirs if they
    share one; a QueryError naming their models otherwise (they are libraries the caller may see)."""
    models = sorted({library.embedding_model for library in libraries})
    if model is not None:
        if model not in models:
            raise QueryError(f"query_embedding_model {model[:80]!r} is not the model of these libraries: "
                             f"they use {', '.join(models)}")
        return model
    if len(models) > 1:
        raise QueryError(f"these libraries use different embedding models ({', '.join(models)}): "
                         "ask the libraries of one model at a time")
    return models[0]
