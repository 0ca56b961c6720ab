"""`GET /api/v1/datasets` and `GET /api/v1/datasets/{id}/documents`, as RAGFlow lists them.

Datasets: `{"code": 0, "data": [dataset, ...], "total_datasets": N}`, the libraries this caller may
see a bit of, in path order (the host keeps no creation times, so `orderby` and `desc` are checked
and accepted but the order stays the path order). RAGFlow's query parameters are checked as its
model checks them (code 101, its "Field: <...> - Message: <...> - Value: <...>" words); an `id`,
`ids` or `name` the caller may not see is code 108, exactly as one that does not exist.

Documents: `{"code": 0, "data": {"total": N, "docs": [document, ...]}}`, a dataset's documents in
the order of their URLs, filtered by `id`, `ids`, `name` (a URL) or `keywords` (part of a URL).

Under `/p/{name}/api/v1/`, the datasets are that name's libraries alone.

Every count is over bits the caller may see (view.py); fields the host has no value for are left
out rather than made up, except the few RAGFlow's own clients index directly (`description`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from host.constraints.words import fold
from host.web.caller import request_caller
from host.web.dialects.ragflow.envelope import (
    ARGUMENT_ERROR,
    DATA_ERROR,
    PERMISSION_ERROR,
    RAGFlowError,
    ragflow_endpoint,
    success,
)
from host.web.dialects.ragflow.view import Dataset, visible_datasets
from host.web.library_selection import reach_of
from host.web.responses import cache_headers
from host.web.state import host_state

DATASET_PARAMETERS = ("id", "ids", "name", "page", "page_size", "orderby", "desc", "include_parsing_status", "ext",
                      "type")
MAX_PAGE_SIZE = 100  # RAGFlow's own limit
MAX_DOCUMENT_PAGE_SIZE = 1024
TRUE, FALSE = ("true", "1", "yes", "y", "on", "t"), ("false", "0", "no", "n", "off", "f")  # pydantic's booleans


@ragflow_endpoint
async def list_datasets(request: Request) -> Response:
    caller = request_caller(request)
    params = request.query_params
    for name, value in params.multi_items():
        if name not in DATASET_PARAMETERS:
            raise _invalid(name, "Extra inputs are not permitted", value)
    page, page_size = _page(params, MAX_PAGE_SIZE)
    orderby = params.get("orderby", "create_time")
    if orderby not in ("create_time", "update_time"):
        raise _invalid("orderby", "Input should be 'create_time' or 'update_time'", orderby)
    for flag in ("desc", "include_parsing_status"):
        if flag in params and params[flag].lower() not in TRUE + FALSE:
            raise _invalid(flag, "Input should be a valid boolean", params[flag])
    datasets = reachable_datasets(request, caller.access_tags)
    wanted = [value for given in params.getlist("ids") for value in given.split(",") if value.strip()]
    if "id" in params:
        wanted.append(params["id"])
    by_id = {dataset.id: dataset for dataset in datasets}
    for dataset_id in wanted:
        if dataset_id not in by_id:
            raise RAGFlowError(PERMISSION_ERROR, f"You lack permission for dataset '{dataset_id:.80}'")
    if wanted:
        datasets = [dataset for dataset in datasets if dataset.id in wanted]
    if "name" in params:
        datasets = [dataset for dataset in datasets if dataset.library.name == params["name"]]
        if not datasets:
            raise RAGFlowError(PERMISSION_ERROR, f"You lack permission for dataset '{params['name']:.80}'")
    shown = datasets[(page - 1) * page_size : page * page_size]
    return success([describe(dataset) for dataset in shown], cache_headers(caller.token, revalidate=True),
                   total_datasets=len(datasets))


def reachable_datasets(request: Request, access_tags: frozenset[str]) -> list[Dataset]:
    """The datasets a caller holding `access_tags` may see, within the request's `/p/{name}/` prefix."""
    catalog = host_state(request).catalog
    return visible_datasets(catalog, access_tags, reach_of(request.scope, catalog, access_tags))


def describe(dataset: Dataset) -> dict[str, Any]:
    """A dataset as RAGFlow writes one (the keys its SDK keeps, and the common ones), from visible bits."""
    message = dataset.library.details.get("message")
    return {
        "id": dataset.id,
        "name": dataset.library.name,
        "description": message if isinstance(message, str) else None,
        "avatar": "",
        "embedding_model": dataset.index.model,
        "permission": "team",
        "chunk_method": "naive",
        "parser_config": {},
        "pagerank": 0,
        "status": "1",
        "document_count": len(dataset.documents.values),
        "chunk_count": dataset.chunk_count,
        "token_num": dataset.token_count,
        "similarity_threshold": 0.2,  # what retrieval applies when not told (RAGFlow's defaults)
        "vector_similarity_weight": 0.3,
    }


@ragflow_endpoint
async def list_documents(request: Request) -> Response:
    caller = request_caller(request)
    dataset_id = request.path_params["dataset_id"]
    dataset = next((found for found in reachable_datasets(request, caller.access_tags) if found.id == dataset_id),
                   None)
    if dataset is None:
        raise RAGFlowError(DATA_ERROR, f"You don't own the dataset {dataset_id:.80}.")
    params = request.query_params
    page, page_size = _page(params, MAX_DOCUMENT_PAGE_SIZE)
    documents = dataset.documents
    positions: Iterable[int] = range(len(documents.values))
    wanted = [value for given in params.getlist("ids") for value in given.split(",") if value.strip()]
    if "id" in params:
        wanted.append(params["id"])
    if wanted:
        ids = {dataset.document_id(int(value)): position for position, value in enumerate(documents.values)}
        for document_id in wanted:
            if document_id not in ids:
                raise RAGFlowError(DATA_ERROR, f"You don't own the document {document_id:.80}.")
        positions = sorted({ids[document_id] for document_id in wanted})
    if params.get("name"):
        name = fold(params["name"])
        positions = [position for position in positions if dataset.folded_url(int(documents.values[position])) == name]
    if params.get("keywords"):
        part = fold(params["keywords"])
        positions = [position for position in positions if part in dataset.folded_url(int(documents.values[position]))]
    chosen = list(positions)
    docs = [describe_document(dataset, position) for position in chosen[(page - 1) * page_size : page * page_size]]
    return success({"total": len(chosen), "docs": docs}, cache_headers(caller.token, revalidate=True))


def describe_document(dataset: Dataset, position: int) -> dict[str, Any]:
    """A document (the visible bits of one URL) as RAGFlow writes one; its info in `meta_fields`."""
    documents = dataset.documents
    info = dataset.info(int(documents.first_rows[position]))
    return {
        "id": dataset.document_id(int(documents.values[position])),
        "name": info.get("url", ""),
        "location": info.get("url", ""),
        "dataset_id": dataset.id,
        "chunk_count": int(documents.chunk_counts[position]),
        "token_count": int(documents.token_counts[position]),
        "chunk_method": "naive",
        "run": "DONE",
        "status": "1",
        "progress": 1.0,
        "meta_fields": info,
    }


def _invalid(field: str, problem: str, value: str) -> RAGFlowError:
    return RAGFlowError(ARGUMENT_ERROR, f"Field: <{field}> - Message: <{problem}> - Value: <{value:.80}>")


def _page(params: QueryParams, largest: int) -> tuple[int, int]:
    numbers = []
    for name, default in (("page", 1), ("page_size", 30)):
        given = params.get(name, str(default))
        if not given.strip().lstrip("+").isdigit() or not 1 <= int(given) <= (largest if name == "page_size" else
                                                                                 1 << 31):
            bound = f"from 1 to {largest}" if name == "page_size" else "at least 1"
            raise _invalid(name, f"Input should be an integer {bound}", given)
        numbers.append(int(given))
    return numbers[0], numbers[1]
