"""Calling one backend: a typed call, under the backend's circuit breaker and the operation timeout.

Every call the manager, the replay and the health checks make to a storage backend goes through
:meth:`BackendCaller.call` with a :class:`BackendCall` - a name for errors and a callable that takes the
backend (``BackendCall("get", lambda b: b.get(memory_id))``) - so the hop is typed end to end: no method
looked up by its name.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic, TypeVar

import attrs

from memroute.config.settings import ManagerSettings
from memroute.errors import (
    BackendError,
    BackendUnavailableError,
    ConflictError,
    MemrouteError,
    NotFoundError,
    ValidationError,
)
from memroute.interfaces import MemoryBackend
from memroute.routing.breaker import CircuitBreaker
from memroute.routing.runner import BackendRunner

__all__ = ["CLIENT_ERRORS", "BackendCall", "BackendCaller", "CircuitOpenError"]

log = logging.getLogger("memroute.routing.manager")

T = TypeVar("T")

# Errors about the request, not the backend: they reach the caller and do not count against the breaker.
CLIENT_ERRORS = (ValidationError, ConflictError, NotFoundError)


class CircuitOpenError(BackendUnavailableError):
    """The backend was not called: its circuit breaker is open (or it never initialized)."""


@attrs.frozen
class BackendCall(Generic[T]):
    """One typed call to a backend: the operation's name (for errors) and what to run on the backend."""

    op: str
    run: Callable[[MemoryBackend], T]
    writes: bool = attrs.field(default=False, kw_only=True)
    """A write still running after its timeout could land after newer state, so the caller tracks it
    (see :meth:`BackendCaller.abandoned`)."""
    timeout_s: float | None = attrs.field(default=None, kw_only=True)
    """This call's timeout; ``None``: ``operation_timeout_s``. A bulk call scales it with its size."""
    telemetry: bool = attrs.field(default=False, kw_only=True)
    """Best-effort bookkeeping (access counts): made only while the breaker is closed, and its outcome never
    feeds the breaker, so a failing telemetry write can neither open a breaker nor take a half-open probe."""


class BackendCaller:
    """The breakers, worker threads and initialization state of a set of backends, and the one way to call
    one of them. ``on_settled`` runs when an abandoned write finally finishes (the replay waits for that)."""

    def __init__(
        self,
        backends: Sequence[MemoryBackend],
        settings: ManagerSettings,
        clock: Callable[[], float],
        on_settled: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self._breakers = {
            b.name: CircuitBreaker(settings.breaker_failures, settings.breaker_reset_s, clock) for b in backends
        }
        self._runners = {b.name: BackendRunner(b.name) for b in backends}
        self._lock = threading.Lock()
        self._abandoned_writes: Counter[str] = Counter()
        self._ready: set[str] = set()
        self._on_settled = on_settled

    def breaker(self, name: str) -> CircuitBreaker:
        return self._breakers[name]

    def runner(self, name: str) -> BackendRunner:
        return self._runners[name]

    def is_ready(self, name: str) -> bool:
        """True once the backend initialized."""
        return name in self._ready

    def any_ready(self) -> bool:
        return bool(self._ready)

    def initialize(self, backend: MemoryBackend) -> BaseException | None:
        """Initialize ``backend``; the error (also recorded by its breaker) when it fails, else ``None``."""
        try:
            backend.initialize()
        except Exception as exc:
            log.warning("backend %r failed to initialize: %s", backend.name, exc)
            self._breakers[backend.name].record_failure(f"initialize failed: {exc}")
            return exc
        self._ready.add(backend.name)
        return None

    def call(self, backend: MemoryBackend, call: BackendCall[T], *, force: bool = False) -> T:
        """Run ``call`` on ``backend`` under the breaker and the operation timeout.

        ``force`` skips the breaker check (an explicit flush or a health probe); the outcome still counts.
        """
        name = backend.name
        breaker = self._breakers[name]
        if name not in self._ready:
            raise CircuitOpenError(f"backend {name!r} is not initialized (see health())", backend=name)
        if call.telemetry:
            return self._call_telemetry(backend, call)
        if not force and not breaker.allow():
            raise CircuitOpenError(
                f"backend {name!r} is skipped: circuit breaker open after {breaker.consecutive_failures} "
                f"failure(s) (last: {breaker.last_error})", backend=name,
            )
        timeout = call.timeout_s if call.timeout_s is not None else self.settings.operation_timeout_s
        try:
            if backend.capabilities.bounded_latency:
                # A local backend bounds its own latency (SQLite's busy timeout): calling it on this thread
                # skips a worker-thread handoff that costs more than the write itself.
                result = call.run(backend)
            else:
                future = self._runners[name].submit(call.run, (backend,))
                result = future.result(timeout=timeout)
        except FutureTimeout:
            if not future.cancel() and call.writes:
                self._track_abandoned(name, future)
            error = BackendUnavailableError(
                f"backend {name!r}: {call.op} timed out after {timeout:g}s", backend=name
            )
            breaker.record_failure(str(error))
            raise error from None
        except CLIENT_ERRORS:
            breaker.record_success()
            raise
        except (UnicodeError, RecursionError) as exc:
            # Text a backend cannot encode, or input nested deeper than it can walk, is the caller's input at
            # fault (the models refuse both at the door; this is the net): it never counts against a breaker,
            # or one tenant's bad input could open the primary's breaker for every tenant.
            breaker.record_success()
            raise ValidationError(f"{call.op}: backend {name!r} cannot take this input ({type(exc).__name__}: "
                                  f"{exc})", [("(input)", "invalid")]) from exc
        except MemrouteError as exc:
            breaker.record_failure(str(exc))
            raise
        except Exception as exc:
            breaker.record_failure(str(exc))
            raise BackendError(f"backend {name!r}: {call.op} failed: {exc}", backend=name) from exc
        breaker.record_success()
        return result

    def _call_telemetry(self, backend: MemoryBackend, call: BackendCall[T]) -> T:
        name = backend.name
        if self._breakers[name].state != "closed":
            raise CircuitOpenError(f"backend {name!r} is skipped for {call.op}: circuit breaker not closed",
                                   backend=name)
        timeout = self.settings.operation_timeout_s
        try:
            if backend.capabilities.bounded_latency:
                return call.run(backend)
            return self._runners[name].submit(call.run, (backend,)).result(timeout=timeout)
        except FutureTimeout:
            raise BackendUnavailableError(f"backend {name!r}: {call.op} timed out after {timeout:g}s",
                                          backend=name) from None
        except MemrouteError:
            raise
        except Exception as exc:
            raise BackendError(f"backend {name!r}: {call.op} failed: {exc}", backend=name) from exc

    def _track_abandoned(self, name: str, future: Future[Any]) -> None:
        # A write still running after its timeout could land after newer state: hold the target's replay
        # (and direct writes) until it finishes.
        with self._lock:
            self._abandoned_writes[name] += 1

        def done(_f: Future[Any]) -> None:
            with self._lock:
                self._abandoned_writes[name] -= 1
            self._on_settled()

        future.add_done_callback(done)

    def abandoned(self, name: str) -> int:
        """Writes to ``name`` that timed out but are still running."""
        with self._lock:
            return self._abandoned_writes[name]

    def shutdown(self) -> None:
        """Let the worker threads exit (a hung call's thread ends when the call does)."""
        for runner in self._runners.values():
            runner.shutdown()
