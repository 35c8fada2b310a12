"""The lean request path of the hot JSON routes (``POST /api/memory/search``, ``/retrieve-preview``).

A route declared with ``route_class_override=LeanRoute`` keeps everything FastAPI knows about it — its path,
scope, request body model, ``response_model``, examples, so ``/openapi.json`` is unchanged — but a request with
a well-formed body takes a shorter way through it:

1. the body is read, parsed (``json.loads``) and validated with the route's own request model, as FastAPI does;
2. the key is checked inline by the route's scope dependency (:func:`memroute.server.auth.require`);
3. the endpoint is awaited with ``request``, ``principal`` and ``body``;
4. the typed report is written with :func:`memroute.server.schema.wire_dumper` (the response model's fields
   and aliases, without validating a report the service built) and pydantic's JSON encoder.

What it skips is FastAPI's general machinery: dependency solving (~0.2 ms a request here) and the response
model's validation (~0.3 ms for a 20-hit search). Anything unusual — no or another ``content-type``, an empty
body, invalid JSON, a field that fails validation — is handed to the route's ordinary FastAPI handler, which
answers exactly as before (its 400 / 422 bodies, and its order of checks: a malformed body is reported before
the key is looked at). Measured in docs/performance.md ("HTTP server").

An endpoint of a lean route takes exactly ``request``, a :data:`~memroute.server.auth.CurrentPrincipal` and
one body model, and returns the typed report (or a ``Response``); the route's other FastAPI options stay at
their defaults. A route of another shape is refused when it is declared.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import fastapi.routing
import pydantic
import pydantic_core
from fastapi import Request, Response

from memroute.server.auth import SCOPE_KEY, require
from memroute.server.schema import wire_dumper

__all__ = ["InlineBudget", "LeanRoute"]

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _json_body_type(content_type: str | None) -> bool:
    # Only the plain type is taken on the lean path; FastAPI's handler decides every other case.
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == "application/json"


class LeanRoute(fastapi.routing.APIRoute):
    """An ``APIRoute`` whose handler takes the lean path for well-formed requests (the module docstring)."""

    def get_route_handler(self) -> Handler:
        full = super().get_route_handler()
        if self._include_adds_dependencies():
            return full  # dependencies from include_router(...) only FastAPI's handler runs
        scope = (self.openapi_extra or {}).get(SCOPE_KEY)
        body_model, names = self._shape()
        check_key = require(scope)
        endpoint = self.endpoint
        status = self.status_code or 200
        dump = wire_dumper(self.response_model) if self.response_model is not None else None
        request_name, principal_name, body_name = names

        async def handler(request: Request) -> Response:
            body = await _valid_body(request, body_model)
            if body is None:
                return await full(request)
            principal = await check_key(request)
            result = await endpoint(**{request_name: request, principal_name: principal, body_name: body})
            if isinstance(result, Response):
                return result
            data = dump(result) if dump is not None else result
            return Response(pydantic_core.to_json(data, inf_nan_mode="null"), status_code=status,
                            media_type="application/json")

        return handler

    def _shape(self) -> tuple[type[pydantic.BaseModel], tuple[str, str, str]]:
        """The body model and the names of the endpoint's ``request``, principal and body parameters; a
        ``TypeError`` for a route the lean path cannot serve as FastAPI would."""
        dependant = self.dependant
        scope = (self.openapi_extra or {}).get(SCOPE_KEY)
        principal = [d for d in dependant.dependencies if d.name is not None]
        scoped = [d for d in dependant.dependencies if d.name is None]
        problems = [
            *(["no scope (declare the route on a ScopedRouter)"] if scope in (None, "public") else []),
            *(["an async endpoint is needed"] if not _is_coroutine(self.endpoint) else []),
            *(["a request parameter is needed"] if dependant.request_param_name is None else []),
            *(["one body model is needed"] if len(dependant.body_params) != 1 else []),
            *(["path, query, header or cookie parameters are not served"]
              if dependant.path_params or dependant.query_params or dependant.header_params
              or dependant.cookie_params else []),
            *(["exactly one CurrentPrincipal parameter and the scope dependency are needed"]
              if len(principal) != 1 or len(scoped) != 1 or scoped[0].call is not require(scope) else []),
            *(["response model options other than the defaults are not served"]
              if (self.response_model_include or self.response_model_exclude or not self.response_model_by_alias
                  or self.response_model_exclude_unset or self.response_model_exclude_defaults
                  or self.response_model_exclude_none) else []),
        ]
        body_type = dependant.body_params[0].field_info.annotation if len(dependant.body_params) == 1 else None
        if not (isinstance(body_type, type) and issubclass(body_type, pydantic.BaseModel)):
            problems.append("the body must be one pydantic model")
        if problems:
            raise TypeError(f"LeanRoute {self.path!r}: " + "; ".join(problems))
        assert dependant.request_param_name is not None and principal[0].name is not None
        assert isinstance(body_type, type) and issubclass(body_type, pydantic.BaseModel)
        return body_type, (dependant.request_param_name, principal[0].name, dependant.body_params[0].name)

    def _include_adds_dependencies(self) -> bool:
        # FastAPI builds an included route's handler with the inclusion's context set (its dependencies among
        # them); memroute's app includes its routers without any. The context variable is FastAPI's own, so
        # read defensively: when it cannot be read, the lean path is not taken.
        var = getattr(fastapi.routing, "_effective_route_context_var", None)
        if var is None:
            return True
        context = var.get()
        if context is None or getattr(context, "original_route", None) is not self:
            return False
        return list(getattr(context, "dependencies", None) or []) != list(self.dependencies)


def _is_coroutine(call: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(call)


async def _valid_body(request: Request, model: type[pydantic.BaseModel]) -> pydantic.BaseModel | None:
    """The request's body as ``model``, or ``None`` for FastAPI's handler to answer (it reads the same cached
    body)."""
    if not _json_body_type(request.headers.get("content-type")):
        return None
    raw = await request.body()
    if not raw:
        return None
    try:
        return model.model_validate(json.loads(raw))
    except (ValueError, pydantic.ValidationError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None


class InlineBudget:
    """Whether a call may run on the event loop instead of a worker thread: a thread hop costs two wake-ups
    (~0.3-0.5 ms of a search's round trip here, docs/performance.md), but a call on the loop holds up every
    other request for as long as it runs. So a tenant's call runs inline only while that tenant's recent calls
    took at most ``max_ms`` (an exponentially weighted average, updated by every call, inline or not), and
    only when ``in_process`` (every component of the service works in this process: nothing on the loop can
    wait on a server). A tenant not seen yet goes to a thread; so does everything with ``max_ms == 0``.
    Remembers at most ``tenants`` tenants (the oldest is forgotten first). The duration recorded is the call's
    own, timed in the thread that ran it (a thread hop's wake-ups would otherwise keep a tenant off the loop).
    Thread-safe."""

    weight = 0.2
    """How much the newest duration counts in the average."""

    def __init__(self, max_ms: float, *, in_process: bool, tenants: int = 4096) -> None:
        self.max_s = max_ms / 1000 if in_process else 0.0
        self.tenants = tenants
        self._average: dict[str, float] = {}
        self._lock = threading.Lock()
        self.inline = 0
        """Calls that ran on the loop (tests and the benchmark)."""
        self.threaded = 0

    def allows(self, tenant: str) -> bool:
        with self._lock:
            average = self._average.get(tenant)
            allowed = average is not None and average <= self.max_s
            if allowed:
                self.inline += 1
            else:
                self.threaded += 1
            return allowed

    def record(self, tenant: str, seconds: float) -> None:
        with self._lock:
            previous = self._average.pop(tenant, None)
            if previous is None and len(self._average) >= self.tenants:
                del self._average[next(iter(self._average))]
            self._average[tenant] = seconds if previous is None else previous + self.weight * (seconds - previous)
