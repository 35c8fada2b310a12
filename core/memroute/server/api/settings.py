"""``/api/settings/memory`` (runtime memory settings, shared by every process) and ``/api/settings/qdrant``
(where the Qdrant vector store is configured)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from memroute.deployment.state import RUNTIME_MEMORY_FIELDS
from memroute.errors import NotFoundError
from memroute.server.api import models as m
from memroute.server.api.memory import MEMORY_EXAMPLE, ok
from memroute.server.auth import CurrentPrincipal, ScopedRouter
from memroute.server.schema import wire_model
from memroute.server.wire import jsonable

router = ScopedRouter(prefix="/api/settings", tags=["settings"])

UpdateBody = wire_model(m.MemorySettingsUpdate, mode="request")
_SETTINGS_EXAMPLE = {"enabled": True, "maxTokens": 2000, "retentionDays": 0, "deleteAfterDays": 0, "strategy": "hybrid",
                     "typedDecayEnabled": False, "typedDecayEpisodicDays": 30, "typedDecayAccessImmunity": 3,
                     "overrides": ["enabled"]}


def _view(mem: Any) -> m.MemorySettingsView:
    current = mem.memory_settings(fresh=True)  # an operator's read: what is stored now, not this worker's cache
    stored = mem.memory_overrides()
    return m.MemorySettingsView(
        enabled=current.enabled, max_tokens=current.max_tokens, retention_days=current.retention_days,
        delete_after_days=current.delete_after_days, strategy=current.strategy,
        typed_decay_enabled=current.typed_decay_enabled,
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
    host within one second (``memroute.deployment.state.RUNTIME_SETTINGS_TTL_S``)."""
    changes = body.model_dump(by_alias=True, exclude_unset=True)  # type: ignore[attr-defined]
    mem = request.app.state.memroute
    mem.update_memory_settings(changes)
    return _view(mem)


# --- /api/settings/qdrant: only where [vectors] store = "qdrant" -------------------------------------------

_NO_QDRANT = {404: {"description": "the vector store is not qdrant ([vectors] store)"}}


def _qdrant(mem: Any) -> dict[str, Any]:
    """The engine's vector-store block, or 404 when the configured store is not Qdrant."""
    status = jsonable(mem.status())
    store = status.get("vector_store", {}) if isinstance(status, dict) else {}
    if store.get("backend") != "qdrant":
        raise NotFoundError("no qdrant vector store is configured ([vectors] store = \"qdrant\" in memroute.toml)")
    return dict(store)


_QDRANT_EXAMPLE = {"enabled": True, "active": True, "switching": False, "host": "http://qdrant.internal",
                   "port": 6333, "collection": "memroute_memories",
                   "embeddingModel": "minishlab/potion-base-8M", "quantization": "int8", "hasApiKey": True,
                   "apiKeyMasked": "***9f3a", "mode": "server", "target": "http://qdrant.internal:6333",
                   "signature": "static:minishlab/potion-base-8M:256:l2:float32", "available": True, "rows": 12,
                   "pendingReindex": 0, "lastError": None, "overrides": ["enabled", "host", "apiKey"]}


def _qdrant_view(view: dict[str, Any]) -> m.QdrantView:
    return m.QdrantView(**view)


@router.get("/qdrant", scope="admin", response_model=wire_model(m.QdrantView),
            summary="The Qdrant settings in effect and the collection's state", responses=ok(_QDRANT_EXAMPLE))
def get_qdrant(request: Request) -> m.QdrantView:
    """``[vectors]`` (``[vectors.options.qdrant]``) with the runtime overrides applied; ``enabled: false`` where
    the vector store is not Qdrant. The API key is never shown, only ``apiKeyMasked``."""
    return _qdrant_view(request.app.state.memroute.qdrant_settings())


QdrantUpdateBody = wire_model(m.QdrantSettingsUpdate, mode="request")


@router.put("/qdrant", scope="admin", response_model=wire_model(m.QdrantView),
            summary="Change the Qdrant connection at run time (probed first; every process follows)",
            responses={**ok(_QDRANT_EXAMPLE), 409: {"description": "changed by another request meanwhile"}},
            openapi_extra={"requestBody": {"content": {"application/json": {"example": {
                "enabled": True, "host": "qdrant.internal", "port": 6333, "collection": "memroute_memories",
                "quantization": "int8", "apiKey": "qdrant-secret-key"}}}}})
def put_qdrant(request: Request, principal: CurrentPrincipal, body: QdrantUpdateBody) -> m.QdrantView:  # type: ignore[valid-type]
    """Strict: unknown fields, wrong JSON types and out-of-range values are 422 with the field named.
    ``enabled`` switches the vector store to Qdrant (on) or back to the configured store, ``auto`` when that is
    Qdrant (off); ``apiKey: ""`` removes the key; ``null`` drops an override. A new target is **probed for
    real** before anything is stored: the store is built, bound to the index's embedding signature and
    searched; a target that does not answer, refuses the key or is a cloud metadata / link-local address is
    a 422 on ``host`` and nothing is stored (the reference stored settings that did not work). Stored in the
    deployment's state store: this process switches at once, every other process and every new
    ``memroute.open`` within about a second; the new store is filled from the memories in the background."""
    changes = body.model_dump(by_alias=True, exclude_unset=True)  # type: ignore[attr-defined]
    return _qdrant_view(request.app.state.memroute.qdrant_settings(changes))


@router.get("/qdrant/health", scope="admin", summary="Whether Qdrant answers, and how fast",
            responses={**ok({"ok": True, "latencyMs": 1.9, "error": None}), **_NO_QDRANT})
def qdrant_health(request: Request) -> dict[str, Any]:
    """A real round trip to Qdrant (the reference's ``{ok, latencyMs, error}``); ``ok`` is false, with the
    reason, when Qdrant does not answer or the vector store is not serving from it."""
    mem = request.app.state.memroute
    store = _qdrant(mem)
    probe = mem.vector_store_health()
    error = (probe.error if probe is not None else None) or store.get("reason") or store.get("last_error")
    return {"ok": probe is not None and probe.ok and bool(store.get("available")) and error is None,
            "latencyMs": round(probe.latency_ms, 3) if probe is not None else None, "error": error}


@router.get("/qdrant/embedding-models", scope="read", response_model=wire_model(m.EmbeddingModels),
            summary="The embedding model whose vectors Qdrant holds",
            responses=ok({"models": [{"id": "static/minishlab/potion-base-8M", "name": "minishlab/potion-base-8M",
                                      "dimensions": 256}]}))
def qdrant_embedding_models(request: Request) -> m.EmbeddingModels:
    """The reference listed every embedding model of its provider catalogue here, for a Qdrant-only embedding
    setting. memroute's Qdrant holds the vectors of the one ``[embedding]`` source in use, so this lists that
    model (none when no source is available); ``GET /api/memory/embedding-providers`` lists the sources."""
    embedding = jsonable(request.app.state.memroute.status()).get("embedding", {})
    source, model = embedding.get("source"), embedding.get("model")
    if not embedding.get("available") or not source or not model:
        return m.EmbeddingModels(models=())
    return m.EmbeddingModels(models=(m.EmbeddingModelInfo(id=f"{source}/{model}", name=str(model),
                                                          dimensions=embedding.get("dimensions")),))


QdrantSearchBody = wire_model(m.QdrantSearchRequest, mode="request")
QdrantCleanupBody = wire_model(m.QdrantCleanupRequest, mode="request")


@router.post("/qdrant/search", scope="read", response_model=wire_model(m.QdrantSearchResponse),
             summary="A vector search on Qdrant for the caller's tenant (a connection test with real data)",
             responses={**ok({"ok": True, "error": None, "results": [
                 {"memory": MEMORY_EXAMPLE, "score": 0.71, "tier": "vector", "ranks": {"vector": 1},
                  "legScores": {"vector": 0.71}, "saidAt": None}],
                 "provenance": {"backend": "main", "strategyRequested": "semantic", "strategyUsed": "semantic",
                                "legs": ["vector"], "degraded": False, "reason": None, "fallback": False,
                                "vectorStore": "qdrant", "rerank": None, "rerankError": None}}), **_NO_QDRANT})
def qdrant_search(request: Request, principal: CurrentPrincipal, body: QdrantSearchBody) -> m.QdrantSearchResponse:  # type: ignore[valid-type]
    """The service's semantic search, which on this deployment runs on Qdrant, scoped to one tenant with the
    expiry, retention and session filters of retrieval (the reference's route searched every key and capped
    ``topK`` at 20 silently). ``ok`` is false, with the reason, when the vector leg did not run on Qdrant."""
    mem = request.app.state.memroute
    _qdrant(mem)
    tenant = principal.tenant_for(body.api_key_id, end_user=body.end_user)  # type: ignore[attr-defined]
    result = mem.search(body.query, api_key_id=tenant, strategy="semantic", limit=body.top_k)  # type: ignore[attr-defined]
    served = result.provenance.vector_store == "qdrant" and "vector" in result.provenance.legs
    error = None if served else (result.provenance.reason or "the vector leg did not run on qdrant")
    return m.QdrantSearchResponse(ok=served, results=tuple(result.hits) if served else (),
                                  provenance=result.provenance, error=error)


@router.post("/qdrant/cleanup", scope="write", response_model=wire_model(m.QdrantCleanupResponse),
             summary="Delete the tenant's memories past deleteAfterDays or expired, with their Qdrant points",
             responses={**ok({"ok": True, "deletedCount": 2, "candidates": [MEMORY_EXAMPLE["id"]],
                              "reasons": {"retention": 1, "expired": 1, "decay": 0}, "retentionDays": 0,
                              "dryRun": False}), **_NO_QDRANT})
def qdrant_cleanup(request: Request, principal: CurrentPrincipal, body: QdrantCleanupBody) -> m.QdrantCleanupResponse:  # type: ignore[valid-type]
    """The tenant's prune (``mem.prune``): expired memories, and memories older than the ``deleteAfterDays`` in
    effect (when an operator set it; the ``retentionDays`` window only hides memories) are deleted through the
    manager, so each memory and its point go together and the count is the real one. The reference deleted
    only Qdrant points of every key, leaving their memories behind, and reported the number counted before the
    delete."""
    mem = request.app.state.memroute
    _qdrant(mem)
    tenant = principal.tenant_for(body.api_key_id, end_user=body.end_user)  # type: ignore[attr-defined]
    report = mem.prune(tenant, dry_run=body.dry_run)  # type: ignore[attr-defined]
    return m.QdrantCleanupResponse(ok=True, deleted_count=report.deleted, candidates=tuple(report.candidates),
                                   reasons=dict(report.reasons), retention_days=mem.memory_settings().retention_days,
                                   dry_run=report.dry_run)
