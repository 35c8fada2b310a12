"""``/api/settings/memory`` (runtime memory settings, shared by every process) and ``/api/settings/qdrant``
(where the Qdrant vector store is configured)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from memroute.errors import NotFoundError
from memroute.server.api import models as m
from memroute.server.api.memory import ok
from memroute.server.auth import CurrentPrincipal, ScopedRouter
from memroute.server.schema import wire_model
from memroute.server.wire import jsonable
from memroute.state import RUNTIME_MEMORY_FIELDS

router = ScopedRouter(prefix="/api/settings", tags=["settings"])

UpdateBody = wire_model(m.MemorySettingsUpdate, mode="request")
_SETTINGS_EXAMPLE = {"enabled": True, "maxTokens": 2000, "retentionDays": 30, "strategy": "hybrid",
                     "typedDecayEnabled": False, "typedDecayEpisodicDays": 30, "typedDecayAccessImmunity": 3,
                     "overrides": ["enabled"]}


def _view(mem: Any) -> m.MemorySettingsView:
    current = mem.memory_settings(fresh=True)  # an operator's read: what is stored now, not this worker's cache
    stored = mem.memory_overrides()
    return m.MemorySettingsView(
        enabled=current.enabled, max_tokens=current.max_tokens, retention_days=current.retention_days,
        strategy=current.strategy, typed_decay_enabled=current.typed_decay_enabled,
        typed_decay_episodic_days=current.typed_decay_episodic_days,
        typed_decay_access_immunity=current.typed_decay_access_immunity,
        overrides=tuple(wire for wire, setting in RUNTIME_MEMORY_FIELDS.items() if setting in stored),
    )


@router.get("/memory", scope="read", response_model=wire_model(m.MemorySettingsView),
            summary="Memory settings in effect", responses=ok(_SETTINGS_EXAMPLE))
def get_memory_settings(request: Request) -> m.MemorySettingsView:
    return _view(request.app.state.memroute)


@router.put("/memory", scope="admin", response_model=wire_model(m.MemorySettingsView),
            summary="Change memory settings at run time (every process sees them)",
            responses=ok(_SETTINGS_EXAMPLE))
def put_memory_settings(request: Request, principal: CurrentPrincipal, body: UpdateBody) -> m.MemorySettingsView:  # type: ignore[valid-type]
    """Strict: unknown fields, wrong JSON types and out-of-range values are 422 with the field named, and
    nothing is stored. ``null`` drops a field's override (the ``memroute.toml`` value applies again). Stored
    in the deployment's state store: this process applies the change at once, every other worker process and
    host within one second (``memroute.state.RUNTIME_SETTINGS_TTL_S``)."""
    changes = body.model_dump(by_alias=True, exclude_unset=True)  # type: ignore[attr-defined]
    mem = request.app.state.memroute
    mem.update_memory_settings(changes)
    return _view(mem)


def _qdrant(mem: Any) -> dict[str, Any]:
    status = jsonable(mem.status())
    store = status.get("vector_store", {}) if isinstance(status, dict) else {}
    if store.get("backend") != "qdrant":
        raise NotFoundError("no qdrant vector store is configured ([vectors] store = \"qdrant\")")
    return dict(store)


@router.get("/qdrant", scope="admin", summary="The Qdrant vector store's configuration and state",
            responses={**ok({"enabled": True, "backend": "qdrant", "available": True, "rows": 12}),
                       404: {"description": "the vector store is not qdrant"}})
def get_qdrant(request: Request) -> dict[str, Any]:
    """Connection settings live in ``memroute.toml`` (``[vectors]``); they are never echoed with secrets."""
    store = _qdrant(request.app.state.memroute)
    store.pop("api_key", None)
    return {"enabled": True, **store}


@router.get("/qdrant/health", scope="admin", summary="Whether Qdrant answers",
            responses={**ok({"ok": True, "error": None}), 404: {"description": "the vector store is not qdrant"}})
def qdrant_health(request: Request) -> dict[str, Any]:
    store = _qdrant(request.app.state.memroute)
    return {"ok": bool(store.get("available")), "error": store.get("reason") or store.get("last_error")}
