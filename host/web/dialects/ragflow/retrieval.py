"""`POST /api/v1/retrieval`: RAGFlow's retrieval API over the one query core (SPEC §10).

    {"question": "...", "dataset_ids": [...], "document_ids": [...], "page": 1, "page_size": 30,
     "similarity_threshold": 0.2, "vector_similarity_weight": 0.3, "top_k": 1024,
     "highlight": false, "metadata_condition": {...}, "keyword": false, "rerank_id": null, ...}
    -> {"code": 0, "data": {"chunks": [...], "doc_aggs": [{"doc_name", "doc_id", "count"}], "total": N}}

`dataset_ids` holds datasets' ids, as RAGFlow's clients send them, or library names: a library's or a
folder's, selecting every library in it the caller may see (host/web/library_selection.py); under
`/p/{name}/api/v1/`, only that name's.

RAGFlow ranks by keywords and vectors together, the vectors weighing `vector_similarity_weight`
(w). So does this door, through the host's one engine: the question is embedded with the
datasets' model and `host.search.query.run_query` ranks the visible bits of the named datasets
(narrowed by `document_ids`, else by `metadata_condition`, both through the constraint engine) in
hybrid mode with `keyword_weight = 1 - w`, keeping the best `top_k` bits whose fused score reaches
the threshold (no threshold when w is 0, as RAGFlow). A chunk's scores, as RAGFlow names them:

    similarity         the fused rank score (POST /'s `score`), 0-1, the same in every question: a
                       `similarity_threshold` above the best chunk's keeps none
    vector_similarity  the cosine similarity POST / reports
    term_similarity    the keyword side of the fusion, min(1, BM25 / the question's norm), 0-1

(a question of stop words alone is ranked by meaning: its similarity is then the cosine and its
term_similarity 0). `total` and `doc_aggs` count the kept list; `page` and `page_size` cut the
chunks out of it. RAGFlow's checks keep its order and messages (code 102); other bad arguments
are code 101 naming the field. Options that need models this host does not have (`rerank_id`,
`cross_languages`, `use_kg`, `toc_enhance`) are refused when set; `keyword: true` (in RAGFlow, an
LLM's extra keywords for the full-text side) is accepted and changes nothing: every word of the
question already counts on the keyword side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from host.catalog.libraries import Library
from host.catalog.selection import BadName
from host.constraints import And, Compare, ConstraintError, Everything, Node, Or, parse_metadata_condition
from host.constraints.words import fold, words
from host.library.json_text import parse_json
from host.search.engine import Selection
from host.search.query import Query, run_query
from host.web.caller import request_caller
from host.web.dialects.ragflow.envelope import ARGUMENT_ERROR, DATA_ERROR, RAGFlowError, ragflow_endpoint, success
from host.web.dialects.ragflow.highlight import highlight
from host.web.dialects.ragflow.view import INFO_KEYS, Dataset, dataset_of, library_of_dataset_id
from host.web.library_selection import NoSuchLibrary, choose, reach_of
from host.web.query_args import MAX_QUERY_CHARACTERS
from host.web.query_endpoint import embedded
from host.web.responses import cache_headers
from host.web.state import host_state

MAX_PAGE_SIZE = 100  # RAGFlow's own limit
MAX_DOCUMENT_IDS = 256
UNSUPPORTED = {"rerank_id": "this host has no rerank model", "cross_languages": "this host translates nothing",
               "use_kg": "this host has no knowledge graph", "toc_enhance": "this host keeps no table of contents"}


@dataclass(frozen=True)
class Options:
    """Everything in a retrieval request besides the datasets and the question."""

    page: int = 1
    page_size: int = 30
    similarity_threshold: float = 0.2
    vector_similarity_weight: float = 0.3
    top_k: int = 1024
    highlight: bool = False
    document_ids: tuple[str, ...] = ()
    metadata_condition: Node | None = None
    metadata_fields: tuple[str, ...] | None = None  # with include_metadata: these info fields per chunk


@ragflow_endpoint
async def retrieval(request: Request) -> Response:
    state = host_state(request)
    caller = request_caller(request)
    body = request_body(await request.body())
    catalog = state.catalog
    reach = reach_of(request.scope, catalog, caller.access_tags)
    chosen = chosen_datasets(body, partial(library_of_dataset_id, catalog),
                             partial(dataset_of, catalog, access_tags=caller.access_tags, reach=reach),
                             partial(choose, catalog, caller.access_tags, reach))
    if "question" not in body:
        raise RAGFlowError(DATA_ERROR, "`question` is required.")
    question = body["question"] if body["question"] is not None else ""
    if not isinstance(question, str):
        raise RAGFlowError(ARGUMENT_ERROR, f"`question` must be a string, got {type(question).__name__}")
    if len(question) > MAX_QUERY_CHARACTERS:
        raise RAGFlowError(ARGUMENT_ERROR, f"`question` is {len(question):,} characters long; "
                                           f"at most {MAX_QUERY_CHARACTERS:,} are read")
    options = parse_options(body)
    headers = cache_headers(caller.token)
    if not question.strip():
        return success({"chunks": [], "doc_aggs": [], "total": 0}, headers)
    narrowing = document_constraint(chosen, options.document_ids) if options.document_ids \
        else options.metadata_condition
    index = chosen[0].index
    vector = await embedded(state, index, question)
    weight = options.vector_similarity_weight
    query = Query(vector, options.top_k, "bit", constraint=narrowing,
                  libraries=frozenset(dataset.library.name for dataset in chosen), text=question, mode="hybrid",
                  keyword_weight=1 - weight,
                  # RAGFlow: with no weight on the vectors, the threshold does not apply.
                  score_threshold=options.similarity_threshold if weight > 0 else None)
    selection = await run_in_threadpool(run_query, index, query, caller.grant, state.search)
    data = await run_in_threadpool(render, selection, chosen, question, options)
    state.metrics.count("polymath_queries_total", format="ragflow")
    return success(data, headers)


def request_body(raw: bytes) -> dict[str, Any]:
    """The JSON body whatever its content type, `{}` when it is none (as RAGFlow reads it)."""
    try:
        body = parse_json(raw) if raw.strip() else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def chosen_datasets(body: Mapping[str, Any], library_of_id: Callable[[str], Library | None],
                    dataset_of: Callable[[Library], Dataset | None],
                    select: Callable[[list[str], str], list[Library]]) -> list[Dataset]:
    """The datasets named, in RAGFlow's order of checks and words: each a dataset's id (`library_of_id`),
    or a library's or a folder's name (`select`, host/web/library_selection.py `choose`). One the caller
    may not see is refused exactly as one that does not exist, and so is a library that is no dataset
    here (`dataset_of` None: every bit of it served by another library first, or outside the prefix)."""
    if not body.get("dataset_ids"):
        raise RAGFlowError(DATA_ERROR, "`dataset_ids` is required.")
    named = body["dataset_ids"]
    if not isinstance(named, list):
        raise RAGFlowError(DATA_ERROR, "`dataset_ids` should be a list")
    chosen: dict[str, Dataset] = {}
    for dataset_id in dict.fromkeys(str(item) for item in named):
        library = library_of_id(dataset_id)
        dataset = dataset_of(library) if library is not None else None
        if dataset is not None:
            chosen.setdefault(dataset_id, dataset)
            continue
        try:
            libraries = select([dataset_id], "dataset id or library name in dataset_ids")
        except BadName as problem:
            raise RAGFlowError(ARGUMENT_ERROR, str(problem)) from None
        except NoSuchLibrary:
            libraries = []
        datasets = [dataset for library in libraries if (dataset := dataset_of(library)) is not None]
        if not datasets:
            raise RAGFlowError(DATA_ERROR, f"You don't own the dataset {dataset_id:.80}.")
        for dataset in datasets:
            chosen.setdefault(dataset.id, dataset)
    chosen_list = list(chosen.values())
    if len({dataset.index.model for dataset in chosen_list}) > 1:
        raise RAGFlowError(DATA_ERROR, "Datasets use different embedding models.")
    return chosen_list


def parse_options(body: Mapping[str, Any]) -> Options:
    for name, reason in UNSUPPORTED.items():
        if body.get(name) not in (None, False, "", [], "false", "False"):
            raise RAGFlowError(ARGUMENT_ERROR, f"`{name}` is not supported: {reason}")
    if _flag(body, "keyword") is None:
        raise RAGFlowError(ARGUMENT_ERROR, "`keyword` should be a boolean")
    flag = _flag(body, "highlight")
    if flag is None:
        raise RAGFlowError(DATA_ERROR, "`highlight` should be a boolean")
    top_k = _integer(body, "top_k", 1024)
    if top_k <= 0:
        raise RAGFlowError(DATA_ERROR, "`top_k` must be greater than 0")
    page, page_size = _integer(body, "page", 1), _integer(body, "page_size", 30)
    if page < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise RAGFlowError(ARGUMENT_ERROR, f"`page` must be at least 1 and `page_size` from 1 to {MAX_PAGE_SIZE}, "
                                           f"got {page} and {page_size}")
    weight = _number(body, "vector_similarity_weight", 0.3)
    if not 0 <= weight <= 1:
        raise RAGFlowError(ARGUMENT_ERROR, f"`vector_similarity_weight` must be from 0 to 1, got {weight:g}")
    documents = body.get("document_ids") or []
    if not isinstance(documents, list):
        raise RAGFlowError(DATA_ERROR, "`documents` should be a list")
    if len(documents) > MAX_DOCUMENT_IDS:
        raise RAGFlowError(ARGUMENT_ERROR, f"`document_ids` holds {len(documents)} ids; at most {MAX_DOCUMENT_IDS}")
    try:
        parsed = parse_metadata_condition(body.get("metadata_condition"))
    except ConstraintError as problem:
        raise RAGFlowError(ARGUMENT_ERROR, str(problem)) from None
    condition = None if isinstance(parsed, Everything) else parsed
    return Options(page, page_size, _number(body, "similarity_threshold", 0.2), weight, top_k, flag,
                   tuple(str(item) for item in documents), condition, _metadata_fields(body))


def _flag(body: Mapping[str, Any], name: str) -> bool | None:
    """A boolean as RAGFlow reads it (true, false, "true", "false"; absent or null is false); None if not one."""
    value = body.get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _integer(body: Mapping[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, bool) and isinstance(value, int | str):
        try:
            return int(value)
        except ValueError:
            pass
    raise RAGFlowError(ARGUMENT_ERROR, f"`{name}` must be an integer, got {value!r:.40}")


def _number(body: Mapping[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, bool) and isinstance(value, int | float | str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return number
    raise RAGFlowError(ARGUMENT_ERROR, f"`{name}` must be a finite number, got {value!r:.40}")


def _metadata_fields(body: Mapping[str, Any]) -> tuple[str, ...] | None:
    """RAGFlow 0.27's `include_metadata` / `metadata_fields`: which info fields each chunk carries."""
    if not _flag(body, "include_metadata"):
        return None
    fields = body.get("metadata_fields")
    if fields is None:
        return INFO_KEYS
    if not isinstance(fields, list) or not all(field in INFO_KEYS for field in fields):
        raise RAGFlowError(ARGUMENT_ERROR, f"`metadata_fields` must be a list of {', '.join(INFO_KEYS)}")
    return tuple(fields)


def document_constraint(chosen: list[Dataset], document_ids: tuple[str, ...]) -> Node:
    """The named documents as a constraint (library = its library AND url = its folded URL)."""
    by_id = {document: (dataset, value) for dataset in chosen for document, value in dataset.document_values().items()}
    clauses: list[Node] = []
    for document in dict.fromkeys(document_ids):
        if document not in by_id:
            raise RAGFlowError(DATA_ERROR, f"The datasets don't own the document {document:.80}")
        dataset, value = by_id[document]
        clauses.append(And((Compare("library", "=", fold(dataset.library.name)),
                            Compare("url", "=", dataset.folded_url(value)))))
    return clauses[0] if len(clauses) == 1 else Or(tuple(clauses))


def render(selection: Selection, chosen: list[Dataset], question: str, options: Options) -> dict[str, Any]:
    """The kept rows as RAGFlow's data: this page's chunks, and doc_aggs and total over all of them."""
    index = chosen[0].index
    assert selection.scores is not None  # the question's vector came along
    vector_similarity = selection.scores
    fused = vector_similarity if selection.ranks is None else selection.ranks  # no keyword: by meaning alone
    term = np.zeros(len(selection.rows)) if selection.keyword_scores is None else selection.keyword_scores
    by_library = {dataset.library.name: dataset for dataset in chosen}
    segments = np.searchsorted(index.offsets, selection.rows, side="right") - 1
    locals_ = selection.rows - index.offsets[segments]
    datasets = [by_library[index.library_of(row).name] for row in selection.rows.tolist()]
    values = [dataset.value_of_row(row) for dataset, row in zip(datasets, locals_.tolist())]
    question_words = frozenset(words(question))
    start = (options.page - 1) * options.page_size
    chunks = []
    for position in range(start, min(start + options.page_size, len(selection.rows))):
        dataset, row = datasets[position], int(locals_[position])
        record = dataset.segment.record(row)
        raw_info = record.get("info")
        info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
        url = str(info.get("url", ""))
        chunk: dict[str, Any] = {
            "id": dataset.segment.bit_id(row), "content": record.get("text", ""),
            "document_id": dataset.document_id(values[position]), "document_keyword": url, "document_name": url,
            "dataset_id": dataset.id, "image_id": "", "important_keywords": [], "questions": [], "tag_kwd": [],
            "positions": [], "doc_type_kwd": "",
            "similarity": float(fused[position]),
            "vector_similarity": float(vector_similarity[position]),
            "term_similarity": float(term[position]),
        }
        if options.highlight:
            chunk["highlight"] = highlight(chunk["content"], question_words)
        if options.metadata_fields is not None:
            chunk["document_metadata"] = {key: info[key] for key in options.metadata_fields
                                          if isinstance(info.get(key), str)}
        chunks.append(chunk)
    return {"chunks": chunks, "doc_aggs": document_counts(datasets, values, locals_), "total": len(selection.rows)}


def document_counts(datasets: list[Dataset], values: list[int], rows: np.ndarray) -> list[dict[str, Any]]:
    """RAGFlow's doc_aggs: the kept chunks per document, most first (ties: the best-ranked first)."""
    counts: dict[tuple[str, int], list[int]] = {}  # (library, url value) -> [count, position of its best chunk]
    for position, (dataset, value) in enumerate(zip(datasets, values)):
        counts.setdefault((dataset.library.name, value), [0, position])[0] += 1
    aggregates = []
    for (_, value), (count, first) in sorted(counts.items(), key=lambda item: -item[1][0]):
        dataset = datasets[first]
        aggregates.append({"doc_name": dataset.info(int(rows[first])).get("url", ""),
                           "doc_id": dataset.document_id(value), "count": count})
    return aggregates
