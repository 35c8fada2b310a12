"""Authentication and authorisation for every HTTP surface (REST, MCP, proxy, dashboard).

- :func:`authenticate` turns a presented secret into a :class:`Principal` (or raises
  :class:`~memroute.errors.AuthenticationError`): MCP's token verifier and the proxy call it directly.
- :func:`token_from_headers` reads ``Authorization: Bearer mr_…`` (or Anthropic-style ``x-api-key``).
- :func:`principal_for_request` accepts that key, or a dashboard session cookie
  (:mod:`memroute.server.auth.sessions`: admin keys only, CSRF token on every state-changing request);
- :func:`require` is the FastAPI dependency that checks a scope; :class:`ScopedRouter` makes declaring one
  mandatory: its route decorators take a keyword-only ``scope`` with no default, so a route without a scope
  does not even import (``scope=PUBLIC`` is the explicit, reviewed exception, used by ``/healthz`` only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Final

import attrs
from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from memroute.deployment.keys import SCOPES
from memroute.errors import AuthenticationError, PermissionDeniedError, ValidationError
from memroute.server.auth.end_users import from_headers, narrowed
from memroute.server.auth.sessions import COOKIE_NAME, CSRF_HEADER, check_csrf, resolve_session
from memroute.tenancy import end_user_tenant, split_end_user

if TYPE_CHECKING:
    from memroute.deployment.keys import ApiKey

__all__ = [
    "PUBLIC",
    "SCOPE_KEY",
    "CurrentPrincipal",
    "Principal",
    "ScopedRouter",
    "authenticate",
    "current_principal",
    "iter_routes",
    "principal_for_request",
    "require",
    "token_from_headers",
]

PUBLIC: Final = "public"
"""The scope of a route that needs no key (``/healthz``). Every other route names read, write or admin."""
SCOPE_KEY: Final = "x-memroute-scope"
"""The OpenAPI extension each route carries with its scope (and that a test checks on every route)."""


@attrs.frozen(kw_only=True)
class Principal:
    """Who is calling: the key's id, its tenant and scopes; for an app key, the end user it acts for."""

    key_id: str
    tenant: str
    """The key's tenant. For an app key, the *app's* tenant, which such a key never acts on itself: memories
    are reached through :meth:`tenant_for` / :attr:`acting_tenant`, which name the end user's."""
    scopes: frozenset[str]
    name: str = ""
    end_users: bool = False
    """An app key (:mod:`memroute.server.auth.end_users`): every memory call must name an end user."""
    end_user: str | None = None
    """The end user this request acts for (an app key's, once named)."""

    @classmethod
    def of(cls, key: ApiKey) -> Principal:
        return cls(key_id=key.id, tenant=key.tenant, scopes=key.scopes, name=key.name, end_users=key.end_users)

    @property
    def acting_tenant(self) -> str:
        """The tenant whose memories this request acts on: the key's, or for an app key its end user's
        composite tenant (``shop/u1``); an app key that named no end user is refused (422)."""
        if not self.end_users:
            return self.tenant
        if self.end_user is None:
            raise ValidationError("x-memroute-user: this is an app key: name the end user this request acts "
                                  "for (the x-memroute-user header or the request's endUser / user field)",
                                  [("x-memroute-user", "missing end user")])
        return end_user_tenant(self.tenant, self.end_user)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    def allows(self, scope: str) -> bool:
        return scope == PUBLIC or scope in self.scopes or self.is_admin

    def check(self, scope: str) -> None:
        if not self.allows(scope):
            raise PermissionDeniedError(f"this API key lacks the {scope!r} scope (it has: "
                                        f"{', '.join(sorted(self.scopes))})")

    def tenant_for(self, requested: str | None, *, end_user: object = None) -> str:
        """The tenant a request acts on: the key's own (:attr:`acting_tenant`), unless ``requested`` names one.
        Naming another tenant is allowed for admin keys only (403 otherwise); naming one's own is always fine.
        ``end_user`` is the request body's ``endUser`` (an app key's, see :mod:`.end_users`); an app key may
        also name one of its end users as ``requested`` (``shop/u1``)."""
        principal = narrowed(self, end_user, field="endUser")
        if requested is None or requested == "":
            return principal.acting_tenant
        if not isinstance(requested, str) or len(requested) > 256:
            raise ValidationError("apiKeyId: expected a string of at most 256 characters", [("apiKeyId", "invalid")])
        if principal.is_admin:
            return requested
        if principal.end_users and principal.end_user is None:  # an app key may name one of its end users
            parts = split_end_user(requested)
            if parts is not None and parts[0] == principal.tenant:
                return principal.tenant_for(None, end_user=parts[1])
        elif requested == principal.acting_tenant:
            return requested
        raise PermissionDeniedError("this API key may only act on its own tenant (apiKeyId names another one)")


def token_from_headers(headers: Mapping[str, str]) -> str | None:
    """The presented secret: ``Authorization: Bearer <secret>``, else the ``x-api-key`` header (Anthropic
    SDK style), else None. ``headers`` must be case-insensitive (Starlette's are)."""
    value = headers.get("authorization")
    if value:
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("Authorization header must be 'Bearer mr_…'")
        return token.strip()
    api_key = headers.get("x-api-key")
    return api_key.strip() if api_key else None


def authenticate(mem: Any, token: str | None) -> Principal:
    """The :class:`Principal` for ``token`` against ``mem``'s key store (401 errors otherwise)."""
    return Principal.of(mem.keys.authenticate(token))


def _service(request: Request) -> Any:
    return request.app.state.memroute


def principal_for_request(request: Request) -> Principal:
    """Who sent ``request``: the key in its headers, else the dashboard session in its cookie (admin keys
    only; state-changing requests must carry the session's CSRF token). 401 when neither is valid."""
    mem = _service(request)
    token = token_from_headers(request.headers)
    cookie = request.cookies.get(COOKIE_NAME)
    if token is None and cookie:
        session = resolve_session(mem, cookie)
        key = mem.keys.get(session.key_id)
        if key is None or key.revoked or not key.is_admin:
            raise AuthenticationError("the key this dashboard session was made with is revoked: sign in again")
        check_csrf(session, request.method, request.headers.get(CSRF_HEADER))
        return Principal.of(key)
    return from_headers(authenticate(mem, token), request.headers)


@cache
def require(scope: str) -> Callable[..., Awaitable[Principal]]:
    """The FastAPI dependency checking ``scope`` (``read``, ``write``, ``admin``): authenticates the request
    and stores the :class:`Principal` on ``request.state.principal``. One function object per scope."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r} (known: {', '.join(SCOPES)})")

    async def dependency(request: Request) -> Principal:
        # A key store in this process (SQLite) answers with one indexed read of a local file, cheaper than the
        # thread hop FastAPI makes for a sync dependency (and the wait for the GIL after it, under load); one
        # that waits on a server (PostgreSQL) is asked from a worker thread, never on the event loop.
        if getattr(_service(request).keys, "in_process", False) is True:
            principal = principal_for_request(request)
        else:
            principal = await run_in_threadpool(principal_for_request, request)
        principal.check(scope)
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{scope}"
    return dependency


def current_principal(request: Request) -> Principal:
    """The principal the route's scope dependency authenticated."""
    principal = getattr(request.state, "principal", None)
    if principal is None:  # a route without a scope dependency: a programming error, never user input
        raise RuntimeError("route has no scope dependency; declare it through ScopedRouter(scope=...)")
    assert isinstance(principal, Principal)
    return principal


async def _current_principal_dependency(request: Request) -> Principal:
    # async because it only reads request.state: FastAPI runs a sync dependency in its thread pool, which is
    # one thread hop (and, under load, one wait for the GIL) per request for nothing.
    return current_principal(request)


CurrentPrincipal = Annotated[Principal, Depends(_current_principal_dependency)]
"""Route parameter type: ``principal: CurrentPrincipal``."""


class ScopedRouter(APIRouter):
    """An ``APIRouter`` whose every route must declare its scope: ``@router.get("/x", scope="read")``."""

    def add_api_route(self, path: str, endpoint: Callable[..., Any], *, scope: str | None = None,
                      **kwargs: Any) -> None:
        if scope is None and SCOPE_KEY in (kwargs.get("openapi_extra") or {}):
            super().add_api_route(path, endpoint, **kwargs)  # included from another ScopedRouter: already scoped
            return
        if scope is None:
            raise TypeError(f"route {path!r}: pass scope='read' | 'write' | 'admin' (or PUBLIC) to ScopedRouter")
        if scope != PUBLIC:
            kwargs["dependencies"] = [*(kwargs.get("dependencies") or []), Depends(require(scope))]
            responses = dict(kwargs.get("responses") or {})
            responses.setdefault(401, {"description": "missing, invalid or revoked API key"})
            responses.setdefault(403, {"description": f"the key lacks the {scope!r} scope or names another tenant"})
            kwargs["responses"] = responses
        kwargs["openapi_extra"] = {**(kwargs.get("openapi_extra") or {}), SCOPE_KEY: scope}
        super().add_api_route(path, endpoint, **kwargs)

    def api_route(self, path: str, *, scope: str, **kwargs: Any) -> Callable[[Any], Any]:  # type: ignore[override]
        def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            self.add_api_route(path, func, scope=scope, **kwargs)
            return func

        return decorator

    def get(self, path: str, *, scope: str, **kwargs: Any) -> Callable[[Any], Any]:  # type: ignore[override]
        return self.api_route(path, scope=scope, methods=["GET"], **kwargs)

    def post(self, path: str, *, scope: str, **kwargs: Any) -> Callable[[Any], Any]:  # type: ignore[override]
        return self.api_route(path, scope=scope, methods=["POST"], **kwargs)

    def put(self, path: str, *, scope: str, **kwargs: Any) -> Callable[[Any], Any]:  # type: ignore[override]
        return self.api_route(path, scope=scope, methods=["PUT"], **kwargs)

    def patch(self, path: str, *, scope: str, **kwargs: Any) -> Callable[[Any], Any]:  # type: ignore[override]
        return self.api_route(path, scope=scope, methods=["PATCH"], **kwargs)

    def delete(self, path: str, *, scope: str, **kwargs: Any) -> Callable[[Any], Any]:  # type: ignore[override]
        return self.api_route(path, scope=scope, methods=["DELETE"], **kwargs)


def iter_routes(routes: Any, prefix: str = "") -> Any:
    """Every route of an app or router as ``(full path, route)``, looking inside included routers (FastAPI
    keeps them as wrappers around the original router). Used by the test that every route has a scope."""
    for route in routes:
        original = getattr(route, "original_router", None)
        if original is not None:
            context = getattr(route, "include_context", None)
            yield from iter_routes(original.routes, prefix + (getattr(context, "prefix", "") or ""))
        else:
            yield prefix + getattr(route, "path", ""), route
