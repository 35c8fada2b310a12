"""MemoryManager: routes every call to the primary backend with ordered fallbacks.

Writes are served by one backend and replicated to every other one through the durable
:class:`~memroute.outbox.Outbox`; reads fail over in order; a circuit breaker per backend skips a backend
that keeps failing; scheduled health checks close breakers again and wake the outbox replay. See
``docs/manager.md`` for the routing table and a failure walkthrough.

Ordering rule: a backend is *in sync* when the outbox holds nothing for it (and no abandoned write to it
is still running). Only an in-sync backend takes a direct write; a backend that is behind first has its
queue replayed (in order) or else receives the write through the outbox too. So an entry journaled during
an outage can never overwrite a newer direct write when it is replayed.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import attrs

from memroute.breaker import CircuitBreaker
from memroute.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    ConflictError,
    MemrouteError,
    NotFoundError,
    ValidationError,
)
from memroute.interfaces import MemoryBackend
from memroute.models import (
    BackendHit,
    HealthResult,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
)
from memroute.models import require_id as _check_id
from memroute.outbox import OP_DELETE, OP_PUT, Outbox, delete_payload, put_payload
from memroute.runner import BackendRunner
from memroute.settings import ManagerSettings

__all__ = ["CircuitOpenError", "ManagedSearch", "MemoryManager"]

log = logging.getLogger("memroute.manager")

_WRITE_OPS = frozenset({"create", "put", "put_many", "update", "delete"})
# Errors about the request, not the backend: they reach the caller and do not count against the breaker.
_CLIENT_ERRORS = (ValidationError, ConflictError, NotFoundError)
_DEFAULT_FLUSH_TIMEOUT_S = 30.0
_INLINE_CATCH_UP_MAX = 100
_REPLAY_BATCH = 200


@attrs.frozen(kw_only=True)
class ManagedSearch:
    """A backend search leg as the manager served it."""

    hits: list[BackendHit]
    backend: str
    fallback: bool = False
    error: str | None = None
    """Why the primary did not serve (when ``fallback``)."""


class CircuitOpenError(BackendUnavailableError):
    """The backend was not called: its circuit breaker is open (or it never initialized)."""


class MemoryManager:
    """Primary + ordered fallbacks, a durable replication outbox, circuit breakers and health checks.

    Thread-safe: call it from any number of threads. ``clock`` (wall-clock seconds) drives the breakers,
    the outbox backoff and ages; tests inject a fake one. ``replay_in_background=False`` leaves the outbox
    to :meth:`flush` (and write-time catch-up) so a test decides exactly when replay happens.
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
        self._by_name = {b.name: b for b in self.backends}
        self._breakers = {
            b.name: CircuitBreaker(self.settings.breaker_failures, self.settings.breaker_reset_s, self._clock)
            for b in self.backends
        }
        self._runners = {b.name: BackendRunner(b.name) for b in self.backends}
        self._delivery_locks = {b.name: threading.Lock() for b in self.backends}
        self._write_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._abandoned_writes: Counter[str] = Counter()
        self._ready: set[str] = set()
        self._initialized = False
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._replay_in_background = replay_in_background
        self.outbox = Outbox(outbox_path, prepare=prepare_connection, clock=self._clock)

    @property
    def backends(self) -> list[MemoryBackend]:
        """Primary first, then the fallbacks in order."""
        return [self.primary, *self.fallbacks]

    def breaker(self, name: str) -> CircuitBreaker:
        """The circuit breaker of one backend instance."""
        return self._breakers[name]

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
                error = self._initialize_backend(backend)
                if error is not None:
                    errors[backend.name] = error
            if not self._ready:
                error = self._all_failed("initialize", errors)
                self._closed = True  # unusable: release the outbox and whatever the backends opened
                self._release_resources()
                raise error
            self._initialized = True
            self._start_threads()

    def _initialize_backend(self, backend: MemoryBackend) -> BaseException | None:
        try:
            backend.initialize()
        except Exception as exc:
            log.warning("backend %r failed to initialize: %s", backend.name, exc)
            self._breakers[backend.name].record_failure(f"initialize failed: {exc}")
            return exc
        self._ready.add(backend.name)
        return None

    def _start_threads(self) -> None:
        if self._replay_in_background:
            replay = threading.Thread(target=self._replay_loop, name="memroute-outbox-replay", daemon=True)
            self._threads.append(replay)
            replay.start()
        if self.settings.health_interval_s > 0:
            health = threading.Thread(target=self._health_loop, name="memroute-health", daemon=True)
            self._threads.append(health)
            health.start()

    def close(self) -> None:
        """Stop the threads, try one last replay pass, close the backends and the outbox. Idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=self.settings.operation_timeout_s + 5)
        try:
            # Bounded: one pass, breakers and backoff respected, so a dead backend does not stall close().
            self._replay_pass(respect_backoff=True, force=False)
        except Exception as exc:
            log.warning("final outbox replay failed: %s", exc)
        self._release_resources()

    def _release_resources(self) -> None:
        for backend in self.backends:
            try:
                backend.close()
            except Exception as exc:
                log.warning("backend %r failed to close: %s", backend.name, exc)
        for runner in self._runners.values():
            runner.shutdown()
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

    # --- calling a backend ----------------------------------------------------------------------------
    def _call(self, backend: MemoryBackend, op: str, *args: Any, force: bool = False) -> Any:
        """Run ``backend.op(*args)`` under the breaker and the operation timeout.

        ``force`` skips the breaker check (an explicit flush or a health probe); the outcome still counts.
        """
        name = backend.name
        breaker = self._breakers[name]
        if name not in self._ready:
            raise CircuitOpenError(f"backend {name!r} is not initialized (see health())", backend=name)
        if not force and not breaker.allow():
            raise CircuitOpenError(
                f"backend {name!r} is skipped: circuit breaker open after {breaker.consecutive_failures} "
                f"failure(s) (last: {breaker.last_error})", backend=name,
            )
        timeout = self.settings.operation_timeout_s
        try:
            if backend.capabilities.bounded_latency:
                # A local backend bounds its own latency (SQLite's busy timeout): calling it on this thread
                # skips a worker-thread handoff that costs more than the write itself.
                result = getattr(backend, op)(*args)
            else:
                future = self._runners[name].submit(getattr(backend, op), args)
                result = future.result(timeout=timeout)
        except FutureTimeout:
            if not future.cancel() and op in _WRITE_OPS:
                self._track_abandoned(name, future)
            error = BackendUnavailableError(f"backend {name!r}: {op} timed out after {timeout:g}s", backend=name)
            breaker.record_failure(str(error))
            raise error from None
        except _CLIENT_ERRORS:
            breaker.record_success()
            raise
        except MemrouteError as exc:
            breaker.record_failure(str(exc))
            raise
        except Exception as exc:
            breaker.record_failure(str(exc))
            raise BackendError(f"backend {name!r}: {op} failed: {exc}", backend=name) from exc
        breaker.record_success()
        return result

    def _track_abandoned(self, name: str, future: Future[Any]) -> None:
        # A write still running after its timeout could land after newer state: hold the target's replay
        # (and direct writes) until it finishes.
        with self._state_lock:
            self._abandoned_writes[name] += 1

        def done(_f: Future[Any]) -> None:
            with self._state_lock:
                self._abandoned_writes[name] -= 1
            self._wake.set()

        future.add_done_callback(done)

    def _abandoned(self, name: str) -> int:
        with self._state_lock:
            return self._abandoned_writes[name]

    def _in_sync(self, name: str) -> bool:
        return self.outbox.pending(name) == 0 and self._abandoned(name) == 0

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
    def _write(self, op: str, *args: Any) -> tuple[MemoryBackend, Any]:
        """Serve a write on the first in-sync backend that answers; else catch one up and use it.

        Caller holds ``_write_lock``.
        """
        errors: dict[str, BaseException] = {}
        behind = []
        for backend in self.backends:
            pending = self.outbox.pending(backend.name)
            if 0 < pending <= _INLINE_CATCH_UP_MAX:
                # A short backlog is replayed right here (no new entries can join it: we hold the write
                # lock), so a recovered backend takes its place again even under a steady write load.
                self._deliver(backend.name, respect_backoff=True, force=False, wait=False)
            if not self._in_sync(backend.name):
                behind.append(backend)
                errors[backend.name] = BackendUnavailableError(
                    f"backend {backend.name!r} is catching up ({self.outbox.pending(backend.name)} pending "
                    f"outbox entries)", backend=backend.name,
                )
                continue
            try:
                return backend, self._call(backend, op, *args)
            except _CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
        for backend in behind:
            if not self._deliver(backend.name, respect_backoff=False, force=False):
                head = self.outbox.head(backend.name)
                if head is not None and head.last_error:
                    errors[backend.name] = BackendUnavailableError(
                        f"{errors[backend.name]}; replaying to it failed: {head.last_error}", backend=backend.name
                    )
                continue
            try:
                return backend, self._call(backend, op, *args)
            except _CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
        raise self._all_failed(op, errors)

    def _journal(self, served: MemoryBackend, op: str, payload: Callable[[], dict[str, Any]]) -> None:
        """Owe ``op`` to every backend except the one that served, durably, before acknowledging. ``payload``
        is built only when some backend is owed it (a lone primary owes nothing)."""
        targets = [b.name for b in self.backends if b is not served]
        if not targets:
            return
        body = payload()
        self.outbox.add((name, op, body) for name in targets)
        self._wake.set()

    def create(self, new: NewMemory) -> Memory:
        """Upsert on ``(api_key_id, key)``; replicated to every other backend through the outbox."""
        if not isinstance(new, NewMemory):
            raise ValidationError("create: expected a NewMemory", [("new", "type")])
        self._ensure_open()
        with self._write_lock:
            served, memory = self._write("create", new)
            self._journal(served, OP_PUT, lambda: put_payload(memory))
        return memory

    def put(self, memory: Memory) -> None:
        """Store exactly ``memory`` (import, restore); replicated like a create."""
        if not isinstance(memory, Memory):
            raise ValidationError("put: expected a Memory", [("memory", "type")])
        self._ensure_open()
        with self._write_lock:
            served, _ = self._write("put", memory)
            self._journal(served, OP_PUT, lambda: put_payload(memory))

    def put_many(self, memories: Sequence[Memory]) -> int:
        """``put`` a batch in one backend call (bulk import), replicated entry by entry through the outbox."""
        batch = list(memories)
        if not all(isinstance(m, Memory) for m in batch):
            raise ValidationError("put_many: expected Memory objects", [("memories", "type")])
        if not batch:
            return 0
        self._ensure_open()
        with self._write_lock:
            served, count = self._write("put_many", batch)
            self.outbox.add(
                (b.name, OP_PUT, put_payload(m)) for b in self.backends if b is not served for m in batch
            )
            self._wake.set()
        return int(count)

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        """Apply ``patch``; the updated memory (replicated as a ``put``), or ``None`` when there is no such id."""
        _check_id(memory_id)
        if not isinstance(patch, MemoryPatch):
            raise ValidationError("update: expected a MemoryPatch", [("patch", "type")])
        self._ensure_open()
        with self._write_lock:
            served, updated = self._write("update", memory_id, patch)
            if updated is not None:
                self._journal(served, OP_PUT, lambda: put_payload(updated))
        return updated

    def delete(self, memory_id: str) -> bool:
        """Delete by id (replicated to every other backend); ``False`` when there was no such id."""
        _check_id(memory_id)
        self._ensure_open()
        with self._write_lock:
            served, deleted = self._write("delete", memory_id)
            if deleted:
                self._journal(served, OP_DELETE, lambda: delete_payload(memory_id))
        return bool(deleted)

    # --- reads ----------------------------------------------------------------------------------------
    def _read_order(self) -> Iterator[MemoryBackend]:
        """In-sync backends in configured order, then those still catching up (after one try to catch up)."""
        behind = []
        for backend in self.backends:
            if self._in_sync(backend.name):
                yield backend
            else:
                behind.append(backend)
        for backend in behind:
            self._deliver(backend.name, respect_backoff=True, force=False, wait=False)
            yield backend

    def _skip_reason(self, errors: dict[str, BaseException]) -> str | None:
        error = errors.get(self.primary.name)
        if error is not None:
            return str(error)
        pending = self.outbox.pending(self.primary.name)
        reason = f"primary {self.primary.name!r} is catching up ({pending} pending outbox entries)"
        breaker = self._breakers[self.primary.name]
        if breaker.state != "closed":
            reason += f"; circuit breaker {breaker.state} (last error: {breaker.last_error})"
        return reason

    def get(self, memory_id: str) -> Memory | None:
        """The memory from the first backend that has it (primary first; also when the primary raises)."""
        _check_id(memory_id)
        self._ensure_open()
        errors: dict[str, BaseException] = {}
        answered = False
        for backend in self._read_order():
            if answered and not self._in_sync(backend.name):
                break  # an in-sync backend said "no such id": a lagging one may still hold a deleted memory
            try:
                memory = self._call(backend, "get", memory_id)
            except _CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
                continue
            if memory is not None:
                return memory
            answered = True
        if answered:
            return None
        raise self._all_failed("get", errors)

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories among ``memory_ids`` that any backend holds (asked in order), by id."""
        ids = list(dict.fromkeys(memory_ids))
        for memory_id in ids:
            _check_id(memory_id)
        self._ensure_open()
        found: dict[str, Memory] = {}
        if not ids:
            return found
        errors: dict[str, BaseException] = {}
        answered = False
        for backend in self._read_order():
            missing = [i for i in ids if i not in found]
            if not missing or (answered and not self._in_sync(backend.name)):
                break
            try:
                found.update(self._call(backend, "get_many", missing))
            except _CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
                continue
            answered = True
        if not answered:
            raise self._all_failed("get_many", errors)
        return found

    def list(self, filter: ListFilter) -> ListPage:
        """A page from the primary, or from the first fallback that answers when the primary cannot."""
        if not isinstance(filter, ListFilter):
            raise ValidationError("list: expected a ListFilter", [("filter", "type")])
        self._ensure_open()
        errors: dict[str, BaseException] = {}
        for backend in self._read_order():
            try:
                return self._call(backend, "list", filter)
            except _CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
        raise self._all_failed("list", errors)

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
        for backend in self._read_order():
            try:
                hits = self._call(backend, "search", query)
            except _CLIENT_ERRORS:
                raise
            except Exception as exc:
                errors[backend.name] = exc
                continue
            if backend is self.primary:
                return ManagedSearch(hits=builtins.list(hits), backend=backend.name)
            return ManagedSearch(hits=builtins.list(hits), backend=backend.name, fallback=True,
                                 error=self._skip_reason(errors))
        raise self._all_failed("search", errors)

    # --- the outbox replay ----------------------------------------------------------------------------
    def _deliver(
        self, target: str, *, respect_backoff: bool, force: bool, wait: bool = True, limit: int | None = None
    ) -> bool:
        """Deliver ``target``'s entries in order until one fails; True when its queue is empty.

        ``wait=False`` (the request paths) gives up at once when another thread is delivering to ``target``:
        a caller must not queue behind a delivery that may be waiting out a hung backend's timeout.
        ``limit`` caps the entries delivered in this call (the lock is then released).
        """
        backend = self._by_name.get(target)
        if backend is None or self._abandoned(target):
            return self.outbox.pending(target) == 0
        lock = self._delivery_locks[target]
        if not lock.acquire(blocking=wait):
            return False
        try:
            delivered = 0
            while limit is None or delivered < limit:
                entry = self.outbox.head(target)
                if entry is None:
                    return True
                if respect_backoff and entry.next_attempt_at > self._clock():
                    return False
                try:
                    if entry.op == OP_PUT:
                        self._call(backend, "put", entry.memory(), force=force)
                    else:
                        self._call(backend, "delete", entry.memory_id, force=force)
                except CircuitOpenError:
                    return False
                except Exception as exc:
                    delay = min(self.settings.retry_base_s * 2 ** entry.attempts, self.settings.retry_max_s)
                    self.outbox.record_failure(entry, str(exc), self._clock() + delay)
                    log.info("outbox entry %d for %r failed (attempt %d): %s",
                             entry.id, target, entry.attempts + 1, exc)
                    return False
                self.outbox.remove(entry)
                delivered += 1
            return self.outbox.pending(target) == 0
        finally:
            lock.release()

    def _replay_pass(self, *, respect_backoff: bool, force: bool) -> None:
        for target in self.outbox.targets():
            if target in self._by_name:
                self._deliver(target, respect_backoff=respect_backoff, force=force)

    def _background_pass(self) -> None:
        """One pass of the replay thread. Delivers in batches; when a healthy target's backlog is short
        but writers keep adding to it, the rest is delivered under the write lock, so the target catches
        up (and a recovered primary serves again) even under a steady write load."""
        for target in self.outbox.targets():
            if target not in self._by_name or self._stop.is_set():
                continue
            if self._deliver(target, respect_backoff=True, force=False, limit=_REPLAY_BATCH):
                continue
            head = self.outbox.head(target)
            healthy = self._breakers[target].state == "closed" and head is not None and head.attempts == 0
            if healthy and self.outbox.pending(target) <= _INLINE_CATCH_UP_MAX:
                with self._write_lock:
                    self._deliver(target, respect_backoff=True, force=False)

    def _replay_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._background_pass()
            except Exception as exc:  # the thread must survive anything (a closed outbox, a bad entry)
                log.warning("outbox replay pass failed: %s", exc)
            # New entries and recoveries set _wake; the timeout re-checks backoff and half-open breakers.
            self._wake.wait(0.1 if self.outbox.depth() else 1.0)

    def flush(self, timeout: float | None = None) -> bool:
        """Drive the replay now until the outbox is empty or ``timeout`` seconds pass (``None``: 30 s;
        ``0``: one pass). Backoff and breakers are bypassed: a flush is an explicit "try now".
        True when the outbox is empty."""
        if self._closed:
            return False
        if not self._initialized:
            self.initialize()
        deadline = time.monotonic() + (_DEFAULT_FLUSH_TIMEOUT_S if timeout is None else max(timeout, 0.0))
        pause = 0.01
        while True:
            self._replay_pass(respect_backoff=False, force=True)
            if self.outbox.depth() == 0:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.25)

    # --- health ---------------------------------------------------------------------------------------
    def check_health(self) -> dict[str, HealthResult]:
        """Probe every backend now and feed the breakers (what the schedule runs). A backend that failed to
        initialize is initialized again first. Wakes the replay when a backend answers."""
        results: dict[str, HealthResult] = {}
        for backend in self.backends:
            results[backend.name] = self._probe(backend)
        if any(r.ok for r in results.values()):
            self._wake.set()
        return results

    def _probe(self, backend: MemoryBackend) -> HealthResult:
        name = backend.name
        breaker = self._breakers[name]
        started = time.perf_counter()
        init_error = None if name in self._ready else self._initialize_backend(backend)
        if init_error is not None:
            result = HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000,
                                  error=f"initialize failed: {init_error}")
        else:
            future = self._runners[name].submit(backend.health, ())
            try:
                result = future.result(timeout=self.settings.operation_timeout_s)
            except FutureTimeout:
                future.cancel()
                result = HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000,
                                      error=f"health check timed out after {self.settings.operation_timeout_s:g}s")
            except Exception as exc:
                result = HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000, error=str(exc))
        if result.ok:
            breaker.record_success()
        else:
            breaker.record_failure(result.error or "health check failed")
        return result

    def _health_loop(self) -> None:
        while not self._stop.wait(self.settings.health_interval_s):
            try:
                self.check_health()
            except Exception as exc:
                log.warning("scheduled health check failed: %s", exc)

    def health(self) -> dict[str, Any]:
        """Probe every backend now; report each backend (with its breaker) and the outbox."""
        if self._closed:
            raise BackendUnavailableError("the memory manager is closed")
        results = self.check_health()
        backends = []
        for backend in self.backends:
            result = results[backend.name]
            backends.append({
                "name": backend.name,
                "type": backend.type_name,
                "role": "primary" if backend is self.primary else "fallback",
                "ok": result.ok,
                "latency_ms": round(result.latency_ms, 3),
                "error": result.error,
                "breaker": self._breakers[backend.name].state,
                "pending": self.outbox.pending(backend.name),
                "abandoned_writes": self._abandoned(backend.name),
            })
        return {"backends": backends, "outbox": self.outbox.stats()}

