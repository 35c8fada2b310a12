"""The drift check: compare every fallback with the primary, memory by memory, and repair the difference.

Replication converges by construction (docs/manager.md), but a process killed between the primary's commit
and its outbox entry, a fallback restored from an old backup, or an edit made directly in a vault leave a
fallback out of step, and nothing in the write path would ever notice. ``memroute verify`` (and
:meth:`memroute.service.Memroute.verify`) finds those differences; with ``repair`` it journals the
primary's version of each (a ``put``, or a ``delete`` for a memory only the fallback holds) through the
outbox, so the repair is ordered behind any pending write and replayed like every other entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from memroute.models import Memory
from memroute.routing.outbox import OP_DELETE, OP_PUT, delete_payload, put_payload

if TYPE_CHECKING:
    from memroute.interfaces import MemoryBackend
    from memroute.routing.manager import MemoryManager

__all__ = ["ReplicaDrift", "VerifyReport", "verify_replicas"]

_SAMPLE = 20


@attrs.frozen(kw_only=True)
class ReplicaDrift:
    """How one fallback differs from the primary. Id lists are samples (at most 20 each)."""

    backend: str
    checked: bool
    """False when the fallback was not compared (it has outbox entries pending, or it did not answer)."""
    reason: str | None = None
    missing: int = 0
    """Memories the primary holds and the fallback does not."""
    stale: int = 0
    """Memories both hold, with different contents (the fallback's is not the primary's version)."""
    extra: int = 0
    """Memories only the fallback holds (deleted on the primary)."""
    repaired: int = 0
    """Outbox entries journaled to repair this fallback (``repair=True``)."""
    sample_ids: tuple[str, ...] = ()

    @property
    def in_step(self) -> bool:
        return self.checked and not (self.missing or self.stale or self.extra)


@attrs.frozen(kw_only=True)
class VerifyReport:
    primary: str
    memories: int
    """Memories on the primary."""
    replicas: tuple[ReplicaDrift, ...]
    repair: bool
    flushed: bool | None = None
    """With ``repair``: whether the repair entries were delivered (the outbox drained) before returning."""

    @property
    def ok(self) -> bool:
        return all(r.in_step for r in self.replicas)

    def to_dict(self) -> dict[str, Any]:
        return {"primary": self.primary, "memories": self.memories, "repair": self.repair, "ok": self.ok,
                "flushed": self.flushed,
                "replicas": [{**attrs.asdict(r), "sample_ids": list(r.sample_ids), "in_step": r.in_step}
                             for r in self.replicas]}


def _snapshot(backend: MemoryBackend) -> dict[str, Memory]:
    return {m.id: m for m in backend.iter_all(None)}


def verify_replicas(manager: MemoryManager, *, repair: bool = False, flush_timeout: float = 30.0) -> VerifyReport:
    """Compare each fallback with the primary; with ``repair``, journal the primary's version of every
    difference and flush. Runs under the manager's write lock (writes of this process wait; writes of other
    processes journal behind the repair entries, so they still win)."""
    manager._ensure_open()
    replicas: list[ReplicaDrift] = []
    with manager._write_lock:
        primary_rows = _snapshot(manager.primary)
        for fallback in manager.fallbacks:
            pending = manager.outbox.pending(fallback.name)
            if pending:
                replicas.append(ReplicaDrift(backend=fallback.name, checked=False,
                                             reason=f"{pending} outbox entries pending: flush first"))
                continue
            try:
                rows = _snapshot(fallback)
            except Exception as exc:  # an unreachable fallback is reported, not fatal
                replicas.append(ReplicaDrift(backend=fallback.name, checked=False, reason=str(exc)))
                continue
            missing = [i for i in primary_rows if i not in rows]
            stale = [i for i in primary_rows if i in rows and not rows[i].same_as(primary_rows[i])]
            extra = [i for i in rows if i not in primary_rows]
            repaired = 0
            if repair and (missing or stale or extra):
                entries = [(fallback.name, OP_PUT, put_payload(primary_rows[i])) for i in (*missing, *stale)]
                entries += [(fallback.name, OP_DELETE, delete_payload(i)) for i in extra]
                manager.outbox.add(entries)
                repaired = len(entries)
            replicas.append(ReplicaDrift(
                backend=fallback.name, checked=True, missing=len(missing), stale=len(stale), extra=len(extra),
                repaired=repaired, sample_ids=tuple((missing + stale + extra)[:_SAMPLE]),
            ))
    flushed = manager.flush(flush_timeout) if repair else None
    return VerifyReport(primary=manager.primary.name, memories=len(primary_rows), replicas=tuple(replicas),
                        repair=repair, flushed=flushed)
