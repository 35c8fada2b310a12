"""``/openapi.json`` post-processing: every error response documents the one error body (not FastAPI's
default ``HTTPValidationError``), and shared responses (401/403/413/422) appear on every route that can
answer them. The models themselves come from :mod:`memroute.server.schema`."""

from __future__ import annotations

import re
from typing import Any

import attrs
from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from memroute.server.auth import PUBLIC, SCOPE_KEY, iter_routes
from memroute.server.schema import wire_model

__all__ = ["ErrorBody", "install_openapi"]


@attrs.frozen(kw_only=True)
class ErrorDetail:
    field: str
    """Dotted path of the field at fault (``limit``, ``metadata.source``, ``line 3``)."""
    message: str


@attrs.frozen(kw_only=True)
class ErrorInfo:
    message: str
    details: tuple[ErrorDetail, ...] = ()


@attrs.frozen(kw_only=True)
class ErrorBody:
    """Every error response: ``{"error": {"message", "details": [{"field", "message"}]}}``."""

    error: ErrorInfo


_ERROR_STATUSES = {
    "400": "malformed request (invalid JSON body, JSON nested deeper than max_json_depth, Host not allowed)",
    "408": "the request body did not arrive within body_timeout_s",
    "413": "request body too large",
    "422": "a field failed validation (details name each field)",
    "429": "the key is over its rate or concurrency limit (Retry-After says when to retry)",
    "503": "a backend or the embedding source is unavailable",
    "504": "no response within request_timeout_s",
}
_EXAMPLE_422 = {"error": {"message": "invalid request: limit",
                          "details": [{"field": "limit", "message": "Input should be less than or equal to 200"}]}}


def _restore_examples(schema: dict[str, Any], app: FastAPI) -> None:
    """Put the routes' response examples back as written. FastAPI encodes the document with
    ``exclude_none``, which also drops every ``null`` inside an example (``"sessionId": null``), so an example
    would lack fields the server always sends and no longer conform to its own schema."""
    paths = schema.get("paths", {})
    for path, route in iter_routes(app.routes):
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        for method in route.methods or ():
            operation = paths.get(re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path), {}).get(method.lower())
            if operation is None:
                continue
            for status, response in route.responses.items():
                for media_type, media in response.get("content", {}).items():
                    if "example" not in media:
                        continue
                    documented = operation["responses"].get(str(status), {}).get("content", {}).get(media_type)
                    if documented is not None:
                        documented["example"] = jsonable_encoder(media["example"])


def install_openapi(app: FastAPI) -> None:
    error_model = wire_model(ErrorBody)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        _restore_examples(schema, app)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, definition in error_model.model_json_schema(ref_template="#/components/schemas/{model}").get(
                "$defs", {}).items():
            components[name] = definition
        body_schema = dict(error_model.model_json_schema(ref_template="#/components/schemas/{model}"))
        body_schema.pop("$defs", None)
        components["ErrorBody"] = body_schema
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "a memroute API key (mr_…)"}}
        for path_item in schema.get("paths", {}).values():
            for operation in path_item.values():
                if not isinstance(operation, dict) or "responses" not in operation:
                    continue
                responses = operation["responses"]
                if operation.get(SCOPE_KEY) != PUBLIC:
                    operation["security"] = [{"bearer": []}]
                    for status, text in _ERROR_STATUSES.items():
                        responses.setdefault(status, {"description": text})
                for status, response in responses.items():
                    if status[:1] in ("4", "5"):
                        example = response.get("content", {}).get("application/json", {}).get("example")
                        if status == "422" and example is None:
                            example = _EXAMPLE_422
                        content: dict[str, Any] = {"schema": ref}
                        if example is not None:
                            content["example"] = example
                        response["content"] = {"application/json": content}
                        if response.get("description") == "Validation Error":
                            response["description"] = _ERROR_STATUSES["422"]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
