"""The ASGI app: :func:`create_app` mounts the REST routers and installs the guard, error handlers, CORS (only
when configured) and the maintenance scheduler. Surfaces that share the server (MCP at ``/mcp``, the proxy at
``/v1``, the dashboard at ``/``) add their routers in :func:`_include_surfaces`; every HTTP route must declare
its scope through :class:`~memroute.server.auth.ScopedRouter` (a test walks ``app.routes``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

import memroute
from memroute.aio import DEFAULT_MAX_WORKERS, AsyncMemroute
from memroute.config.settings import ServerSettings
from memroute.server.docs_pages import install_docs_pages
from memroute.server.errors import install_error_handlers
from memroute.server.fair_queue import LoopTurns
from memroute.server.fair_use import FairUseMiddleware, renew_leases
from memroute.server.middleware import GuardMiddleware
from memroute.server.openapi import install_openapi

__all__ = ["create_app"]

log = logging.getLogger("memroute.server")

_DESCRIPTION = """memroute's REST API: persistent conversational memory per API key.

Every route but `/healthz` needs `Authorization: Bearer mr_…` (create keys with `memroute keys create`).
A key acts on its own tenant only; `admin` keys may name any `apiKeyId`. Errors are
`{"error": {"message", "details": [{"field", "message"}]}}`. See docs/server.md.
"""


def create_app(mem: Any, *, settings: ServerSettings | None = None, close_service: bool = False) -> FastAPI:
    """The app serving ``mem`` (a :class:`memroute.service.Memroute`). With ``close_service`` the app owns
    the service and closes it on shutdown; background work is flushed on shutdown either way."""
    settings = settings or ServerSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from memroute.server.maintenance import Maintenance

        maintenance = Maintenance(mem, settings)
        app.state.maintenance = maintenance
        maintenance.start()
        fair_use = mem.fair_use
        leases = asyncio.create_task(renew_leases(fair_use))  # concurrency slots held in the state store
        try:
            yield
        finally:
            leases.cancel()
            maintenance.stop()
            try:
                fair_use.release_all()  # the slots this process held are free at once, not after the lease
            except Exception:
                log.warning("shutdown: giving up the leases on concurrency slots failed", exc_info=True)
            await app.state.proxy.aclose()
            await app.state.memroute_async.aclose()  # settles its calls; the service stays open here
            try:
                if not mem.flush(timeout=settings.graceful_timeout_s):
                    log.warning("shutdown: background work did not finish within %ss", settings.graceful_timeout_s)
            finally:
                if close_service:
                    mem.close()

    app = FastAPI(
        title="memroute", version=getattr(memroute, "__version__", "0"), description=_DESCRIPTION,
        lifespan=lifespan, openapi_url="/openapi.json", docs_url=None, redoc_url=None,
    )
    app.state.memroute = mem
    # The async API over the same service, for routes that are coroutines: one hop into its bounded pool
    # instead of FastAPI's thread hops for a sync route and its response validation (docs/server.md).
    # Pinned to the pool it has always had (8 threads, no GIL handoff) rather than the size open_async picks
    # from the components (docs/python-api.md): a change for the server's own benchmarks to decide.
    app.state.memroute_async = AsyncMemroute(mem, close_service=False, max_workers=DEFAULT_MAX_WORKERS, gil_handoff=0)
    app.state.server_settings = settings
    from memroute.server.api.lean import InlineBudget

    # Searches short enough run on the loop (no thread hop); only where nothing on the loop can wait on a server.
    app.state.inline_search = InlineBudget(settings.inline_search_ms, in_process=mem.runs_in_process())
    install_error_handlers(app)
    install_openapi(app)
    install_docs_pages(app)  # /docs and /redoc, their scripts pinned by hash (memroute.server.docs_pages)
    _include_rest(app)
    _include_surfaces(app)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "PUT", "DELETE"],
                           allow_headers=["authorization", "content-type", "x-api-key", "x-memroute-user"], max_age=600)
    # Inside the guard (a refusal gets its headers too, and a body is read whole before a request takes a turn).
    turns = LoopTurns(settings.queued_requests) if settings.fair_queueing else None
    app.state.loop_turns = turns
    app.add_middleware(FairUseMiddleware, mem=mem, turns=turns)
    app.add_middleware(GuardMiddleware, settings=settings, proxy_max_body_bytes=mem.settings.proxy.max_body_bytes)
    return app


def _include_rest(app: FastAPI) -> None:
    from memroute.server.api import health, keys, memory, omniroute, operations, settings, storage, users

    # A request is matched against the routes in order: the hot memory routes (list, create, search) come first;
    # operations' fixed paths (/api/memory/health, /export, ...) must come before /api/memory/{id}.
    for router in (memory.router, health.router, keys.router, operations.router, omniroute.router, memory.by_id,
                   settings.router, storage.router, users.router):
        app.include_router(router)


def _include_surfaces(app: FastAPI) -> None:
    """MCP (``memroute.server.mcp``), the proxy (``memroute.server.proxy``) and the dashboard
    (``memroute.server.dashboard``) include their routers here."""
    from memroute.server.api.lean import InlineBudget
    from memroute.server.mcp.http import mount_mcp
    from memroute.server.proxy import create_proxy_router

    mem = app.state.memroute
    # The proxy's searches follow the REST search's rule, with a budget and averages of their own ([proxy]
    # inline_search_ms): an augment also renders what it found, and a chat request is slow anyway.
    inline = InlineBudget(mem.settings.proxy.inline_search_ms, in_process=mem.runs_in_process())
    proxy = create_proxy_router(mem, inline=inline)
    app.state.proxy = proxy.proxy  # type: ignore[attr-defined]
    app.router.routes[:0] = proxy.chat_routes  # type: ignore[attr-defined]  # matched first (see the proxy)
    app.include_router(proxy)
    mount_mcp(app, mem, app.state.server_settings, mem.settings.mcp)

    from memroute.server.dashboard import create_dashboard_router, mount_static

    app.include_router(create_dashboard_router())
    mount_static(app)
