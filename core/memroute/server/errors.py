"""One error shape for every HTTP response that is not a success::

    {"error": {"message": "...", "details": [{"field": "limit", "message": "..."}]}}

Status codes: 400 malformed request (invalid JSON, a bad ``Host``), 401 missing / invalid / revoked key,
403 missing scope or another tenant named, 404 not found (another tenant's memory included), 405 method,
409 conflict, 413 body too large, 422 a field failed validation (FastAPI's request checks and memroute's
:class:`~memroute.errors.ValidationError` alike), 503 a backend or embedding source is unavailable, 504 the
response did not start within ``request_timeout_s``. A 500 means a bug: its body never carries a traceback.

The memory proxy's routes (``/v1/…``) answer in the error format of the API the caller speaks instead, so the
official SDKs raise their typed errors (``AuthenticationError``, ``PermissionDeniedError``, ...) with the
message: Anthropic's ``{"type": "error", "error": {"type": "authentication_error", "message": "..."}}`` on
``/v1/messages`` (and on ``/v1/models`` for a client that sends ``anthropic-version``), OpenAI's ``{"error":
{"message": "...", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}`` on the others
(:func:`api_style`, :func:`api_error_response`). The status codes are the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

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

__all__ = ["ApiStyle", "api_error_body", "api_error_response", "api_style", "error_body", "error_response",
           "install_error_handlers", "status_for"]

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


ApiStyle = Literal["openai", "anthropic"]

PROXY_PREFIX: Final = "/v1/"
_ANTHROPIC_PATHS: Final = ("/v1/messages",)
# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors); anything else is api_error.
_ANTHROPIC_TYPES: Final = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                           404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                           422: "invalid_request_error", 429: "rate_limit_error", 504: "timeout_error",
                           529: "overloaded_error"}
# OpenAI's: the type is invalid_request_error for every 4xx; the code says which (401: invalid_api_key).
_OPENAI_CODES: Final = {401: "invalid_api_key", 403: "insufficient_permissions", 404: "not_found",
                        405: "method_not_allowed", 413: "request_too_large", 422: "invalid_value",
                        429: "rate_limit_exceeded"}


def api_style(path: str, headers: Any = None) -> ApiStyle | None:
    """The error format of the API a request to ``path`` speaks: ``anthropic`` for ``/v1/messages…`` (and
    ``/v1/models…`` with an ``anthropic-version`` header), ``openai`` for the rest of ``/v1/…``, ``None`` for
    memroute's own routes. ``headers``: a case-insensitive mapping, or ASGI ``(bytes, bytes)`` pairs."""
    if not path.startswith(PROXY_PREFIX):
        return None
    if path.startswith(_ANTHROPIC_PATHS):
        return "anthropic"
    if path.startswith("/v1/models") and headers is not None:
        if isinstance(headers, list):
            if any(name.lower() == b"anthropic-version" for name, _ in headers):
                return "anthropic"
        elif "anthropic-version" in headers:
            return "anthropic"
    return "openai"


def api_error_body(style: ApiStyle, status: int, message: str, *, kind: str | None = None, code: str | None = None,
                   param: str | None = None) -> dict[str, Any]:
    """An error body in ``style``'s format. ``kind`` overrides the error type the status implies, ``code`` the
    OpenAI code; ``param`` names the field (OpenAI's ``param``; Anthropic has no such field, so the message
    names it)."""
    if style == "anthropic":
        error_type = kind or _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": error_type, "message": message}}
    error_type = kind or ("invalid_request_error" if status < 500 else "api_error")
    return {"error": {"message": message, "type": error_type, "param": param,
                      "code": code if code is not None else _OPENAI_CODES.get(status)}}


def api_error_response(style: ApiStyle, status: int, message: str, *, kind: str | None = None,
                       code: str | None = None, param: str | None = None,
                       headers: Mapping[str, str] | None = None) -> JSONResponse:
    """:func:`api_error_body` as a response (a 401 also says how to authenticate)."""
    extra = dict(headers or {})
    if status == 401:
        extra.setdefault("WWW-Authenticate", 'Bearer realm="memroute"')
    return JSONResponse(api_error_body(style, status, message, kind=kind, code=code, param=param),
                        status_code=status, headers=extra)


def status_for(exc: BaseException) -> int:
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def error_body(message: str, details: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    return {"error": {"message": message, "details": [{"field": f, "message": m} for f, m in details]}}


def error_response(status: int, message: str, details: Iterable[tuple[str, str]] = (),
                   headers: dict[str, str] | None = None, request: Request | None = None) -> JSONResponse:
    """memroute's error shape, or, for ``request`` on a proxy route, the shape of the API it speaks (the first
    field of ``details`` becomes OpenAI's ``param``)."""
    style = api_style(request.url.path, request.headers) if request is not None else None
    if style is not None:
        problems = list(details)
        return api_error_response(style, status, message, param=problems[0][0] if problems else None,
                                  headers=headers)
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
        return error_response(500, "internal error: the server failed to carry out the request", request=request)
    if status == 503:
        log.warning("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
    return error_response(status, str(exc), problems, request=request)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = []
    for error in exc.errors():
        kind = error.get("type", "")
        if kind == "json_invalid":
            return error_response(400, "Invalid JSON body", [("(body)", str(error.get("msg", "invalid JSON")))],
                                  request=request)
        details.append((_loc(error.get("loc", ())), str(error.get("msg", "invalid"))))
    fields = ", ".join(sorted({field for field, _ in details}))
    return error_response(422, f"invalid request: {fields}" if fields else "invalid request", details,
                          request=request)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.url.path}"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return error_response(exc.status_code, message, headers=headers, request=request)


_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at the request's path. Starlette's 405 names only the methods of
    the first route whose path matched (``GET`` for ``/api/memory``, which ``POST`` serves too)."""
    from starlette.routing import Match

    allowed = []
    for method in _METHODS:
        probe = {**request.scope, "method": method}
        if any(route.matches(probe)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal error: the server failed to carry out the request", request=request)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(MemrouteError, _memroute_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
