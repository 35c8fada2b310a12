"""The dashboard at ``/``: one server-rendered page (Jinja2) and a small vanilla script, no build step and
nothing from a CDN. The page reads and writes through the REST API only (``/api/...``), authenticated by the
session cookie that :func:`sign_in` sets for an admin key (see :mod:`memroute.server.auth.sessions`).

Routes here are the page, its static files, and the session itself (sign in, who am I, sign out), plus two
admin reads the REST API lacked and the page needs: the tenants to pick from and the exact memory block
``augment`` would inject for a query (the Playground).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
from fastapi import Request, Response
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

import memroute
from memroute.errors import PermissionDeniedError, ValidationError
from memroute.server.auth import PUBLIC, CurrentPrincipal, Principal, ScopedRouter, authenticate
from memroute.server.auth.sessions import COOKIE_NAME, SESSION_TTL_S, end_session, resolve_session, start_session
from memroute.server.schema import wire_model

__all__ = ["create_dashboard_router", "mount_static"]

_HERE = Path(__file__).parent
# Only the page's own script, stylesheet and API: no inline script, nothing from another origin.
_PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; "
             "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
_templates = Environment(loader=FileSystemLoader(_HERE / "templates"), autoescape=select_autoescape(["html"]))


@attrs.frozen(kw_only=True)
class SignInRequest:
    key: str = attrs.field(metadata={"min_length": 1, "max_length": 200, "examples": ["mr_…"]})
    """An admin API key (its secret)."""


@attrs.frozen(kw_only=True)
class SessionInfo:
    key_id: str
    key_name: str
    tenant: str
    csrf_token: str
    """Send it as ``x-csrf-token`` on every state-changing request made with the session cookie."""


@attrs.frozen(kw_only=True)
class TenantList:
    tenants: tuple[str, ...]
    """Every tenant that has memories or a key, sorted."""


@attrs.frozen(kw_only=True)
class InjectionPreviewRequest:
    query: str = attrs.field(metadata={"min_length": 1, "max_length": 4096, "examples": ["set up my project"]})
    api_key_id: str | None = attrs.field(default=None, metadata={"max_length": 256})
    session_id: str | None = attrs.field(default=None, metadata={"max_length": 256})


@attrs.frozen(kw_only=True)
class InjectionPreview:
    injected: bool
    block: str
    """The exact text ``augment`` would put in front of the model ('' when nothing)."""
    skipped: str | None
    """Why nothing would be injected (memory disabled, no memories, ...)."""
    memories: int


@attrs.frozen(kw_only=True)
class SignedOut:
    success: bool


_SESSION_EXAMPLE = {"keyId": "key_4f1c2a9e0b7d3a61", "keyName": "ops", "tenant": "key_4f1c2a9e0b7d3a61",
                    "csrfToken": "Zx3…"}


def _ok(example: Any) -> dict[int | str, dict[str, Any]]:
    return {200: {"content": {"application/json": {"example": example}}}}


SignInBody = wire_model(SignInRequest, mode="request")
InjectionBody = wire_model(InjectionPreviewRequest, mode="request")


def _is_https(request: Request) -> bool:
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "") == "https"


def create_dashboard_router() -> ScopedRouter:
    router = ScopedRouter(tags=["dashboard"])

    @router.get("/", scope=PUBLIC, response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        """The page shell: it holds no data (everything comes from the API after sign-in)."""
        html = _templates.get_template("index.html").render(version=memroute.__version__)
        return HTMLResponse(html, headers={"cache-control": "no-store", "content-security-policy": _PAGE_CSP})

    @router.post("/dashboard/session", scope=PUBLIC, response_model=wire_model(SessionInfo),
                 summary="Sign in to the dashboard with an admin key (sets the session cookie)",
                 responses={**_ok(_SESSION_EXAMPLE), 401: {"description": "invalid or revoked key"},
                            403: {"description": "not an admin key"}})
    def sign_in(request: Request, response: Response, body: SignInBody) -> SessionInfo:  # type: ignore[valid-type]
        mem = request.app.state.memroute
        principal = authenticate(mem, body.key)  # type: ignore[attr-defined]
        if not principal.is_admin:
            raise PermissionDeniedError("the dashboard needs an admin key (memroute keys create --name ops --admin)")
        session_id, session = start_session(mem, principal.key_id)
        response.set_cookie(COOKIE_NAME, session_id, max_age=int(SESSION_TTL_S), httponly=True, samesite="strict",
                            secure=_is_https(request), path="/")
        return SessionInfo(key_id=principal.key_id, key_name=principal.name, tenant=principal.tenant,
                           csrf_token=session.csrf_token)

    @router.get("/dashboard/session", scope="admin", response_model=wire_model(SessionInfo),
                summary="The signed-in session (with its CSRF token)", responses=_ok(_SESSION_EXAMPLE))
    def who_am_i(request: Request, principal: CurrentPrincipal) -> SessionInfo:
        session = resolve_session(request.app.state.memroute, request.cookies.get(COOKIE_NAME))
        return SessionInfo(key_id=principal.key_id, key_name=principal.name, tenant=principal.tenant,
                           csrf_token=session.csrf_token)

    @router.delete("/dashboard/session", scope="admin", response_model=wire_model(SignedOut), summary="Sign out",
                   responses=_ok({"success": True}))
    def sign_out(request: Request, response: Response, principal: CurrentPrincipal) -> SignedOut:
        cookie = request.cookies.get(COOKIE_NAME)
        if cookie:
            end_session(request.app.state.memroute, cookie)
        response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
        return SignedOut(success=True)

    @router.get("/api/tenants", scope="admin", response_model=wire_model(TenantList),
                summary="Every tenant with memories or a key (admin)",
                responses=_ok({"tenants": ["tenant-a", "tenant-b"]}))
    def tenants(request: Request, principal: CurrentPrincipal) -> TenantList:
        mem = request.app.state.memroute
        found = set(mem.tenants()) | {key.tenant for key in mem.keys.list()}
        return TenantList(tenants=tuple(sorted(found)))

    @router.post("/api/memory/injection-preview", scope="read", response_model=wire_model(InjectionPreview),
                 summary="The exact memory block augment would inject for a user message",
                 responses=_ok({"injected": True, "memories": 1, "skipped": None,
                                "block": "<memroute_memories>\n…\n- factual (2026-12-01): \"Prefers TypeScript\"\n"
                                         "</memroute_memories>"}))
    def injection_preview(request: Request, principal: CurrentPrincipal,
                          body: InjectionBody) -> InjectionPreview:  # type: ignore[valid-type]
        tenant = _tenant(principal, body.api_key_id)  # type: ignore[attr-defined]
        chat = {"messages": [{"role": "user", "content": body.query}]}  # type: ignore[attr-defined]
        report = request.app.state.memroute.explain_augment(chat, api_key_id=tenant,  # a preview counts no access
                                                            session_id=body.session_id,  # type: ignore[attr-defined]
                                                            record_access=False)
        hits = len(report.preview.memories) if report.preview is not None else 0
        return InjectionPreview(injected=report.injected, block=report.block, skipped=report.skipped,
                                memories=hits if report.injected else 0)

    return router


def _tenant(principal: Principal, requested: Any) -> str:
    if requested is not None and not isinstance(requested, str):
        raise ValidationError("apiKeyId: expected a string", [("apiKeyId", "type")])
    return principal.tenant_for(requested)


def mount_static(app: Any) -> None:
    """Serve the page's script and stylesheet at ``/static`` (package data; no CDN)."""
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="dashboard-static")
