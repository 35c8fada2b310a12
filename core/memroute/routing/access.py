"""Access telemetry: ``access_count`` / ``last_accessed_at``, recorded off the request path in batches.

``augment`` (for the memories it injects) and ``search`` (for the memories it returns) hand their ids to the
manager's :class:`AccessLog`, which only adds them to an in-process map (one lock, no I/O) and returns. The
map coalesces: ten injections of one memory before the next write are one row update of ``+10``. A
background thread (every ``[manager] access_flush_interval_s``, sooner when the map fills up) and every
``flush()`` / ``close()`` hand what is pending to the primary, one backend call per tenant, through the
manager's caller (worker thread, operation timeout) as a *telemetry* call: made only while the primary's
breaker is closed and never counted against it.

Best effort by design, like the reference's ``recordMemoryAccess`` (which swallowed errors): a batch the
primary cannot take is logged and dropped (and counted in :meth:`AccessLog.stats`), never retried into an
unbounded backlog, and never raised into a request. What is not yet written when the process dies is lost;
counts are telemetry, not acknowledged data.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Final

from memroute.interfaces import MemoryAccess
from memroute.models import utcnow

__all__ = ["MAX_PENDING", "AccessLog"]

log = logging.getLogger("memroute.routing.access")

MAX_PENDING: Final = 10_000
"""Distinct (tenant, memory) pairs held between writes; accesses past it are dropped (and counted)."""
_WAKE_AT: Final = MAX_PENDING // 4
"""The background thread writes early once this many pairs are pending."""

Deliver = Callable[[str, Mapping[str, MemoryAccess]], object]


class AccessLog:
    """Pending accesses by tenant, and the loop that writes them. Thread-safe.

    ``deliver(api_key_id, accesses)`` writes one tenant's batch (the manager's call to the primary); it may
    raise: the batch is then dropped and counted.
    """

    def __init__(self, deliver: Deliver, *, interval_s: float = 1.0, max_pending: int = MAX_PENDING) -> None:
        self._deliver = deliver
        self.interval_s = interval_s
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._pending: dict[str, dict[str, MemoryAccess]] = {}
        self._size = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._counts = {"recorded": 0, "written": 0, "dropped": 0, "failed_batches": 0}

    def record(self, api_key_id: str, memory_ids: Iterable[str], at: datetime | None = None) -> None:
        """Count one access of each id (repeats in ``memory_ids`` count once: one injection is one access)."""
        stamp = at or utcnow()
        with self._lock:
            tenant = self._pending.setdefault(api_key_id, {})
            for memory_id in dict.fromkeys(memory_ids):
                seen = tenant.get(memory_id)
                if seen is None:
                    if self._size >= self._max_pending:
                        self._counts["dropped"] += 1
                        continue
                    self._size += 1
                    tenant[memory_id] = MemoryAccess(count=1, at=stamp)
                else:
                    tenant[memory_id] = MemoryAccess(count=seen.count + 1, at=max(seen.at, stamp))
                self._counts["recorded"] += 1
            if not tenant:
                del self._pending[api_key_id]
            if self._size >= _WAKE_AT:
                self._wake.set()

    def pending(self) -> int:
        """Distinct (tenant, memory) pairs not yet written."""
        with self._lock:
            return self._size

    def stats(self) -> dict[str, int]:
        """``recorded`` accesses, ``written`` rows, ``dropped`` accesses (queue full or a failed batch),
        ``failed_batches``, and what is ``pending``."""
        with self._lock:
            return {**self._counts, "pending": self._size}

    def drain(self) -> bool:
        """Write everything pending now, tenant by tenant. True when every batch was written."""
        with self._drain_lock:  # one writer at a time: the thread, a flush() and close() may meet here
            with self._lock:
                batches, self._pending, self._size = self._pending, {}, 0
            ok = True
            for tenant, accesses in batches.items():
                try:
                    written = self._deliver(tenant, accesses)
                except Exception as exc:  # telemetry never fails a caller; it is counted and logged
                    ok = False
                    with self._lock:
                        self._counts["failed_batches"] += 1
                        self._counts["dropped"] += sum(a.count for a in accesses.values())
                    log.warning("recording %d memory access(es) of tenant %r failed (dropped): %s",
                                len(accesses), tenant, exc)
                    continue
                with self._lock:
                    self._counts["written"] += written if isinstance(written, int) else len(accesses)
            return ok

    def run(self) -> None:
        """The background loop, until :meth:`stop`: write what is pending every ``interval_s`` seconds (or
        when the map fills up)."""
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self.pending():
                try:
                    self.drain()
                except Exception as exc:  # the thread must survive anything
                    log.warning("access telemetry pass failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
