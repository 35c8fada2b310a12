"""The conversation part of :class:`~memroute.service.Memroute`: augment a request with memories, observe a
turn, extract facts, and the maintenance that summarizes, compacts and prunes (all through
:mod:`memroute.pipeline.conversation`, built on first use). A mixin: ``Memroute`` inherits these methods, and
they are documented and called as its own."""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import attrs

from memroute.errors import MemrouteError, ValidationError
from memroute.interfaces import ExtractedFact
from memroute.models import Memory, require_tenant, utcnow
from memroute.reports import AugmentReport, MaintenanceReport
from memroute.service.base import ServiceBase

if TYPE_CHECKING:
    from datetime import datetime

    from memroute.pipeline.conversation import Conversation
    from memroute.pipeline.ports import MemoryStore
    from memroute.pipeline.requests import ApiShape

__all__ = ["ConversationMethods"]


class ConversationMethods(ServiceBase):
    """Augment, observe, extract and maintenance (see :class:`~memroute.service.Memroute`)."""

    # --- conversation pipeline (memroute.pipeline.conversation; docs/pipeline.md) ----------------------
    @property
    def _conversation(self) -> Conversation:
        """The pipeline object (extraction worker, augmentation, maintenance), built on first use."""
        with self._lock:
            if self._pipeline is None:
                from memroute.pipeline.augment_cache import AugmentCache
                from memroute.pipeline.conversation import Conversation, build_extractors

                self._pipeline = Conversation(
                    cast("MemoryStore", self), self.settings,
                    lambda: build_extractors(self.settings, self.plugins, self.data_dir),
                    cache=AugmentCache(self._manager.data_version,
                                       lambda ids, tenant: self._manager.get_many(ids, api_key_id=tenant)),
                )
            return self._pipeline

    def augment(self, request: Any, *, api_key_id: str, session_id: str | None = None, provider: str | None = None,
                headers: Any = None, api: ApiShape | None = None, session_scope: bool = False) -> Any:
        """``request`` with relevant memories of ``api_key_id`` injected (never mutated; the same object when
        nothing is injected). ``provider`` picks placement rules, ``api`` the request shape (default:
        detected), ``session_scope=True`` retrieves only ``session_id``'s memories. Never raises for a
        retrieval failure (the request goes out without memory). Each injected memory counts as an access
        (recorded in the background; see :meth:`record_access`). See :meth:`explain_augment`."""
        return self.explain_augment(request, api_key_id=api_key_id, session_id=session_id, provider=provider,
                                    headers=headers, api=api, session_scope=session_scope, preview=False).request

    def explain_augment(self, request: Any, *, api_key_id: str, session_id: str | None = None,
                        provider: str | None = None, headers: Any = None, api: ApiShape | None = None,
                        session_scope: bool = False, preview: bool = True,
                        record_access: bool = True, cached_only: bool = False) -> AugmentReport:
        """Like :meth:`augment`, and also what was retrieved for which query (a :class:`RetrievalPreview` of
        the memories injected, unless ``preview=False``: the proxy's request path needs only the request and the
        count), and why nothing was injected. ``record_access=False`` counts no access (a preview of the block,
        like the dashboard's, rather than a request that is sent). Without the preview, the retrieval for a
        repeated message (an agent's tool loop resends it after every tool call) is reused while the tenant's
        data is unchanged, in this process or any other (:mod:`memroute.pipeline.augment_cache`); a preview
        always retrieves afresh. ``cached_only=True`` never searches (so with a preview it never injects): a
        call that would have to returns at once, the request unchanged and ``skipped == "not cached"`` (the
        proxy answers what needs no search on its event loop and runs only a search in a worker thread)."""
        with self._manager.read_scope():  # the data version, the search, a reused entry's memories: one check
            done = self._conversation.explain_augment(request, api_key_id, session_id, provider, headers, api=api,
                                                      session_scope=session_scope, record_access=record_access,
                                                      reuse=not preview, cached_only=cached_only)
        shown = None
        if preview and done.result is not None:
            shown = self._preview_of(done.query, require_tenant(api_key_id), done.hits, done.result,
                                     done.max_tokens, len(done.result.hits))
        return AugmentReport(request=done.request, query=done.query, block=done.block, skipped=done.skipped,
                             preview=shown, count=done.count, searched=done.searched,
                             memory_ids=tuple(hit.memory.id for hit in done.hits) if done.block else ())

    def extraction_status(self, api_key_id: str | None = None) -> dict[str, Any]:
        """The ``extraction`` block of :meth:`status`: the extractor chain, failed background jobs and each
        background extractor's counters (an ``llm`` extractor's requests, tokens per tenant and failures by
        reason). With ``api_key_id``: the chain and that tenant's counters only, for a tenant's own view. A
        chain that cannot be built reports its error here instead of failing the status."""
        tenant = None if api_key_id is None else require_tenant(api_key_id)
        try:
            return self._conversation.status(tenant)
        except MemrouteError as exc:
            return {"extractors": list(self.settings.extraction.extractors), "error": str(exc)}

    def observe(self, request: Any, response: Any = None, *, api_key_id: str, session_id: str | None = None,
                headers: Any = None, wait: bool = False,
                said_at: datetime | str | None = None) -> builtins.list[Memory]:
        """Keep the user's message (when it says something about them: ``[extraction] keep_turns``) and the facts
        extracted from the turn, for ``api_key_id`` (in the background unless ``wait``; with ``wait`` the stored
        memories are returned). ``said_at``: when the message was said (else the ``x-memroute-message-time``
        header, else now); stored as ``metadata.said_at``."""
        return self._conversation.observe(request, response, api_key_id=api_key_id, session_id=session_id,
                                          headers=headers, wait=wait, said_at=said_at)

    @overload
    def extract(self, text: str, *, source: str = ..., api_key_id: None = ..., store: Literal[False] = ...,
                session_id: None = ...) -> builtins.list[ExtractedFact]: ...

    @overload
    def extract(self, text: str, *, source: str = ..., api_key_id: str, store: Literal[True],
                session_id: str | None = ...) -> builtins.list[Memory]: ...

    def extract(self, text: str, *, source: str = "user", api_key_id: str | None = None, store: bool = False,
                session_id: str | None = None) -> builtins.list[ExtractedFact] | builtins.list[Memory]:
        """The facts the configured offline extractors find in ``text`` (``source``: ``user`` or ``assistant``; a
        background extractor such as ``llm`` works on :meth:`observe` only, never here).
        With ``store=True`` they are also stored for ``api_key_id`` (required then; whatever the memory gate
        says) and the stored memories are returned; a fact that names an opposite key (``aversion:x`` for
        ``preference:x``) supersedes that memory."""
        if not isinstance(text, str):
            raise ValidationError("text: expected a string", [("text", "type")])
        if not store:
            if api_key_id is not None:
                raise ValidationError("api_key_id: only applies with store=True", [("api_key_id", "unexpected")])
            return self._conversation.extract(text, source=source)
        tenant = require_tenant(api_key_id)
        facts = self._conversation.extract(text, source=source)
        return self._conversation.store_facts(tenant, facts, session_id=session_id)

    def summarize(self, api_key_id: str, older_than_days: int, *, dry_run: bool = True) -> MaintenanceReport:
        """Replace one tenant's memories older than ``older_than_days`` with summaries (dry run by default)."""
        return self._conversation.summarize(require_tenant(api_key_id), older_than_days, dry_run=dry_run)

    def compact(self, api_key_id: str, session_id: str | None = None, max_tokens: int = 4000, *,
                dry_run: bool = True) -> MaintenanceReport:
        """Summarize what does not fit ``max_tokens`` of one tenant (dry run by default)."""
        return self._conversation.compact(require_tenant(api_key_id), session_id, max_tokens, dry_run=dry_run)

    def prune(self, api_key_id: str, *, dry_run: bool = False) -> MaintenanceReport:
        """Delete one tenant's memories configured to go: expired, past ``[memory] delete_after_days`` (never by
        default), or decayed (typed decay, when enabled); and the history of memories deleted longer ago than
        ``delete_after_days`` (docs/pipeline.md, "Retention" and "History")."""
        tenant = require_tenant(api_key_id)
        return self._purge_history(tenant, self._conversation.prune(tenant, dry_run=dry_run))

    def prune_all(self, *, dry_run: bool = False) -> MaintenanceReport:
        """:meth:`prune` for **every** tenant: operator maintenance (``memroute prune --all-tenants``)."""
        return self._purge_history(None, self._conversation.prune(None, dry_run=dry_run))

    def _purge_history(self, tenant: str | None, report: MaintenanceReport) -> MaintenanceReport:
        days = cast("MemoryStore", self).memory_settings().delete_after_days
        if report.dry_run or days <= 0 or not self._manager.keeps_history:
            return report
        purged = self._manager.purge_history(tenant, before=utcnow() - timedelta(days=days))
        return attrs.evolve(report, history_purged=purged)
