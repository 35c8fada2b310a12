"""Scheduled maintenance while ``memroute serve`` runs, done by one process of the deployment at a time.

Two jobs, each a ``prune_all`` of the service (expired memories, memories past ``[memory] delete_after_days``
when an operator configured it, and typed decay when it is enabled; the retrieval window deletes nothing):

- ``prune`` every ``[server] maintenance_interval_s`` (default an hour; 0 disables);
- ``decay`` every ``[memory] typed_decay_sweep_interval`` seconds (``MEMORY_TYPED_DECAY_SWEEP_INTERVAL``) when
  ``typed_decay_enabled`` (the reference's periodic typed-decay sweep).

Every process runs the same small loop; a job is due when its last run (kept in the shared state store) is
older than its interval, and only the process that takes the job's lease runs it, so workers and hosts never
prune twice. No job runs at start-up: the first run comes ``[server] maintenance_first_delay_s`` after it (an
hour by default), so a server opened on an imported or restored database gives its operator time to look. Every
run logs how many memories of how many tenants it deleted. The last run and its result are in the state store,
which ``GET /api/memory/engine-status`` shows.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Any

from memroute.config.settings import ServerSettings
from memroute.deployment.state import lease_holder_id
from memroute.models import utcnow
from memroute.server.wire import jsonable

__all__ = ["Maintenance"]

log = logging.getLogger("memroute.server")

_NAMESPACE = "maintenance"
_LEASE_TTL_S = 600.0
"""How long a lease protects a running job; a process that dies mid-job frees it after this."""


class Maintenance:
    """The scheduler thread of one server process."""

    def __init__(self, mem: Any, settings: ServerSettings) -> None:
        self.mem = mem
        self.settings = settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._not_before = time.time() + settings.maintenance_first_delay_s
        """No job runs before this (epoch seconds): never at start-up."""
        # Per scheduler, not per process: two services in one process (tests, an embedding app) are two holders.
        self.holder = f"{lease_holder_id()}:{secrets.token_hex(3)}"

    def jobs(self) -> dict[str, float]:
        """Enabled jobs and their intervals in seconds."""
        jobs: dict[str, float] = {}
        if self.settings.maintenance_interval_s > 0:
            jobs["prune"] = float(self.settings.maintenance_interval_s)
        memory = self.mem.memory_settings()
        if memory.typed_decay_enabled and memory.typed_decay_sweep_interval > 0:
            jobs["decay"] = float(memory.typed_decay_sweep_interval)
        return jobs

    def start(self) -> None:
        if self._thread is not None or not (self.settings.maintenance_interval_s > 0
                                            or self.mem.settings.memory.typed_decay_sweep_interval > 0):
            return
        self._thread = threading.Thread(target=self._loop, name="memroute-maintenance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def last_runs(self) -> dict[str, Any]:
        """Each job's last run: ``{ran_at, ok, duration_ms, result | error, by}``, plus its interval."""
        runs: dict[str, Any] = {}
        for name, interval in self.jobs().items():
            runs[name] = {"interval_s": interval, **(self.mem.state.get_value(_NAMESPACE, name) or {"ran_at": None})}
        return runs

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                jobs = self.jobs()
                for name, interval in jobs.items():
                    if self._stop.is_set():
                        return
                    self.run_if_due(name, interval)
                poll = min([5.0, *(interval / 4 for interval in jobs.values())]) if jobs else 5.0
            except Exception:  # the scheduler survives a failing store; the next tick retries
                log.exception("maintenance tick failed")
                poll = 5.0
            self._stop.wait(max(poll, 0.05))

    def _due(self, name: str, interval: float) -> bool:
        if time.time() < self._not_before:
            return False
        last = self.mem.state.get_value(_NAMESPACE, name) or {}
        return time.time() - float(last.get("ran_at_epoch", 0)) >= interval

    def run_if_due(self, name: str, interval: float) -> bool:
        """Run job ``name`` when it is due and this process wins its lease; True when it ran here."""
        if not self._due(name, interval):
            return False
        holder = self.holder
        state = self.mem.state
        if not state.try_lease(f"maintenance:{name}", holder, _LEASE_TTL_S):
            return False
        try:
            if not self._due(name, interval):  # another process finished it while we took the lease
                return False
            started = time.perf_counter()
            record: dict[str, Any] = {"ran_at": utcnow().isoformat(), "ran_at_epoch": time.time(), "by": holder}
            try:
                report = self.mem.prune_all()
                log.info("maintenance job %s: deleted %d memories of %d tenants (%s)", name, report.deleted,
                         report.tenants, ", ".join(f"{k} {v}" for k, v in report.reasons.items()))
                result = jsonable(report)
                record.update(ok=True, result=result.to_dict() if hasattr(result, "to_dict") else result)
            except Exception as exc:
                log.warning("maintenance job %s failed: %s", name, exc)
                record.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            record["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
            state.put_value(_NAMESPACE, name, record)
            return True
        finally:
            state.release_lease(f"maintenance:{name}", holder)
