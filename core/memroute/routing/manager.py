"""MemoryManager: routes every call to the primary backend with ordered fallbacks.

Writes are served by one backend and replicated to every other one through the durable
:class:`~memroute.routing.outbox.Outbox`; reads fail over in order; a circuit breaker per backend skips a backend
that keeps failing; scheduled health checks close breakers again and wake the outbox replay. See
``docs/manager.md`` for the routing table and a failure walkthrough.

Ordering rule: a backend is *in sync* when the outbox holds nothing for it (and no abandoned write to it
is still running). Only an in-sync backend takes a direct write; a backend that is behind first has its
queue replayed (in order) or else receives the write through the outbox too. So an entry journaled during
an outage can never overwrite a newer direct write when it is replayed.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import attrs

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendError, BackendUnavailableError, ConfigError, PluginError, ValidationError
from memroute.interfaces import (
    AccessRecorder,
    HistoryNote,
    MemoryAccess,
    MemoryBackend,
    MemoryHistory,
    RecordedImports,
    RecordedWrites,
    ReindexMarkers,
    tenant_routed,
)
from memroute.models import (
    BackendHit,
    HealthResult,
    HistoryEntry,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
)
from memroute.models import require_id as _check_id
from memroute.models import require_ids as _check_ids
from memroute.routing.access import AccessLog
from memroute.routing.breaker import CircuitBreaker
from memroute.routing.calls import CLIENT_ERRORS, BackendCall, BackendCaller, CircuitOpenError
from memroute.routing.health import HealthMonitor
from memroute.routing.outbox import OP_DELETE, OP_PUT, Outbox, delete_payload, put_payload
from memroute.routing.replication import INLINE_CATCH_UP_MAX, Replicator

__all__ = ["CircuitOpenError", "ManagedSearch", "MemoryManager"]

log = logging.getLogger("memroute.routing.manager")

T = TypeVar("T")

BULK_SECONDS_PER_MEMORY = 0.002
"""What ``put_many`` adds to ``operation_timeout_s`` per memory in the batch (100,000: 200 s more)."""
HISTORY_APPEND_BATCH = 500
"""History entries appended per call when they follow a write (a bulk import on a backend without
:class:`~memroute.interfaces.RecordedImports`)."""


@attrs.frozen(kw_only=True)
class ManagedSearch:
    """A backend search leg as the manager served it."""

    hits: list[BackendHit]
    backend: str
    fallback: bool = False
    error: str | None = None
    """Why the primary did not serve (when ``fallback``)."""


class MemoryManager:
    """Primary + ordered fallbacks, a durable replication outbox, circuit breakers and health checks.

    Thread-safe: call it from any number of threads. ``clock`` (wall-clock seconds) drives the breakers,
    the outbox backoff and ages; tests inject a fake one. ``replay_in_background=False`` leaves the outbox
    to :meth:`flush` (and write-time catch-up) so a test decides exactly when replay happens.

    The parts: :class:`~memroute.routing.calls.BackendCaller` (breakers, timeouts, worker threads: the one way a
    backend is called), :class:`~memroute.routing.replication.Replicator` (the outbox and its replay) and
    :class:`~memroute.routing.health.HealthMonitor` (probes). The routing rules live here.
    """

    def __init__(
        self,
        primary: MemoryBackend,
        fallbacks: Sequence[MemoryBackend] = (),
        *,
        settings: ManagerSettings | None = None,
        outbox_path: str | Path = ":memory:",
        prepare_connection: Any = None,
        clock: Callable[[], float] | None = None,
        replay_in_background: bool = True,
    ) -> None:
        self.primary = primary
        self.fallbacks = list(fallbacks)
        self.settings = settings or ManagerSettings()
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"backends: instance name(s) used twice: {', '.join(duplicates)}",
                              [("backends", "duplicate name")])
        self._clock = clock or time.time
        self._write_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._initialized = False
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._replay_in_background = replay_in_background
        # A finished abandoned write unblocks its target's replay: the caller wakes the replicator.
        self._caller = BackendCaller(self.backends, self.settings, self._clock,
                                     on_settled=lambda: self._replication.wake())
        self.outbox = Outbox(outbox_path, prepare=prepare_connection, clock=self._clock)
        self._replication = Replicator(self.backends, self._caller, self.outbox, settings=self.settings,
                                       clock=self._clock, write_lock=self._write_lock)
        self._monitor = HealthMonitor(self.backends, self._caller, self._replication, self.settings)
        self._access = AccessLog(self.write_access, interval_s=self.settings.access_flush_interval_s)
        self._scope = threading.local()
        """``synced``: the backends found in sync within this thread's :meth:`read_scope` (absent outside one)."""
        self._recorders = frozenset(b.name for b in self.backends
                                    if b.capabilities.history and isinstance(b, RecordedWrites))
        """The backends that record an add's history in its transaction (a protocol check costs ~10 us: once)."""
        self._import_recorders = frozenset(b.name for b in self.backends
                                           if b.capabilities.history and isinstance(b, RecordedImports))
        """The backends that record a bulk import's history in its transaction."""

    @property
    def backends(self) -> list[MemoryBackend]:
        """Primary first, then the fallbacks in order."""
        return [self.primary, *self.fallbacks]

    def breaker(self, name: str) -> CircuitBreaker:
        """The circuit breaker of one backend instance."""
        return self._caller.breaker(name)

    # --- lifecycle ------------------------------------------------------------------------------------
    def initialize(self) -> None:
        """Initialize every backend and start the replay and health threads. Idempotent.

        A backend that fails to initialize is skipped (its breaker records the failure) and retried by the
        health checks; only when no backend at all initializes does this raise.
        """
        with self._state_lock:
            if self._closed:
                raise BackendUnavailableError("the memory manager is closed")
            if self._initialized:
                return
            errors: dict[str, BaseException] = {}
            for backend in self.backends:
                error = self._caller.initialize(backend)
                if error is not None:
                    errors[backend.name] = error
            if not self._caller.any_ready():
                error = self._all_failed("initialize", errors)
                self._closed = True  # unusable: release the outbox and whatever the backends opened
                self._release_resources()
                raise error
            self._initialized = True
            self._start_threads()

    def _start_threads(self) -> None:
        if self._replay_in_background:
            replay = threading.Thread(target=self._replication.run, name="memroute-outbox-replay", daemon=True)
            self._threads.append(replay)
            replay.start()
        if self.settings.health_interval_s > 0:
            health = threading.Thread(target=self._monitor.run, name="memroute-health", daemon=True)
            self._threads.append(health)
            health.start()
        if self._replay_in_background and self.settings.access_flush_interval_s > 0 and self._tracks_access():
            access = threading.Thread(target=self._access.run, name="memroute-access", daemon=True)
            self._threads.append(access)
            access.start()

    def close(self) -> None:
        """Stop the threads, try one last replay pass, close the backends and the outbox. Idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._replication.stop()
        self._monitor.stop()
        self._access.stop()
        for thread in self._threads:
            thread.join(timeout=self.settings.operation_timeout_s + 5)
        self._access.drain()  # bounded: one telemetry call per tenant, each under the operation timeout
        try:
            # Bounded: one pass, breakers and backoff respected, so a dead backend does not stall close().
            self._replication.replay_pass(respect_backoff=True, force=False)
        except Exception as exc:
            log.warning("final outbox replay failed: %s", exc)
        self._release_resources()

    def _release_resources(self) -> None:
        for backend in self.backends:
            try:
                backend.close()
            except Exception as exc:
                log.warning("backend %r failed to close: %s", backend.name, exc)
        self._caller.shutdown()
        self.outbox.close()

    def __enter__(self) -> MemoryManager:
        self.initialize()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError("the memory manager is closed")
        if not self._initialized:
            self.initialize()

    def _all_failed(self, op: str, errors: dict[str, BaseException]) -> BackendUnavailableError:
        """The error raised when no backend served ``op``: the primary's error first, then the others."""
        primary_error = errors.get(self.primary.name)
        parts = [f"{name}: {error}" for name, error in errors.items() if name != self.primary.name]
        lead = str(primary_error) if primary_error else f"primary {self.primary.name!r} did not answer"
        message = f"{op}: no backend could serve it: {lead}"
        if parts:
            message += " (fallbacks: " + "; ".join(parts) + ")"
        error = BackendUnavailableError(message, backend=self.primary.name)
        error.__cause__ = primary_error
        return error

    # --- writes ---------------------------------------------------------------------------------------
    def _write(self, call: BackendCall[T]) -> tuple[MemoryBackend, T]:
        """Serve a write on the first in-sync backend that answers; else catch one up and use it.

        Caller holds ``_write_lock``.
        """
        replication = self._replication
        errors: dict[str, BaseException] = {}
        behind = []
        for backend in self.backends:
            pending = self.outbox.pending(backend.name)
            if 0 < pending <= INLINE_CATCH_UP_MAX:
                # A short backlog is replayed right here (no new entries can join it: we hold the write
                # lock), so a recovered backend takes its place again even under a steady write load.
                replication.deliver(backend.name, respect_backoff=True, force=False, wait=False)
            if not replication.in_sync(backend.name):
                behind.append(backend)
                errors[backend.name] = BackendUnavailableError(
                    f"backend {backend.name!r} is catching up ({self.outbox.pending(backend.name)} pending "
                    f"outbox entries)", backend=backend.name,
                )
                continue
            try:
                return backend, self._caller.call(backend, call)
            except CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
        for backend in behind:
            if not replication.deliver(backend.name, respect_backoff=False, force=False):
                head = self.outbox.head(backend.name)
                if head is not None and head.last_error:
                    errors[backend.name] = BackendUnavailableError(
                        f"{errors[backend.name]}; replaying to it failed: {head.last_error}", backend=backend.name
                    )
                continue
            try:
                return backend, self._caller.call(backend, call)
            except CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
        raise self._all_failed(call.op, errors)

    def create(self, new: NewMemory) -> Memory:
        """Upsert on ``(api_key_id, key)``; replicated to every other backend through the outbox."""
        if not isinstance(new, NewMemory):
            raise ValidationError("create: expected a NewMemory", [("new", "type")])
        self._ensure_open()
        with self._write_lock:
            served, memory = self._write(BackendCall("create", lambda b: _created(b, new, b.create(new)), writes=True))
            self._replication.journal(served, OP_PUT, lambda: put_payload(memory))
        return memory

    def create_many(self, news: Sequence[NewMemory]) -> builtins.list[Memory | Exception]:
        """:meth:`create` each of ``news`` (the service's group commit): one outcome per item, in order, the
        memory or the exception that item's own ``create`` would have raised.

        When every backend declares ``capabilities.batch_create``, the batch is one backend call (one
        transaction), served and failed over like a single create, and journaled in one outbox append.
        Otherwise, and when the batched call fails for a reason other than the backend being unavailable
        (so possibly because of one item), each item is written by its own :meth:`create`, so an item can
        only ever fail with its own error."""
        batch = list(news)
        if not all(isinstance(n, NewMemory) for n in batch):
            raise ValidationError("create_many: expected NewMemory objects", [("news", "type")])
        if len(batch) > 1 and all(b.capabilities.batch_create for b in self.backends):
            self._ensure_open()
            timeout = self.settings.operation_timeout_s + len(batch) * BULK_SECONDS_PER_MEMORY
            call = BackendCall("create", lambda b: _created_many(b, batch), writes=True, timeout_s=timeout)
            try:
                with self._write_lock:
                    served, outcomes = self._write(call)
                    self._replication.journal_puts(served, [m for m in outcomes if isinstance(m, Memory)])
                return outcomes
            except Exception as exc:
                cause = exc.__cause__ if isinstance(exc, BackendUnavailableError) else exc
                if isinstance(cause, BackendUnavailableError) or not isinstance(cause, Exception):
                    raise  # no backend can take writes now: every caller's answer, as it would be one by one
                log.warning("create_many: the batch of %d failed (%s); writing its items one by one", len(batch), exc)
        outcomes = []
        for new in batch:
            try:
                outcomes.append(self.create(new))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    @property
    def records_in_write(self) -> bool:
        """Whether the primary records an add's history in the add's own transaction
        (:class:`~memroute.interfaces.RecordedWrites`): the service then adds through :meth:`create_recorded`."""
        return self.primary.name in self._recorders

    def create_recorded(self, news: Sequence[NewMemory],
                        notes: Sequence[HistoryNote]) -> builtins.list[Memory | Exception]:
        """:meth:`create_many`, each stored item's history entry (``notes[i]``: actor and event) written by the
        backend that takes the write, in the same transaction (:class:`~memroute.interfaces.RecordedWrites`), so
        no crash leaves a memory without its entry or an entry without its memory. A backend without that (a
        fallback serving writes during an outage) writes as :meth:`create_many` does and the entries follow by
        :meth:`append_history`, with what each add replaced read from that backend first.

        A batch that fails for a reason other than every backend being unavailable (a history statement is one
        of them) is written again item by item, so an item only ever fails with its own error."""
        batch = list(news)
        marks = list(notes)
        if not all(isinstance(n, NewMemory) for n in batch) or len(marks) != len(batch):
            raise ValidationError("create_recorded: expected one HistoryNote per NewMemory", [("news", "type")])
        self._ensure_open()
        timeout = self.settings.operation_timeout_s + len(batch) * BULK_SECONDS_PER_MEMORY
        late: builtins.list[HistoryEntry] = []

        def call(backend: MemoryBackend) -> builtins.list[Memory | Exception]:
            late.clear()  # an attempt on another backend before this one recorded nothing
            if backend.name in self._recorders:
                return _created_many(backend, batch, cast("RecordedWrites", backend).create_many_recorded(batch, marks))
            return _created_then_noted(backend, batch, marks, late)

        try:
            with self._write_lock:
                served, outcomes = self._write(BackendCall("create", call, writes=True, timeout_s=timeout))
                self._replication.journal_puts(served, [m for m in outcomes if isinstance(m, Memory)])
        except Exception as exc:
            cause = exc.__cause__ if isinstance(exc, BackendUnavailableError) else exc
            if len(batch) == 1 or isinstance(cause, BackendUnavailableError) or not isinstance(cause, Exception):
                raise
            log.warning("create_recorded: the batch of %d failed (%s); writing its items one by one", len(batch), exc)
            outcomes = []
            for new, note in zip(batch, marks, strict=True):
                try:
                    outcomes.extend(self.create_recorded([new], [note]))
                except Exception as item_exc:
                    outcomes.append(item_exc)
            return outcomes
        if late:
            self.append_history(late)
        return outcomes

    def update_recorded(self, before: Memory, patch: MemoryPatch, note: HistoryNote) -> Memory | None:
        """:meth:`update` of the memory ``before`` (read by the caller: its id and tenant), its history entry written
        in the update's transaction by a backend that records it there, else appended after the write (from
        ``before``, as the caller read it). ``None`` when the memory is gone."""
        if not isinstance(patch, MemoryPatch):
            raise ValidationError("update: expected a MemoryPatch", [("patch", "type")])
        self._ensure_open()
        late: builtins.list[HistoryEntry] = []

        def call(backend: MemoryBackend) -> Memory | None:
            late.clear()
            if backend.name in self._recorders:
                return _updated(backend, before.id, cast("RecordedWrites", backend).update_recorded(
                    before.api_key_id, before.id, patch, note))
            routed = tenant_routed(backend)
            updated = _updated(backend, before.id, backend.update(before.id, patch) if routed is None
                               else routed.update_owned(before.api_key_id, before.id, patch))
            if updated is not None and (entry := HistoryEntry.of_change(before, updated, actor=note.actor,
                                                                        event=note.event)) is not None:
                late.append(entry)
            return updated

        with self._write_lock:
            served, updated = self._write(BackendCall("update", call, writes=True))
            if updated is not None:
                self._replication.journal(served, OP_PUT, lambda: put_payload(updated))
        if late:
            self.append_history(late)
        return updated

    def delete_recorded(self, before: Memory, note: HistoryNote) -> bool:
        """:meth:`delete` of the memory ``before`` (read by the caller), its history entry (what it said) written
        in the delete's transaction by a backend that records it there, else appended after the write."""
        self._ensure_open()
        late: builtins.list[HistoryEntry] = []

        def call(backend: MemoryBackend) -> bool:
            late.clear()
            if backend.name in self._recorders:
                return cast("RecordedWrites", backend).delete_recorded(before.api_key_id, before.id, note)
            routed = tenant_routed(backend)
            deleted = (backend.delete(before.id) if routed is None
                       else routed.delete_owned(before.api_key_id, before.id))
            if deleted and (entry := HistoryEntry.of_change(before, None, actor=note.actor,
                                                            event=note.event)) is not None:
                late.append(entry)
            return deleted

        with self._write_lock:
            served, deleted = self._write(BackendCall("delete", call, writes=True))
            if deleted:
                self._replication.journal(served, OP_DELETE, lambda: delete_payload(before.id, before.api_key_id))
        if late:
            self.append_history(late)
        return bool(deleted)

    def put(self, memory: Memory) -> None:
        """Store exactly ``memory`` (import, restore); replicated like a create."""
        if not isinstance(memory, Memory):
            raise ValidationError("put: expected a Memory", [("memory", "type")])
        self._ensure_open()
        with self._write_lock:
            served, _ = self._write(BackendCall("put", lambda b: b.put(memory), writes=True))
            self._replication.journal(served, OP_PUT, lambda: put_payload(memory))

    def put_many(self, memories: Sequence[Memory], history: Sequence[HistoryEntry] = ()) -> int:
        """``put`` a batch in one backend call (bulk import), replicated entry by entry through the outbox. The
        import's ``history`` entries are written by the backend that takes the batch in the same transaction
        (:class:`~memroute.interfaces.RecordedImports`), else appended right after by :meth:`append_history`."""
        batch = list(memories)
        entries = list(history)
        if not all(isinstance(m, Memory) for m in batch) or not all(isinstance(e, HistoryEntry) for e in entries):
            raise ValidationError("put_many: expected Memory objects (and HistoryEntry objects)",
                                  [("memories", "type")])
        if not batch:
            return 0
        self._ensure_open()
        # One call for the whole batch (one transaction where the backend has them), so its timeout grows with
        # it: 100,000 memories took PostgreSQL longer than the 30 s default on a loaded 2-core machine.
        timeout = self.settings.operation_timeout_s + len(batch) * BULK_SECONDS_PER_MEMORY
        late: builtins.list[HistoryEntry] = []

        def call(backend: MemoryBackend) -> int:
            late.clear()
            if entries and backend.name in self._import_recorders:
                return cast("RecordedImports", backend).put_many_recorded(batch, entries)
            late.extend(entries)
            return backend.put_many(batch)

        with self._write_lock:
            served, count = self._write(BackendCall("put_many", call, writes=True, timeout_s=timeout))
            self._replication.journal_puts(served, batch)
        for start in range(0, len(late), HISTORY_APPEND_BATCH):
            self.append_history(late[start:start + HISTORY_APPEND_BATCH])
        return int(count)

    def update(self, memory_id: str, patch: MemoryPatch, *, api_key_id: str | None = None) -> Memory | None:
        """Apply ``patch``; the updated memory (replicated as a ``put``), or ``None`` when there is no such id
        (of ``api_key_id``, when given: a backend with
        :class:`~memroute.interfaces.TenantRouting` then addresses only the tenant's rows)."""
        _check_id(memory_id)
        if not isinstance(patch, MemoryPatch):
            raise ValidationError("update: expected a MemoryPatch", [("patch", "type")])
        self._ensure_open()

        def call(b: MemoryBackend) -> Memory | None:
            if api_key_id is None or (routed := tenant_routed(b)) is None:
                return _updated(b, memory_id, b.update(memory_id, patch))
            return _updated(b, memory_id, routed.update_owned(api_key_id, memory_id, patch))

        with self._write_lock:
            served, updated = self._write(BackendCall("update", call, writes=True))
            if updated is not None:
                self._replication.journal(served, OP_PUT, lambda: put_payload(updated))
        return updated

    def delete(self, memory_id: str, *, api_key_id: str | None = None) -> bool:
        """Delete by id (replicated to every other backend); ``False`` when there was no such id (of
        ``api_key_id``, when given)."""
        _check_id(memory_id)
        self._ensure_open()

        def call(b: MemoryBackend) -> bool:
            if api_key_id is None or (routed := tenant_routed(b)) is None:
                return b.delete(memory_id)
            return routed.delete_owned(api_key_id, memory_id)

        with self._write_lock:
            served, deleted = self._write(BackendCall("delete", call, writes=True))
            if deleted:
                self._replication.journal(served, OP_DELETE, lambda: delete_payload(memory_id, api_key_id))
        return bool(deleted)

    # --- reads ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def read_scope(self) -> Iterator[None]:
        """The reads of one request on this thread (a search: the data version, the keyword leg, the vector
        candidates' memories) decide once per backend that it is in sync, instead of at every read.

        Outside a scope every read checks the outbox (a ``PRAGMA data_version`` on its file, so another
        process's entries are seen): three checks in a proxy search, about 30 us each at 500 memories. Inside,
        a backend found in sync stays so for the scope (the reads of one search all go to the backend the
        first one used); one found behind is checked again at every read, so catching up is seen at once.
        Writes always check. Nested scopes are one scope; the next request checks again."""
        if getattr(self._scope, "synced", None) is not None:
            yield
            return
        self._scope.synced = set()
        try:
            yield
        finally:
            self._scope.synced = None

    def _in_sync(self, name: str) -> bool:
        """:meth:`Replicator.in_sync` for reads, remembered within a :meth:`read_scope` while true."""
        synced: set[str] | None = getattr(self._scope, "synced", None)
        if synced is None:
            return self._replication.in_sync(name)
        if name in synced:
            return True
        if self._replication.in_sync(name):
            synced.add(name)
            return True
        return False

    def _read_order(self) -> Iterator[MemoryBackend]:
        """In-sync backends in configured order, then those still catching up (after one try to catch up)."""
        behind = []
        for backend in self.backends:
            if self._in_sync(backend.name):
                yield backend
            else:
                behind.append(backend)
        for backend in behind:
            self._replication.deliver(backend.name, respect_backoff=True, force=False, wait=False)
            yield backend

    def _answers(self, call: BackendCall[T], errors: dict[str, BaseException]) -> Iterator[tuple[MemoryBackend, T]]:
        """The first-answer-wins read path: ask the backends in read order, yield each answer.

        A backend that raises is skipped (its error goes into ``errors``); a client error reaches the caller.
        Once a backend has answered, a backend still catching up is not asked: an in-sync backend said
        "no such id", and a lagging one may still hold a deleted memory. When no backend answers, raises
        the error naming each one's failure. The caller stops at the answer it takes.
        """
        answered = False
        for backend in self._read_order():
            if answered and not self._in_sync(backend.name):
                return
            try:
                value = self._caller.call(backend, call)
            except CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
                continue
            answered = True
            yield backend, value
        if not answered:
            raise self._all_failed(call.op, errors)

    def _skip_reason(self, errors: dict[str, BaseException]) -> str | None:
        error = errors.get(self.primary.name)
        if error is not None:
            return str(error)
        pending = self.outbox.pending(self.primary.name)
        reason = f"primary {self.primary.name!r} is catching up ({pending} pending outbox entries)"
        breaker = self.breaker(self.primary.name)
        if breaker.state != "closed":
            reason += f"; circuit breaker {breaker.state} (last error: {breaker.last_error})"
        return reason

    def get(self, memory_id: str, *, api_key_id: str | None = None) -> Memory | None:
        """The memory from the first backend that has it (primary first; also when the primary raises). With
        ``api_key_id``, only a memory of that tenant (another tenant's id is no such id)."""
        _check_id(memory_id)
        self._ensure_open()

        def call(b: MemoryBackend) -> Memory | None:
            if api_key_id is None or (routed := tenant_routed(b)) is None:
                return b.get(memory_id)
            return routed.get_owned(api_key_id, memory_id)

        for backend, memory in self._answers(BackendCall("get", call), {}):
            if memory is not None and memory.id != memory_id:
                _dropped(backend, "get", 1)
                continue
            if memory is not None:
                return memory if api_key_id is None or memory.api_key_id == api_key_id else None
        return None

    def get_by_key(self, api_key_id: str, key: str) -> Memory | None:
        """The memory of ``api_key_id`` with exactly ``key`` from the first backend that has it."""
        self._ensure_open()
        call = BackendCall("get_by_key", lambda b: b.get_by_key(api_key_id, key))
        for _, memory in self._answers(call, {}):
            if memory is not None:
                return memory
        return None

    def get_many(self, memory_ids: Sequence[str], *, api_key_id: str | None = None) -> dict[str, Memory]:
        """The memories among ``memory_ids`` that any backend holds (asked in order), by id; with
        ``api_key_id``, only that tenant's."""
        ids = list(dict.fromkeys(memory_ids))
        _check_ids(ids)
        self._ensure_open()
        found: dict[str, Memory] = {}
        if not ids:
            return found
        # Each backend is asked only for the ids the ones before it did not have.
        def fetch(b: MemoryBackend) -> dict[str, Memory]:
            wanted = [i for i in ids if i not in found]
            if api_key_id is None or (routed := tenant_routed(b)) is None:
                return b.get_many(wanted)
            return routed.get_many_owned(api_key_id, wanted)

        asked = set(ids)
        for backend, batch in self._answers(BackendCall("get_many", fetch), {}):
            # Another tenant's memories are left out; of the rest, one not asked for (or under another id) is
            # dropped and counted.
            foreign = 0
            for i, m in batch.items():
                if api_key_id is not None and m.api_key_id != api_key_id:
                    continue
                if i in asked and m.id == i:
                    found[i] = m
                else:
                    foreign += 1
            if foreign:
                _dropped(backend, "get_many", foreign)
            if len(found) == len(ids):
                break
        return found

    def list(self, filter: ListFilter) -> ListPage:
        """A page from the primary, or from the first fallback that answers when the primary cannot."""
        if not isinstance(filter, ListFilter):
            raise ValidationError("list: expected a ListFilter", [("filter", "type")])
        self._ensure_open()
        for backend, page in self._answers(BackendCall("list", lambda b: b.list(filter)), {}):
            return _owned_page(backend, page, filter.api_key_id)
        raise AssertionError("unreachable: _answers raises when no backend answers")

    def tenants(self) -> builtins.list[str]:
        """Every tenant holding memories, from the first backend that answers (fails over like list)."""
        self._ensure_open()
        for _, found in self._answers(BackendCall("tenants", lambda b: b.tenants()), {}):
            return found
        raise AssertionError("unreachable: _answers raises when no backend answers")

    def iter_all(self, api_key_id: str | None = None, batch: int = 500) -> Iterator[Memory]:
        """Every memory (of one tenant, or all), oldest first, page by page through :meth:`list` (so each
        page fails over like a list does). Export and reindexing should use this, not ``primary.iter_all``."""
        offset = 0
        while True:
            page = self.list(
                ListFilter(api_key_id=api_key_id, limit=batch, offset=offset, order_by="created_at", order_dir="asc")
            )
            yield from page.data
            offset += len(page.data)
            if not page.data or offset >= page.total:
                return

    def search(self, query: SearchQuery) -> ManagedSearch:
        """The first backend's search that answers; says which backend served and why not the primary."""
        if not isinstance(query, SearchQuery):
            raise ValidationError("search: expected a SearchQuery", [("query", "type")])
        self._ensure_open()
        errors: dict[str, BaseException] = {}
        for backend, raw in self._answers(BackendCall("search", lambda b: b.search(query)), errors):
            hits = [h for h in raw if h.memory.api_key_id == query.api_key_id]
            if len(hits) != len(raw):
                _dropped(backend, "search", len(raw) - len(hits))
            if backend is self.primary:
                return ManagedSearch(hits=builtins.list(hits), backend=backend.name)
            return ManagedSearch(hits=builtins.list(hits), backend=backend.name, fallback=True,
                                 error=self._skip_reason(errors))
        raise AssertionError("unreachable: _answers raises when no backend answers")

    # --- history --------------------------------------------------------------------------------------
    @property
    def keeps_history(self) -> bool:
        """Whether any backend keeps memory history (declares ``capabilities.history``)."""
        return any(b.capabilities.history for b in self.backends)

    def _history_keepers(self) -> builtins.list[MemoryBackend]:
        keepers = [b for b in self.backends if b.capabilities.history]
        for backend in keepers:
            if not isinstance(backend, MemoryHistory):
                raise PluginError(f"backend {backend.name!r} ({backend.type_name}) declares history but does not "
                                  "implement append_history / history / purge_history")
        return keepers

    def append_history(self, entries: Sequence[HistoryEntry]) -> bool:
        """Record ``entries`` once: on the first backend, in configured order (the primary first), that keeps
        history and takes the write. History is not replicated: a fallback that served writes during an
        outage keeps their entries, and :meth:`history` reads every backend that keeps history. Never raises
        for a backend (the change itself is already stored): a failure is logged; False when nothing took
        the entries."""
        batch = builtins.list(entries)
        if not batch or self._closed:
            return not batch
        errors = []
        for backend in self._history_keepers():
            try:
                # Bookkeeping, like access telemetry: only while the breaker is closed (a backend that is down
                # is skipped for the next keeper), and a failure never opens the breaker a real write depends on.
                # Not a tracked write: an entry landing late is harmless (idempotent by id, ordered by time).
                self._caller.call(backend, BackendCall("append_history", lambda b: _keeper(b).append_history(batch),
                                                       telemetry=True))
                return True
            except Exception as exc:
                errors.append(f"{backend.name}: {exc}")
        if errors:
            log.warning("memroute: %d history entr%s not recorded: %s", len(batch), "y" if len(batch) == 1 else
                        "ies", "; ".join(errors))
        return False

    def history(self, api_key_id: str, memory_id: str) -> builtins.list[HistoryEntry]:
        """The history of ``memory_id`` of ``api_key_id``, merged from every backend that keeps history and
        answers (by entry id), oldest first. Raises when backends keep history and none answers."""
        keepers = self._history_keepers()
        self._ensure_open()
        found: dict[str, HistoryEntry] = {}
        errors: dict[str, BaseException] = {}
        answered = False
        for backend in keepers:
            try:
                entries = self._caller.call(backend, BackendCall(
                    "history", lambda b: _keeper(b).history(api_key_id, memory_id)))
            except CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
                continue
            answered = True
            for entry in entries:
                if entry.api_key_id == api_key_id and entry.memory_id == memory_id:
                    found.setdefault(entry.id, entry)
                else:
                    _dropped(backend, "history", 1)
        if keepers and not answered:
            raise self._all_failed("history", errors)
        return sorted(found.values(), key=lambda e: e.at)

    def purge_history(self, api_key_id: str | None, *, before: datetime) -> int:
        """:meth:`~memroute.interfaces.MemoryHistory.purge_history` on every backend that keeps history and
        answers; the number of entries removed (summed)."""
        self._ensure_open()
        removed = 0
        for backend in self._history_keepers():
            try:
                removed += int(self._caller.call(backend, BackendCall(
                    "purge_history", lambda b: _keeper(b).purge_history(api_key_id, before=before))))
            except CLIENT_ERRORS:
                raise
            except Exception as exc:
                log.warning("memroute: purging history on %r failed: %s", backend.name, exc)
        return removed

    # --- capabilities ---------------------------------------------------------------------------------
    def reindex_markers(self) -> ReindexMarkers | None:
        """The primary's reindex markers (when it declares ``capabilities.reindex_markers``), called through
        the manager like every other backend call: breaker, operation timeout, worker thread. ``None`` when
        the primary keeps no markers (the indexer then keeps its own queue)."""
        primary = self.primary
        if not primary.capabilities.reindex_markers:
            return None
        if not isinstance(primary, ReindexMarkers):
            raise PluginError(f"backend {primary.name!r} ({primary.type_name}) declares reindex_markers but does "
                              "not implement pending_reindex / count_pending_reindex / mark_indexed / "
                              "mark_all_for_reindex")
        return _ManagedMarkers(self, primary)

    # --- access telemetry (memroute.routing.access) -----------------------------------------------------------
    def data_version(self, api_key_id: str) -> int | None:
        """The primary's data version of ``api_key_id`` (:class:`~memroute.interfaces.DataVersions`), or ``None``
        when there is none to trust: the primary keeps none, or it is not the backend that answers reads now
        (its breaker is not closed, or it owes replicated writes), or reading it failed. Never raises."""
        if self._closed or not self.primary.capabilities.data_versions:
            return None
        probe = getattr(self.primary, "data_version", None)
        if not callable(probe) or self.breaker(self.primary.name).state != "closed":
            return None
        try:
            if not self._in_sync(self.primary.name):
                return None
            return int(probe(api_key_id))
        except Exception:  # a locked or failing file: no version, so nothing is reused
            log.debug("memroute: reading the data version failed", exc_info=True)
            return None

    def _tracks_access(self) -> bool:
        return self.primary.capabilities.access_tracking

    def record_access(self, api_key_id: str, memory_ids: Iterable[str], at: datetime | None = None) -> None:
        """Count one access of each memory of ``api_key_id`` (``access_count``, ``last_accessed_at``): queued
        in memory and written to the primary in the background, coalesced; returns at once, never raises for
        the backend. A no-op when the primary does not declare ``capabilities.access_tracking``."""
        if self._closed or not self._tracks_access():
            return
        self._access.record(_check_id(api_key_id, "api_key_id"), memory_ids, at)

    def access_stats(self) -> dict[str, int]:
        """The access telemetry's counters (see :meth:`memroute.routing.access.AccessLog.stats`)."""
        return self._access.stats()

    def write_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess]) -> int:
        """Write one tenant's batch to the primary now (only the primary: the counts are its own, like the
        reference's), as a telemetry call: never while its breaker is open, never counted against it. The
        background writer calls this; so does the storage protocol's access route (another process's ``http``
        backend already batched). Returns the rows updated; 0 when the primary does not track access."""
        if not self._tracks_access():
            return 0
        primary = self.primary  # no open check: close() writes what is pending after it marks the manager closed
        if not isinstance(primary, AccessRecorder):
            raise PluginError(f"backend {primary.name!r} ({primary.type_name}) declares access_tracking but does "
                              "not implement record_access")
        batch = dict(accesses)
        recorder: AccessRecorder = primary
        call = BackendCall("record_access", lambda _b: recorder.record_access(api_key_id, batch), telemetry=True)
        return int(self._caller.call(primary, call))

    # --- the outbox replay ----------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Write the pending access telemetry, then drive the replay now until the outbox is empty or
        ``timeout`` seconds pass (``None``: 30 s; ``0``: one pass). Backoff and breakers are bypassed: a flush
        is an explicit "try now". True when the outbox is empty (a dropped telemetry batch does not count)."""
        if self._closed:
            return False
        if not self._initialized:
            self.initialize()
        self._access.drain()
        return self._replication.flush(timeout)

    # --- health ---------------------------------------------------------------------------------------
    def check_health(self) -> dict[str, HealthResult]:
        """Probe every backend now and feed the breakers (what the schedule runs). A backend that failed to
        initialize is initialized again first. Wakes the replay when a backend answers."""
        return self._monitor.check()

    def health(self) -> dict[str, Any]:
        """Probe every backend now; report each backend (with its breaker) and the outbox."""
        if self._closed:
            raise BackendUnavailableError("the memory manager is closed")
        return self._monitor.report(self.primary)


class _ManagedMarkers:
    """:class:`ReindexMarkers` of the primary, each call through the manager's breaker, timeout and runner.
    The flags live in the primary's own rows, so there is no failover: a primary that is down raises."""

    def __init__(self, manager: MemoryManager, primary: MemoryBackend) -> None:
        self._manager = manager
        self._primary = primary

    def _call(self, op: str, run: Callable[[ReindexMarkers], T]) -> T:
        self._manager._ensure_open()
        return self._manager._caller.call(self._primary, BackendCall(op, lambda b: run(_as_markers(b))))

    def pending_reindex(self, limit: int = 100, api_key_id: str | None = None) -> builtins.list[Memory]:
        return self._call("pending_reindex", lambda m: m.pending_reindex(limit, api_key_id))

    def count_pending_reindex(self, api_key_id: str | None = None) -> int:
        return self._call("count_pending_reindex", lambda m: m.count_pending_reindex(api_key_id))

    def mark_indexed(self, memories: Iterable[Memory | str]) -> int:
        batch = builtins.list(memories)
        return self._call("mark_indexed", lambda m: m.mark_indexed(batch))

    def mark_all_for_reindex(self) -> int:
        return self._call("mark_all_for_reindex", lambda m: m.mark_all_for_reindex())


def _keeper(backend: MemoryBackend) -> MemoryHistory:
    # Checked by MemoryManager._history_keepers before any call.
    return cast(MemoryHistory, backend)


def _as_markers(backend: MemoryBackend) -> ReindexMarkers:
    # Checked once by MemoryManager.reindex_markers (a runtime protocol's isinstance costs 10-40 us, on every
    # search's readiness count).
    return cast(ReindexMarkers, backend)


# --- re-checking what a backend returns ------------------------------------------------------------------
# A backend is trusted to store, not to enforce tenancy: a remote server that ignores the owner once
# returned tenant B's memories for list(api_key_id="A"), export("A") and add(api_key_id="A"). Every result is
# checked here, on every backend: foreign rows are dropped and logged; a write that returns another memory
# is that backend's failure (it counts against its breaker and the next backend is tried).

def _dropped(backend: MemoryBackend, op: str, count: int) -> None:
    log.warning("backend %r returned %d memor%s of another tenant (or id) for %s: dropped", backend.name, count,
                "y" if count == 1 else "ies", op)


def _owned_page(backend: MemoryBackend, page: ListPage, tenant: str | None) -> ListPage:
    if tenant is None:
        return page
    kept = tuple(m for m in page.data if m.api_key_id == tenant)
    if len(kept) == len(page.data):
        return page
    _dropped(backend, "list", len(page.data) - len(kept))
    return ListPage(data=kept, total=max(len(kept), page.total - (len(page.data) - len(kept))),
                    by_type=page.by_type)


def _created(backend: MemoryBackend, new: NewMemory, memory: Memory) -> Memory:
    if memory.api_key_id != new.api_key_id or memory.key != new.key:
        _dropped(backend, "create", 1)
        raise BackendError(f"backend {backend.name!r} answered create with another memory (tenant or key differ)",
                           backend=backend.name)
    return memory


def _created_then_noted(backend: MemoryBackend, news: Sequence[NewMemory], notes: Sequence[HistoryNote],
                        entries: builtins.list[HistoryEntry]) -> builtins.list[Memory | Exception]:
    """The adds on a backend that does not record history in its writes: what each replaced is read first, the
    writes made, and their entries put in ``entries`` (for :meth:`MemoryManager.append_history`)."""
    current: dict[tuple[str, str], Memory | None] = {}
    for new in news:
        slot = (new.api_key_id, new.key)
        if slot not in current:
            found = backend.get_by_key(*slot)
            current[slot] = found if found is not None and found.api_key_id == new.api_key_id else None
    outcomes = _created_many(backend, news) if backend.capabilities.batch_create else [
        _create_one(backend, new) for new in news]
    for new, note, outcome in zip(news, notes, outcomes, strict=True):
        if isinstance(outcome, Memory):
            slot = (new.api_key_id, new.key)
            entry = HistoryEntry.of_change(current[slot], outcome, actor=note.actor, event=note.event)
            if entry is not None:
                entries.append(entry)
            current[slot] = outcome  # a later add of the batch to the same key changes this one
    return outcomes


def _create_one(backend: MemoryBackend, new: NewMemory) -> Memory | Exception:
    try:
        return _created(backend, new, backend.create(new))
    except CLIENT_ERRORS as exc:
        return exc


def _created_many(backend: MemoryBackend, news: Sequence[NewMemory],
                  answer: Sequence[Memory | Exception] | None = None) -> builtins.list[Memory | Exception]:
    """Check a backend's answer to a batch of creates (``answer``; default: its ``create_many``)."""
    outcomes: builtins.list[Memory | Exception] = list(backend.create_many(news) if answer is None else answer)
    if len(outcomes) != len(news):
        raise BackendError(f"backend {backend.name!r} answered create_many of {len(news)} with {len(outcomes)} "
                           "outcomes", backend=backend.name)
    for new, outcome in zip(news, outcomes, strict=True):
        if isinstance(outcome, Memory):
            _created(backend, new, outcome)
        elif not isinstance(outcome, CLIENT_ERRORS):
            raise BackendError(f"backend {backend.name!r} answered create_many with {outcome!r}", backend=backend.name)
    return outcomes


def _updated(backend: MemoryBackend, memory_id: str, memory: Memory | None) -> Memory | None:
    if memory is not None and memory.id != memory_id:
        _dropped(backend, "update", 1)
        raise BackendError(f"backend {backend.name!r} answered update of {memory_id} with another memory",
                           backend=backend.name)
    return memory
