"""Health checks: probe every backend (on a schedule and on demand), feed the breakers, report.

A probe is the backend's own :meth:`~memroute.interfaces.MemoryBackend.health`, run on the backend's
worker thread under the operation timeout; a backend that failed to initialize is initialized again first.
A good probe closes the backend's breaker at once and wakes the outbox replay, so a recovered backend
catches up without waiting for the next write. Timing is :meth:`HealthResult.timed`'s, as everywhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendUnavailableError
from memroute.interfaces import MemoryBackend
from memroute.models import HealthResult
from memroute.routing.calls import BackendCaller
from memroute.routing.replication import Replicator

__all__ = ["HealthMonitor"]

log = logging.getLogger("memroute.routing.manager")


class HealthMonitor:
    """Probes ``backends`` (the primary first) and reports them with their breakers and outbox queues."""

    def __init__(
        self,
        backends: Sequence[MemoryBackend],
        caller: BackendCaller,
        replicator: Replicator,
        settings: ManagerSettings,
    ) -> None:
        self._backends = list(backends)
        self._caller = caller
        self._replicator = replicator
        self._settings = settings
        self._stop = threading.Event()

    def check(self) -> dict[str, HealthResult]:
        """Probe every backend now and feed the breakers (what the schedule runs). Wakes the replay when a
        backend answers."""
        results = {backend.name: self.probe(backend) for backend in self._backends}
        if any(r.ok for r in results.values()):
            self._replicator.wake()
        return results

    def probe(self, backend: MemoryBackend) -> HealthResult:
        """One backend's probe; its outcome is recorded by the backend's breaker."""
        name = backend.name
        timeout = self._settings.operation_timeout_s

        def run() -> HealthResult:
            if not self._caller.is_ready(name):
                error = self._caller.initialize(backend)
                if error is not None:
                    raise BackendUnavailableError(f"initialize failed: {error}", backend=name)
            future = self._caller.runner(name).submit(backend.health, ())
            try:
                result: HealthResult = future.result(timeout=timeout)
            except FutureTimeout:
                future.cancel()
                raise BackendUnavailableError(f"health check timed out after {timeout:g}s", backend=name) from None
            return result

        result = HealthResult.timed(run)
        breaker = self._caller.breaker(name)
        if result.ok:
            breaker.record_success()
        else:
            breaker.record_failure(result.error or "health check failed")
        return result

    def run(self) -> None:
        """The schedule: a check every ``health_interval_s`` until :meth:`stop`."""
        while not self._stop.wait(self._settings.health_interval_s):
            try:
                self.check()
            except Exception as exc:
                log.warning("scheduled health check failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()

    def report(self, primary: MemoryBackend) -> dict[str, Any]:
        """Probe every backend now; report each backend (with its breaker) and the outbox."""
        results = self.check()
        outbox = self._replicator.outbox
        backends = []
        for backend in self._backends:
            result = results[backend.name]
            backends.append({
                "name": backend.name,
                "type": backend.type_name,
                "role": "primary" if backend is primary else "fallback",
                "ok": result.ok,
                "latency_ms": round(result.latency_ms, 3),
                "error": result.error,
                "breaker": self._caller.breaker(backend.name).state,
                "pending": outbox.pending(backend.name),
                "abandoned_writes": self._caller.abandoned(backend.name),
            })
        return {"backends": backends, "outbox": outbox.stats()}
