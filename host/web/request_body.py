"""A request body's arguments, from JSON, urlencoded or multipart bodies (numbers may be strings)."""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request

from host.web.errors import HTTPError, bad_request

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


async def read_fields(request: Request, max_fields: int) -> dict[str, Any]:
    """The arguments as a dict; 400 for a malformed body, 415 for another content type."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "application/json":
        try:
            fields = json.loads(await request.body())
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise bad_request("the body is not valid JSON") from None
        if not isinstance(fields, dict):
            raise bad_request("the JSON body must be an object of arguments")
        return fields
    if media_type in FORM_TYPES:
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


async def _field_text(value: str | UploadFile) -> str:
    if isinstance(value, str):
        return value
    try:
        return (await value.read()).decode()
    except UnicodeDecodeError:
        raise bad_request(f"form field {value.filename!r} is not UTF-8 text") from None
