"""``/healthz`` (liveness, no key) and ``/readyz`` (backends and the key store answer)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from memroute.server.auth import PUBLIC, ScopedRouter

router = ScopedRouter(tags=["health"])


@router.get("/healthz", scope=PUBLIC, summary="Liveness: the process answers",
            responses={200: {"content": {"application/json": {"example": {"ok": True}}}}})
def healthz() -> dict[str, Any]:
    """Always ``{"ok": true}`` while the process serves requests. Needs no key."""
    return {"ok": True}


@router.get("/readyz", scope="read", summary="Readiness: the primary backend and the key store answer",
            responses={200: {"content": {"application/json": {"example": {"ready": True, "checks": {
                "keys": {"ok": True}, "primary": {"ok": True}}}}}},
                       503: {"description": "not ready; the body says which check failed"}})
def readyz(request: Request) -> JSONResponse:
    """``{ready, checks}``; 503 when the key store or the primary backend does not answer."""
    mem = request.app.state.memroute
    checks: dict[str, dict[str, Any]] = {}
    try:
        mem.state.ping()
        checks["keys"] = {"ok": True}
    except Exception as exc:
        checks["keys"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    checks["primary"] = _primary_check(mem)
    ready = all(check["ok"] for check in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


def _primary_check(mem: Any) -> dict[str, Any]:
    from memroute.server.wire import jsonable

    try:
        health = jsonable(mem.health())
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    for backend in health.get("backends", []):
        if backend.get("role") == "primary":
            return {"ok": bool(backend.get("ok")), "error": backend.get("error")}
    return {"ok": False, "error": "no primary backend in the health report"}
