"""The deployment-facing part of :class:`~memroute.service.Memroute`: the shared state store (keys, runtime
settings, the storage protocol), operations (health, status, verify, reindex) and import / export. A mixin:
``Memroute`` inherits these methods, and they are documented and called as its own."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from memroute.deployment.fair_use import FairUse
from memroute.errors import ConfigError, ValidationError
from memroute.models import HealthResult, Memory, is_memory_id, require_tenant
from memroute.reports import BackendsStatus, HealthReport, MemoryStatus, ReindexReport, StatusReport
from memroute.routing.verify import VerifyReport, verify_replicas
from memroute.service.base import ServiceBase
from memroute.service.omniroute import Duplicates, OmnirouteImportReport, Progress, import_omniroute
from memroute.service.transfer import ImportReport, import_memories, parse_jsonl

if TYPE_CHECKING:
    from memroute.config.settings import MemorySettings
    from memroute.deployment.keys import KeyStore
    from memroute.deployment.state import RuntimeMemorySettings, StateStore
    from memroute.deployment.storage_api import StorageAPI

__all__ = ["DeploymentMethods"]


class DeploymentMethods(ServiceBase):
    """Keys, runtime settings, operations, import and export (see :class:`~memroute.service.Memroute`)."""

    # --- deployment state: keys, runtime settings (memroute.deployment.state; docs/server.md) -------------------
    @property
    def state(self) -> StateStore:
        """The deployment's shared state store (keys, runtime settings, leases), opened on first use."""
        with self._lock:
            if self._state is None:
                from memroute.deployment.state import open_state_store

                self._state = open_state_store(self.plugins, self._manager.backends[0], self.state_dir)
            return self._state

    @property
    def storage(self) -> StorageAPI:
        """Backend-level, tenant-checked calls for the HTTP storage protocol (``/api/storage``: another
        process's ``http`` backend using this deployment). See :mod:`memroute.deployment.storage_api`."""
        from memroute.deployment.storage_api import StorageAPI

        return StorageAPI(self)

    @property
    def keys(self) -> KeyStore:
        """The deployment's API keys (``memroute keys``, ``/api/keys``)."""
        return self.state.keys

    @property
    def fair_use(self) -> FairUse:
        """Per-key request rates and concurrency caps, kept in the shared state store next to the keys
        (``[server] requests_per_minute`` / ``concurrent_requests``, overridden per key); see
        :mod:`memroute.deployment.fair_use`."""
        with self._lock:
            fair_use: FairUse | None = getattr(self, "_fair_use", None)
            if fair_use is None:
                server = self.settings.server
                fair_use = FairUse(self.state, requests_per_minute=server.requests_per_minute,
                                   concurrent_requests=server.concurrent_requests,
                                   lease_s=server.concurrency_lease_s)
                self._fair_use = fair_use
            return fair_use

    def memory_settings(self, *, fresh: bool = False) -> MemorySettings:
        """The ``[memory]`` settings in effect: the configured ones with the runtime overrides stored by
        :meth:`update_memory_settings` (in the shared state store). Search, preview, augment, observe and
        prune read them here; another process's change applies within
        :data:`~memroute.deployment.state.RUNTIME_SETTINGS_TTL_S` (1 s), this process's at once. ``fresh`` reads the
        store now instead."""
        return self._runtime_settings.current(fresh=fresh)

    def memory_overrides(self, *, fresh: bool = False) -> dict[str, Any]:
        """The runtime overrides in effect (setting name → value), without the configured values."""
        return self._runtime_settings.overrides(fresh=fresh)

    def update_memory_settings(self, changes: Mapping[str, Any]) -> MemorySettings:
        """Change runtime memory settings (wire names: ``enabled``, ``maxTokens``, ``retentionDays``,
        ``strategy``, ``typedDecay*``; ``None`` drops an override), strictly validated: a bad value raises
        :class:`~memroute.errors.ValidationError` naming the field and stores nothing. Returns the settings now
        in effect."""
        return self._runtime_settings.update(changes)

    def qdrant_settings(self, changes: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The Qdrant settings in effect (``GET /api/settings/qdrant``; never the key, only ``api_key_masked``);
        with ``changes`` (``PUT``: wire names, ``null`` drops an override, ``apiKey: ""`` removes the key) they
        are validated strictly, the new target probed for real, and stored for every process only if it
        works (:class:`~memroute.errors.ValidationError` naming the field otherwise). This process switches
        its vector store at once, the others within about a second. See :mod:`memroute.retrieval.runtime_vectors`."""
        if self._vector_switch is None:
            raise ConfigError("this service was given its vector store in code; it has no runtime qdrant settings")
        if changes is not None:
            self._vector_switch.update(changes)
        return self._vector_switch.view()

    @property
    def _runtime_settings(self) -> RuntimeMemorySettings:
        with self._lock:
            if self._runtime is None:
                from memroute.deployment.state import RuntimeMemorySettings

                self._runtime = RuntimeMemorySettings(self.settings.memory, lambda: self.state)
            return self._runtime

    # --- operations ----------------------------------------------------------------------------------
    def health(self) -> HealthReport:
        """Probe every backend now: each backend's answer, breaker and outbox backlog, and the outbox."""
        return HealthReport.from_manager(self._manager.health())

    def status(self) -> StatusReport:
        """Engine status (``memroute status``): data and state directories, ``[memory]`` settings, backends,
        keyword tier, embedding, vector store, fusion, and a fresh health probe. ``memory`` is the settings in
        effect (runtime overrides applied)."""
        memory = self.memory_settings()
        engine = self._retrieval.status()
        return StatusReport(
            data_dir=str(self.data_dir), state_dir=str(self.state_dir),
            memory=MemoryStatus(enabled=memory.enabled, strategy=memory.strategy, max_tokens=memory.max_tokens,
                                retention_days=memory.retention_days),
            backends=BackendsStatus(primary=self.settings.backends.primary,
                                    fallbacks=tuple(self.settings.backends.fallbacks),
                                    instances=tuple(b.describe() for b in self._manager.backends)),
            keyword=dict(engine.get("keyword", {})), embedding=dict(engine.get("embedding", {})),
            vector_store=dict(engine.get("vector_store", {})), fusion=dict(engine.get("fusion", {})),
            rerank=dict(engine.get("rerank", {})),
            health=self.health(), group_commit=self._adds.counters(), extraction=self.extraction_status(),
        )

    def vector_store_health(self) -> HealthResult | None:
        """Probe the vector store in use now, for real (Qdrant: one round trip): whether it answered and how
        long it took; ``None`` when there is no vector store."""
        store = self._retrieval.vector_store
        return None if store is None else store.health()

    def verify(self, *, repair: bool = False) -> VerifyReport:
        """Compare every fallback with the primary, memory by memory (the drift check); with ``repair``, replay
        the primary's version of every difference through the outbox. See :mod:`memroute.routing.verify`."""
        return verify_replicas(self._manager, repair=repair)

    def reindex(self, *, force: bool = False, progress: Callable[[int, int], None] | None = None,
                api_key_id: str | None = None) -> ReindexReport:
        """Embed every memory that has no current vector now (every memory with ``force``); resumable, the
        queue is durable. ``progress(done, remaining)`` is called after each batch. With ``api_key_id``, only
        that tenant's memories: a tenant's maintenance never rebuilds (or degrades) another tenant's index."""
        tenant = None if api_key_id is None else require_tenant(api_key_id)
        outcome = self._retrieval.reindex(force=force, progress=progress, api_key_id=tenant)
        known = {f.name for f in attrs.fields(ReindexReport)}
        return ReindexReport(**{k: v for k, v in outcome.items() if k in known})

    # --- import / export -----------------------------------------------------------------------------
    def export(self, api_key_id: str) -> Iterator[Memory]:
        """Every memory of ``api_key_id``, oldest first (see :meth:`export_all` for every tenant)."""
        tenant = require_tenant(api_key_id)
        return iter(self._manager.iter_all(tenant))

    def tenants(self) -> builtins.list[str]:
        """Every ``api_key_id`` that holds memories, sorted: an all-tenant read for operators and the
        dashboard's tenant picker (the server exposes it to admin keys only)."""
        return self._manager.tenants()

    def export_all(self) -> Iterator[Memory]:
        """Every memory of **every** tenant, oldest first: an operator's backup, never a tenant's call."""
        return iter(self._manager.iter_all(None))

    def import_memories(self, memories: Iterable[Memory]) -> ImportReport:
        """Store memories exactly as given (ids, owners and timestamps kept): an operator's restore. Refused
        whole when an id is not a UUID or exists under another tenant (see :mod:`memroute.service.transfer`)."""
        checked: builtins.list[tuple[int, Memory]] = []
        for number, memory in enumerate(memories, start=1):
            if not isinstance(memory, Memory):
                raise ValidationError(f"item {number}: expected a Memory", [(f"item {number}", "type")])
            if not is_memory_id(memory.id):
                raise ValidationError(f"item {number}: id: expected a canonical UUID, got {memory.id!r:.60}",
                                      [(f"item {number}", "id")])
            self._limits.check(content=memory.content, metadata=memory.metadata, where=f"item {number}: ")
            checked.append((number, memory))
        self._check_quotas(memory for _, memory in checked)
        return import_memories(self._manager, checked, on_written=self._retrieval.on_written)

    def _check_quotas(self, memories: Iterable[Memory]) -> None:
        """An import past a tenant's storage quota is refused whole, before anything is written."""
        by_tenant: dict[str, builtins.list[tuple[str, Any]]] = {}
        for memory in memories:
            by_tenant.setdefault(memory.api_key_id, []).append((memory.content, memory.metadata))
        for tenant, writes in by_tenant.items():
            self._quotas.check(tenant, writes)

    def import_jsonl(self, lines: Iterable[str], *, api_key_id: str | None = None,
                     progress: Callable[[int], None] | None = None) -> ImportReport:
        """Import JSONL (one memory object a line, as ``memroute export`` writes), all or nothing: the whole
        input is validated before the first write (the error names the line), an id that exists under another
        tenant is refused, and the memories are written in one backend call (one transaction on SQLite and
        PostgreSQL). With ``api_key_id``, every line must belong to that tenant or name none. See
        :mod:`memroute.service.transfer` for what is guaranteed on backends without transactions."""
        parsed = parse_jsonl(lines, api_key_id=api_key_id, limits=self._limits)
        self._check_quotas(memory for _, memory in parsed)
        return import_memories(self._manager, parsed, api_key_id=api_key_id, on_written=self._retrieval.on_written,
                               progress=progress)

    def import_omniroute(self, path: str | os.PathLike[str], *, dry_run: bool = False, skip_uncarried: bool = False,
                         unowned_tenant: str | None = None, duplicates: Duplicates = "newest",
                         skip_expired: bool = False, progress: Progress | None = None) -> OmnirouteImportReport:
        """Import the reference system's SQLite database (its ``memories`` table, opened read-only): each
        ``api_key_id`` becomes a tenant, ids, keys, types, metadata, sessions, timestamps and expiry kept. Every
        row is checked before the first write, and the memories are written in one backend call; a row that
        cannot be carried stops the import (a :class:`~memroute.errors.ValidationError` saying why) unless
        ``skip_uncarried``. ``dry_run`` reports the same counts and writes nothing. An operator's call: the
        rows may belong to any tenant. See :mod:`memroute.service.omniroute` for each quirk of the reference's
        data and what is done with it."""
        return import_omniroute(self._manager, path, dry_run=dry_run, skip_uncarried=skip_uncarried,
                                unowned_tenant=unowned_tenant, duplicates=duplicates, skip_expired=skip_expired,
                                limits=self._limits, on_written=self._retrieval.on_written, progress=progress)
