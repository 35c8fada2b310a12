"""Replication: writes owed to backends, kept in the durable outbox and replayed to each in order.

The manager journals every acknowledged write for every backend that did not serve it; this module
delivers those entries (strict FIFO per target, retried with backoff, nothing dropped) from a background
thread, from :meth:`Replicator.flush`, and inline on the request paths when a backlog is short. It also
answers the manager's ordering question (:meth:`Replicator.in_sync`): a backend with pending entries, or
with an abandoned write still running, takes no direct write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from memroute.config.settings import ManagerSettings
from memroute.errors import ValidationError
from memroute.interfaces import MemoryBackend, tenant_routed
from memroute.models import Memory
from memroute.routing.calls import BackendCall, BackendCaller, CircuitOpenError
from memroute.routing.outbox import OP_PUT, Outbox, OutboxEntry, put_payload

__all__ = ["INLINE_CATCH_UP_MAX", "Replicator"]

log = logging.getLogger("memroute.routing.manager")

_DEFAULT_FLUSH_TIMEOUT_S = 30.0
INLINE_CATCH_UP_MAX = 100
"""A backlog this short is replayed on the request path (and under the write lock by the replay thread)."""
_REPLAY_BATCH = 200
POISON_ATTEMPTS = 3
"""An entry refused with a ValidationError this many times is dead-lettered (``Outbox.dead_letters``)."""


class Replicator:
    """Delivers the outbox to the backends it names. ``write_lock`` is the manager's: holding it, no new
    entry can join a target's queue, so a short backlog delivered under it really empties."""

    def __init__(
        self,
        backends: Sequence[MemoryBackend],
        caller: BackendCaller,
        outbox: Outbox,
        *,
        settings: ManagerSettings,
        clock: Callable[[], float],
        write_lock: threading.RLock,
    ) -> None:
        self.outbox = outbox
        self._backends = list(backends)
        self._by_name = {b.name: b for b in self._backends}
        self._caller = caller
        self._settings = settings
        self._clock = clock
        self._write_lock = write_lock
        self._delivery_locks = {b.name: threading.Lock() for b in self._backends}
        self._stop = threading.Event()
        self._wake = threading.Event()

    def wake(self) -> None:
        """New entries, a recovered backend or a finished abandoned write: replay now, not at the next tick."""
        self._wake.set()

    def in_sync(self, name: str) -> bool:
        """The outbox holds nothing for ``name`` and no abandoned write to it is still running."""
        return self.outbox.pending(name) == 0 and self._caller.abandoned(name) == 0

    # --- journaling -----------------------------------------------------------------------------------
    def journal(self, served: MemoryBackend, op: str, payload: Callable[[], dict[str, Any]]) -> None:
        """Owe ``op`` to every backend except the one that served, durably, before acknowledging. ``payload``
        is built only when some backend is owed it (a lone primary owes nothing)."""
        targets = [b.name for b in self._backends if b is not served]
        if not targets:
            return
        body = payload()
        self.outbox.add((name, op, body) for name in targets)
        self._wake.set()

    def journal_puts(self, served: MemoryBackend, memories: Sequence[Memory]) -> None:
        """Owe a ``put`` of each memory (a bulk import, a group commit) to every backend except the one that
        served, in one outbox append."""
        targets = [b.name for b in self._backends if b is not served]
        if not targets or not memories:
            return
        self.outbox.add((name, OP_PUT, put_payload(m)) for name in targets for m in memories)
        self._wake.set()

    # --- delivery -------------------------------------------------------------------------------------
    def deliver(
        self, target: str, *, respect_backoff: bool, force: bool, wait: bool = True, limit: int | None = None
    ) -> bool:
        """Deliver ``target``'s entries in order until one fails; True when its queue is empty.

        ``wait=False`` (the request paths) gives up at once when another thread is delivering to ``target``:
        a caller must not queue behind a delivery that may be waiting out a hung backend's timeout.
        ``limit`` caps the entries delivered in this call (the lock is then released).
        """
        backend = self._by_name.get(target)
        if backend is None or self._caller.abandoned(target):
            return self.outbox.pending(target) == 0
        lock = self._delivery_locks[target]
        if not lock.acquire(blocking=wait):
            return False
        try:
            # Threads of this process queue on ``lock``; other processes sharing the outbox on this one.
            with self.outbox.delivery_lock(target, wait=wait) as held:
                return held and self._deliver_locked(backend, target, respect_backoff=respect_backoff,
                                                     force=force, limit=limit)
        finally:
            lock.release()

    def _deliver_locked(self, backend: MemoryBackend, target: str, *, respect_backoff: bool, force: bool,
                        limit: int | None) -> bool:
        delivered = 0
        while limit is None or delivered < limit:
            entry = self.outbox.head(target)
            if entry is None:
                return True
            if respect_backoff and entry.next_attempt_at > self._clock():
                return False
            try:
                self._caller.call(backend, self._replay_call(entry, target), force=force)
            except CircuitOpenError:
                return False
            except ValidationError as exc:
                # The entry itself is bad (a payload that no longer validates, or one the target refuses
                # every time): set it aside rather than block every later entry for this target forever.
                if entry.attempts + 1 >= POISON_ATTEMPTS or "payload" in str(exc):
                    self.outbox.dead_letter(entry, str(exc))
                    log.warning("outbox entry %d for %r dead-lettered after %d attempt(s): %s",
                                entry.id, target, entry.attempts + 1, exc)
                    continue
                self._failed(entry, target, exc)
                return False
            except Exception as exc:
                self._failed(entry, target, exc)
                return False
            self.outbox.remove(entry)
            delivered += 1
        return self.outbox.pending(target) == 0

    def _replay_call(self, entry: OutboxEntry, target: str) -> BackendCall[object]:
        """The backend call that delivers one outbox entry (its own scope: a call abandoned after its timeout
        still holds its own entry's data).

        A ``put`` owed to a fallback carries the primary's *current* version of the memory: processes sharing
        one primary commit and journal in two steps, so the snapshot of the write the primary committed first
        can be journaled last, and replaying snapshots in queue order would leave the fallback on a version the
        primary overwrote (``updated_at`` does not settle it: it is stamped before the commit). The primary's
        commit order is the truth. The snapshot is used when the primary cannot answer, no longer has the
        memory, or is itself catching up (entries are owed to it: it may hold an older version)."""
        if entry.op != OP_PUT:
            memory_id, tenant = entry.memory_id, entry.payload.get("api_key_id")
            return BackendCall("delete", lambda b: _replay_delete(b, memory_id, tenant), writes=True)
        memory = _entry_memory(entry)
        primary = self._backends[0]
        if target != primary.name and self.in_sync(primary.name):
            current = self._current_on(primary, memory)
            if current is not None:
                memory = current
        return BackendCall("put", lambda b: b.put(memory), writes=True)

    def _current_on(self, primary: MemoryBackend, memory: Memory) -> Memory | None:
        memory_id = memory.id
        try:
            # get_many, not get: a backend may serve get from a per-process cache that another process's
            # commit has made stale; get_many reads the store.
            found = self._caller.call(primary, BackendCall("get_many", lambda b: b.get_many([memory_id])))
            current = found.get(memory_id) if isinstance(found, dict) else None
        except Exception as exc:  # the snapshot is still a valid (if possibly older) delivery
            log.debug("replay: the primary's current version of %s is unavailable: %s", memory_id, exc)
            return None
        if isinstance(current, Memory) and current.api_key_id == memory.api_key_id:
            return current
        return None

    def _failed(self, entry: OutboxEntry, target: str, exc: Exception) -> None:
        delay = min(self._settings.retry_base_s * 2 ** entry.attempts, self._settings.retry_max_s)
        self.outbox.record_failure(entry, str(exc), self._clock() + delay)
        log.info("outbox entry %d for %r failed (attempt %d): %s", entry.id, target, entry.attempts + 1, exc)

    def replay_pass(self, *, respect_backoff: bool, force: bool) -> None:
        """Deliver to every target once, in outbox order."""
        for target in self.outbox.targets():
            if target in self._by_name:
                self.deliver(target, respect_backoff=respect_backoff, force=force)

    def background_pass(self) -> None:
        """One pass of the replay thread. Delivers in batches; when a healthy target's backlog is short
        but writers keep adding to it, the rest is delivered under the write lock, so the target catches
        up (and a recovered primary serves again) even under a steady write load."""
        for target in self.outbox.targets():
            if target not in self._by_name or self._stop.is_set():
                continue
            if self.deliver(target, respect_backoff=True, force=False, limit=_REPLAY_BATCH):
                continue
            head = self.outbox.head(target)
            healthy = self._caller.breaker(target).state == "closed" and head is not None and head.attempts == 0
            if healthy and self.outbox.pending(target) <= INLINE_CATCH_UP_MAX:
                with self._write_lock:
                    self.deliver(target, respect_backoff=True, force=False)

    def run(self) -> None:
        """The replay thread's loop, until :meth:`stop`."""
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.background_pass()
            except Exception as exc:  # the thread must survive anything (a closed outbox, a bad entry)
                log.warning("outbox replay pass failed: %s", exc)
            # New entries and recoveries set _wake; the timeout re-checks backoff and half-open breakers.
            self._wake.wait(0.1 if self.outbox.depth() else 1.0)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Drive the replay now until the outbox is empty or ``timeout`` seconds pass (``None``: 30 s;
        ``0``: one pass). Backoff and breakers are bypassed: a flush is an explicit "try now".
        True when the outbox is empty."""
        deadline = time.monotonic() + (_DEFAULT_FLUSH_TIMEOUT_S if timeout is None else max(timeout, 0.0))
        pause = 0.01
        while True:
            self.replay_pass(respect_backoff=False, force=True)
            if self.outbox.depth() == 0:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.25)


def _entry_memory(entry: OutboxEntry) -> Memory:
    try:
        return entry.memory()
    except ValidationError as exc:
        raise ValidationError(f"outbox entry {entry.id}: payload does not validate: {exc}",
                              [("payload", "invalid")]) from None


def _replay_delete(backend: MemoryBackend, memory_id: str, tenant: object) -> bool:
    """A journaled delete; routed by tenant where the entry names one and the backend routes by it (entries
    written before deletes carried the tenant name none)."""
    routed = tenant_routed(backend)
    if routed is None or not isinstance(tenant, str) or not tenant:
        return backend.delete(memory_id)
    return routed.delete_owned(tenant, memory_id)
