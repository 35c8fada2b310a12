"""A fault-injecting wrapper around any :class:`~memroute.interfaces.MemoryBackend`, for failover tests.

``FaultyBackend(inner)`` behaves exactly like ``inner`` until told otherwise::

    faulty = FaultyBackend(SqliteBackend(...))
    faulty.fail()                      # every operation raises BackendUnavailableError
    faulty.fail("create", "update")    # only these operations fail
    faulty.hang("search")              # search blocks until release() / recover() (or hang_timeout_s)
    faulty.recover()                   # back to normal; releases hung calls
    faulty.calls["create"]             # how many times create was called (faulted calls included)

Operation names are the backend's method names: ``create``, ``put``, ``get``, ``get_many``, ``update``,
``delete``, ``list``, ``search``, ``health``, ``iter_all``, ``record_access`` (passed through when ``inner``
declares ``access_tracking``). A faulted ``health`` reports ``ok=False``
(or hangs) instead of raising, as a real probe would.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs

from memroute.errors import BackendUnavailableError
from memroute.interfaces import AccessRecorder, MemoryAccess, MemoryBackend, MemoryHistory
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

__all__ = ["FaultyBackend", "ManualClock"]

OPERATIONS: Final = frozenset(
    {"create", "put", "get", "get_many", "update", "delete", "list", "search", "health", "iter_all",
     "record_access", "append_history", "history", "purge_history"}
)


class FaultyBackend(MemoryBackend):
    """Wraps ``inner``; fails, hangs or recovers on command, per operation. Thread-safe."""

    def __init__(self, inner: MemoryBackend, *, name: str | None = None, hang_timeout_s: float = 10.0) -> None:
        super().__init__(name or inner.name)
        self.inner = inner
        self.type_name = inner.type_name
        # A fault injector can hang on command, so it never claims the inner backend's bounded latency; its faults
        # strike one create at a time, so it never claims a one-transaction create_many either.
        self.capabilities = attrs.evolve(inner.capabilities, bounded_latency=False, reindex_markers=False,
                                         batch_create=False)
        self.hang_timeout_s = hang_timeout_s
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._failing: frozenset[str] = frozenset()
        self._hanging: frozenset[str] = frozenset()
        self._error = "injected fault"
        self._release = threading.Event()
        self._hung_now = 0
        self._hung_changed = threading.Condition(self._lock)

    # --- commands -------------------------------------------------------------------------------------
    def fail(self, *operations: str, message: str = "injected fault") -> None:
        """Make ``operations`` (all when none given) raise :class:`BackendUnavailableError`."""
        with self._lock:
            self._failing = self._select(operations)
            self._error = message

    def hang(self, *operations: str) -> None:
        """Make ``operations`` (all when none given) block until :meth:`release` or :meth:`recover`."""
        with self._lock:
            self._release.clear()
            self._hanging = self._select(operations)

    def release(self) -> None:
        """Let calls that are hanging now continue (they then run normally); new calls still hang."""
        with self._lock:
            old, self._release = self._release, threading.Event()
        old.set()

    def recover(self) -> None:
        """Back to normal: no failures, no hangs, hung calls released."""
        with self._lock:
            self._failing = frozenset()
            self._hanging = frozenset()
            old, self._release = self._release, threading.Event()
        old.set()

    def reset_calls(self) -> None:
        with self._lock:
            self.calls.clear()

    @property
    def hung_calls(self) -> int:
        """Calls blocked in a hang right now."""
        with self._lock:
            return self._hung_now

    def wait_for_hung(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` calls are hanging (tests use it to sequence threads)."""
        deadline = time.monotonic() + timeout
        with self._hung_changed:
            while self._hung_now < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._hung_changed.wait(remaining)
            return True

    @staticmethod
    def _select(operations: Iterable[str]) -> frozenset[str]:
        chosen = frozenset(operations) or OPERATIONS
        unknown = chosen - OPERATIONS
        if unknown:
            raise ValueError(f"unknown operation(s): {', '.join(sorted(unknown))}")
        return chosen

    # --- the fault gate -------------------------------------------------------------------------------
    def _enter(self, operation: str) -> None:
        with self._lock:
            self.calls[operation] += 1
            hanging = operation in self._hanging
            release = self._release
        if hanging:
            with self._hung_changed:
                self._hung_now += 1
                self._hung_changed.notify_all()
            try:
                released = release.wait(self.hang_timeout_s)
            finally:
                with self._hung_changed:
                    self._hung_now -= 1
                    self._hung_changed.notify_all()
            if not released:
                raise BackendUnavailableError(f"{self.name}: {operation} hung (injected)", backend=self.name)
        with self._lock:
            failing = operation in self._failing
            message = self._error
        if failing:
            raise BackendUnavailableError(f"{self.name}: {operation} failed: {message}", backend=self.name)

    # --- the backend surface --------------------------------------------------------------------------
    def initialize(self) -> None:
        self.inner.initialize()

    def close(self) -> None:
        self.recover()
        self.inner.close()

    def create(self, new: NewMemory) -> Memory:
        self._enter("create")
        return self.inner.create(new)

    def put(self, memory: Memory) -> None:
        self._enter("put")
        self.inner.put(memory)

    def get(self, memory_id: str) -> Memory | None:
        self._enter("get")
        return self.inner.get(memory_id)

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        self._enter("get_many")
        return self.inner.get_many(memory_ids)

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        self._enter("update")
        return self.inner.update(memory_id, patch)

    def delete(self, memory_id: str) -> bool:
        self._enter("delete")
        return self.inner.delete(memory_id)

    def list(self, filter: ListFilter) -> ListPage:
        self._enter("list")
        return self.inner.list(filter)

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        self._enter("search")
        return self.inner.search(query)

    def record_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess]) -> int:
        self._enter("record_access")
        inner = self.inner
        if not isinstance(inner, AccessRecorder):
            raise BackendUnavailableError(f"{inner.name!r} records no access", backend=self.name)
        return inner.record_access(api_key_id, accesses)

    def _history(self) -> MemoryHistory:
        inner = self.inner
        if not isinstance(inner, MemoryHistory):
            raise BackendUnavailableError(f"{inner.name!r} keeps no history", backend=self.name)
        return inner

    def append_history(self, entries: Sequence[HistoryEntry]) -> None:
        self._enter("append_history")
        self._history().append_history(entries)

    def history(self, api_key_id: str, memory_id: str) -> builtins.list[HistoryEntry]:
        self._enter("history")
        return self._history().history(api_key_id, memory_id)

    def purge_history(self, api_key_id: str | None, *, before: datetime) -> int:
        self._enter("purge_history")
        return self._history().purge_history(api_key_id, before=before)

    def iter_all(self, api_key_id: str | None = None, batch: int = 500) -> Iterable[Memory]:
        self._enter("iter_all")
        return self.inner.iter_all(api_key_id, batch)

    def health(self) -> HealthResult:
        def probe() -> HealthResult:
            self._enter("health")
            return self.inner.health()

        return HealthResult.timed(probe)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "name": self.name, "faulty": True}


class ManualClock:
    """A clock tests move by hand: pass ``clock=ManualClock()`` to the manager, then ``advance(seconds)``
    instead of sleeping through breaker resets and outbox backoff. Starts at a fixed wall-clock epoch."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
