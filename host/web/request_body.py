"""A request body's arguments, from JSON, urlencoded or multipart bodies (numbers may be strings)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request

from host.web.errors import HTTPError, bad_request
from host.web.fast_json import parse_json

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


async def read_fields(request: Request, max_fields: int) -> dict[str, Any]:
    """The arguments as a dict; 400 for a malformed body, 415 for another content type."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "application/json":
        try:
            fields = parse_json(await request.body())
        except ValueError as problem:
            raise bad_request(f"the body is {problem}") from None
        if not isinstance(fields, dict):
            raise bad_request("the JSON body must be an object of arguments")
        return fields
    if media_type in FORM_TYPES:
        # Every argument is text: a body that is not UTF-8 is refused, never read as Latin-1.
        try:
            text = (await request.body()).decode()
        except UnicodeDecodeError:
            raise bad_request("the form body is not UTF-8 text") from None
        if media_type == "application/x-www-form-urlencoded":
            return _urlencoded_fields(text, max_fields)
        try:
            # `async with` closes uploaded parts' temporary files once they are read.
            async with request.form(max_files=max_fields, max_fields=max_fields) as form:
                return {key: await _field_text(value) for key, value in form.items()}
        except MultiPartException as problem:
            raise bad_request(f"the form body is malformed: {problem.message}") from None
    if not media_type and not await request.body():
        return {}
    raise HTTPError(
        415,
        f"unsupported content type {media_type!r}; send application/json, "
        "application/x-www-form-urlencoded or multipart/form-data",
    )


def _urlencoded_fields(text: str, max_fields: int) -> dict[str, Any]:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict", max_num_fields=max_fields)
    except UnicodeDecodeError:
        raise bad_request("the form body is not UTF-8 text once percent-decoded") from None
    except ValueError:
        raise bad_request(f"the form body is malformed: too many fields (at most {max_fields})") from None
    return dict(pairs)  # a repeated field: the last one counts


async def _field_text(value: str | UploadFile) -> str:
    if isinstance(value, str):
        return value
    try:
        return (await value.read()).decode()
    except UnicodeDecodeError:
        raise bad_request(f"form field {value.filename!r} is not UTF-8 text") from None
