"""What a visitor asked the page for, read from `GET /`'s query string, and the page's own URLs.

The page never answers 400 for its query string: a value it cannot use becomes a notice that
says what was used instead (a person typed it, or followed an old link). URLs are built here
only, with `urlencode`, so every link the page shows round-trips through `parse_page_request`, and
under the page's own root: `/`, or `/p/{name}/` for a publisher's page (host/web/middleware/
publisher_prefix.py), so a visitor following links stays under the prefix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urlencode

from host.search.engine import CountType
from host.search.query import MODES, Mode

MAX_QUERY_CHARACTERS = 10_000  # as POST / (host.web.query_args)
MAX_BITS = 100  # a page longer than this is not read; POST / serves larger budgets
MAX_TOKENS = 25_000
MAX_SEED = 2**63 - 1
BIT_ID = re.compile(r"[0-9a-f]{64}")

NoticeLevel = Literal["info", "warning", "error"]


@dataclass(frozen=True)
class Notice:
    """One sentence (or two) telling the visitor what happened, instead of a silent fallback."""

    level: NoticeLevel
    text: str


@dataclass(frozen=True)
class Budget:
    count: int
    count_type: CountType

    def doubled(self) -> Budget:
        cap = MAX_BITS if self.count_type == "bit" else MAX_TOKENS
        return Budget(min(self.count * 2, cap), self.count_type)

    @property
    def at_cap(self) -> bool:
        return self.count >= (MAX_BITS if self.count_type == "bit" else MAX_TOKENS)


DEFAULT_BUDGET = Budget(10, "bit")
DEFAULT_MODE: Mode = "hybrid"  # as POST / ranks a text query
MODE_WORDS: dict[Mode, str] = {"hybrid": "meaning and keywords", "vector": "meaning", "keyword": "keywords"}


@dataclass(frozen=True)
class PageRequest:
    """A page's question. At most one of `query` and `like` is set (a non-empty query wins)."""

    query: str = ""
    like: str | None = None  # a well-formed bit id: 64 lower-case hex digits
    library: str | None = None  # a library name, as in /libraries
    budget: Budget = DEFAULT_BUDGET
    seed: int | None = None  # the random sample's seed: the same seed, the same sample
    mode: Mode = DEFAULT_MODE  # how a text query is ranked ("more like this" is by meaning, always)
    score_threshold: float | None = None  # a text search shows only bits scoring at least this (0-1)
    root: str = "/"  # the page's own path: "/", or "/p/{name}/" (percent-encoded)
    notices: tuple[Notice, ...] = field(default=(), compare=False)


def parse_page_request(params: Mapping[str, str], root: str = "/") -> PageRequest:
    notices: list[Notice] = []
    query = " ".join(params.get("q", "").split())  # one line, as a search box sends it
    if len(query) > MAX_QUERY_CHARACTERS:
        notices.append(Notice("warning", f"Your search is {len(query):,} characters long; "
                                         f"only the first {MAX_QUERY_CHARACTERS:,} were searched."))
        query = query[:MAX_QUERY_CHARACTERS]
    like = params.get("like", "").strip().lower() or None
    if like is not None and not query and not BIT_ID.fullmatch(like):
        notices.append(Notice("warning", f"“{_shown(params['like'])}” is not a bit id (64 hexadecimal digits), "
                                         "so there is nothing to find more like it. Here is a random sample instead."))
        like = None
    library = params.get("library", "").strip() or None
    return PageRequest(query=query, like=None if query else like, library=library,
                       budget=_budget(params, notices), seed=_seed(params, notices), mode=_mode(params, notices),
                       score_threshold=_score_threshold(params, notices), root=root, notices=tuple(notices))


def _mode(params: Mapping[str, str], notices: list[Notice]) -> Mode:
    given = params.get("mode", "").strip()
    for mode in MODES:
        if given == mode:
            return mode
    if given:
        notices.append(Notice("warning", f"A search is ranked by {', '.join(MODES)}, not “{_shown(given)}”; "
                                         f"it is ranked by {MODE_WORDS[DEFAULT_MODE]} ({DEFAULT_MODE})."))
    return DEFAULT_MODE


def _score_threshold(params: Mapping[str, str], notices: list[Notice]) -> float | None:
    given = params.get("score_threshold", "").strip()
    if not given:
        return None
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:  # NaN too
        notices.append(Notice("warning", f"A score threshold is a number from 0 to 1, not “{_shown(given)}”; "
                                         "the search shows its best bits whatever they score."))
        return None
    return value


def _budget(params: Mapping[str, str], notices: list[Notice]) -> Budget:
    count_type: CountType = DEFAULT_BUDGET.count_type
    given_type = params.get("count_type", "").strip()
    if given_type in ("token", "bit"):
        count_type = "token" if given_type == "token" else "bit"
    elif given_type:
        notices.append(Notice("warning", f"The budget is counted in tokens or bits, not “{_shown(given_type)}”; "
                                         "it is counted in bits."))
    default = DEFAULT_BUDGET.count if count_type == "bit" else 1000
    cap = MAX_BITS if count_type == "bit" else MAX_TOKENS
    given = params.get("count", "").strip()
    if not given:
        return Budget(default, count_type)
    if not _is_whole_number(given) or int(given) < 1:
        notices.append(Notice("warning", f"The budget must be a whole number of at least 1, not “{_shown(given)}”; "
                                         f"the page used {default}."))
        return Budget(default, count_type)
    count = int(given) if len(given) <= 18 else cap + 1  # int() refuses 4,300 digits and more
    if count > cap:
        unit = "bits" if count_type == "bit" else "tokens"
        notices.append(Notice("info", f"The page shows at most {cap:,} {unit} at once, so it shows {cap:,}. "
                                      "Programs can ask POST / for more."))
        count = cap
    return Budget(count, count_type)


def _seed(params: Mapping[str, str], notices: list[Notice]) -> int | None:
    given = params.get("seed", "").strip()
    if not given:
        return None
    if _is_whole_number(given) and len(given) <= 19 and int(given) <= MAX_SEED:
        return int(given)
    notices.append(Notice("warning", f"A sample's seed is a whole number up to {MAX_SEED}, not “{_shown(given)}”; "
                                     "here is a fresh sample."))
    return None


def _is_whole_number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # "²".isdigit() is true, and int("²") fails


def _shown(value: str, limit: int = 80) -> str:
    """A visitor's value, quoted back to them: one line, cut to `limit` characters."""
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def page_href(request: PageRequest | None = None, **changes: object) -> str:
    """The page's URL for `request` with `changes` (fields of PageRequest), default values left out."""
    wanted = replace(request or PageRequest(), **changes)  # type: ignore[arg-type]
    params: list[tuple[str, str]] = []
    if wanted.query:
        params.append(("q", wanted.query))
    if wanted.like and not wanted.query:
        params.append(("like", wanted.like))
    if wanted.library:
        params.append(("library", wanted.library))
    if wanted.budget != DEFAULT_BUDGET:
        params += [("count", str(wanted.budget.count)), ("count_type", wanted.budget.count_type)]
    if wanted.seed is not None:
        params.append(("seed", str(wanted.seed)))
    if wanted.mode != DEFAULT_MODE:
        params.append(("mode", wanted.mode))
    if wanted.score_threshold is not None:
        params.append(("score_threshold", repr(wanted.score_threshold)))
    return f"{wanted.root}?{urlencode(params)}" if params else wanted.root
