"""One error shape for every HTTP response that is not a success::

    {"error": {"message": "...", "details": [{"field": "limit", "message": "..."}]}}

Status codes: 400 malformed request (invalid JSON, a bad ``Host``), 401 missing / invalid / revoked key,
403 missing scope or another tenant named, 404 not found (another tenant's memory included), 405 method,
409 conflict, 413 body too large, 422 a field failed validation (FastAPI's request checks and memroute's
:class:`~memroute.errors.ValidationError` alike), 503 a backend or embedding source is unavailable, 504 the
response did not start within ``request_timeout_s``. A 500 means a bug: its body never carries a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memroute.errors import (
    AuthenticationError,
    BackendUnavailableError,
    ConfigError,
    ConflictError,
    EmbeddingError,
    MemrouteError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)

__all__ = ["error_body", "error_response", "install_error_handlers", "status_for"]

log = logging.getLogger("memroute.server")

_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (AuthenticationError, 401),
    (PermissionDeniedError, 403),
    (NotFoundError, 404),
    (ConflictError, 409),
    (ValidationError, 422),
    (ConfigError, 422),
    (BackendUnavailableError, 503),
    (EmbeddingError, 503),
)


def status_for(exc: BaseException) -> int:
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def error_body(message: str, details: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    return {"error": {"message": message, "details": [{"field": f, "message": m} for f, m in details]}}


def error_response(status: int, message: str, details: Iterable[tuple[str, str]] = (),
                   headers: dict[str, str] | None = None) -> JSONResponse:
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="memroute"'}
    return JSONResponse(error_body(message, details), status_code=status, headers=headers)


def _loc(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] or parts
    return ".".join(parts) or "(root)"


async def _memroute_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MemrouteError)
    status = status_for(exc)
    problems = list(getattr(exc, "problems", ()) or ())
    if status == 500:
        log.error("unexpected %s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
        return error_response(500, "internal error: the server failed to carry out the request")
    if status == 503:
        log.warning("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
    return error_response(status, str(exc), problems)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = []
    for error in exc.errors():
        kind = error.get("type", "")
        if kind == "json_invalid":
            return error_response(400, "Invalid JSON body", [("(body)", str(error.get("msg", "invalid JSON")))])
        details.append((_loc(error.get("loc", ())), str(error.get("msg", "invalid"))))
    fields = ", ".join(sorted({field for field, _ in details}))
    return error_response(422, f"invalid request: {fields}" if fields else "invalid request", details)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.url.path}"
    return error_response(exc.status_code, message, headers=dict(exc.headers or {}))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal error: the server failed to carry out the request")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(MemrouteError, _memroute_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
