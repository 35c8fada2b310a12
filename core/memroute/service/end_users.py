"""The end-user part of :class:`~memroute.service.Memroute`: the end users of an app tenant, and erasing one of
them as a whole (GDPR-style). A mixin: ``Memroute`` inherits these methods.

An end user's memories are those of its composite tenant ``<tenant>/<end user>`` (:mod:`memroute.tenancy`), so
every other method already serves one end user through ``api_key_id=end_user_tenant(tenant, user)``."""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import TYPE_CHECKING

from memroute.deployment.state import SESSION_HISTORIES, tenant_histories_prefix
from memroute.errors import MemrouteError
from memroute.models import ListFilter, utcnow
from memroute.reports import EndUserErasure
from memroute.service.base import ServiceBase
from memroute.tenancy import END_USER_SEPARATOR, end_user_tenant, require_key_tenant, split_end_user

if TYPE_CHECKING:
    from memroute.reports import ClearReport

__all__ = ["EndUserMethods"]

OUTBOX_SCAN = 1_000_000
"""How many outbox entries an erasure report looks through for the end user's (the whole backlog, in practice)."""
ERASE_SETTLE_S = 30.0
"""How long :meth:`EndUserMethods.forget_end_user` waits for the deletions to reach the fallbacks and the vector
store before it counts what is left (what has not arrived by then is still replayed, and reported pending)."""


class EndUserMethods(ServiceBase):
    """End users of an app tenant (see :class:`~memroute.service.Memroute`)."""

    def end_users(self, tenant: str) -> builtins.list[str]:
        """The end users of app tenant ``tenant`` that hold memories, sorted (``shop`` → ``["u1", "u2"]``)."""
        app = require_key_tenant(tenant, end_users=True)
        found = set()
        for owner in self._manager.tenants():
            parts = split_end_user(owner) if owner.startswith(app + END_USER_SEPARATOR) else None
            if parts is not None and parts[0] == app:
                found.add(parts[1])
        return sorted(found)

    def forget_end_user(self, tenant: str, end_user: str, *, dry_run: bool = False,
                        settle_s: float = ERASE_SETTLE_S) -> EndUserErasure:
        """Erase every memory of ``end_user`` of app tenant ``tenant``: each through the same delete path as
        :meth:`delete` (replicated to every fallback through the outbox, its vector removed), delete the
        conversation histories the framework sessions kept for it, then wait up to ``settle_s`` for the
        replication and the vector deletions, and report what each place still holds.
        Nothing of another end user, of the app's own tenant or of another tenant is touched. ``dry_run`` only
        reports what would be deleted."""
        owner = end_user_tenant(tenant, end_user)
        cleared: ClearReport = self.clear(owner, dry_run=dry_run)  # type: ignore[attr-defined]
        if dry_run:
            return EndUserErasure(tenant=tenant, end_user=end_user, api_key_id=owner, dry_run=True,
                                  matched=cleared.matched, ids=cleared.ids)
        self._manager.flush(settle_s)
        self._retrieval.flush(settle_s)
        remaining: dict[str, int | None] = {}
        for backend in self._manager.backends:
            try:
                remaining[backend.name] = backend.list(ListFilter(api_key_id=owner, limit=1)).total
            except MemrouteError:
                remaining[backend.name] = None
        store = self._retrieval.vector_store
        vectors = None
        if store is not None:
            try:
                vectors = store.count(owner)
            except MemrouteError:
                vectors = None
        erased = set(cleared.ids)  # the outbox's entries for these memories only, not another tenant's backlog
        pending = sum(1 for entry in self._manager.outbox.entries(limit=OUTBOX_SCAN) if entry.memory_id in erased)
        try:
            histories: int | None = self.state.delete_values(  # type: ignore[attr-defined]
                SESSION_HISTORIES, tenant_histories_prefix(owner))
        except NotImplementedError:
            histories = None
        # A deleted memory's history is kept for its tenant until retention purges it; an erasure purges it now
        # (the deletions were just recorded, so "before a moment from now" covers every erased memory).
        try:
            changes: int | None = self._manager.purge_history(owner, before=utcnow() + timedelta(seconds=1))
        except MemrouteError:
            changes = None
        return EndUserErasure(tenant=tenant, end_user=end_user, api_key_id=owner, dry_run=False,
                              matched=cleared.matched, deleted=cleared.deleted, ids=cleared.ids,
                              remaining=remaining, vectors_remaining=vectors, replication_pending=pending,
                              histories_deleted=histories, change_history_deleted=changes)
