"""A per-backend circuit breaker: stop calling a backend that keeps failing, probe it again later.

States: ``closed`` (calls go through), ``open`` (calls are skipped for ``reset_s`` seconds after the last
failure), ``half-open`` (the reset time passed: exactly one call — the probe — goes through; its success
closes the breaker, its failure opens it again). Time comes from an injectable clock so tests drive it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker"]

CLOSED: Final = "closed"
OPEN: Final = "open"
HALF_OPEN: Final = "half-open"


class CircuitBreaker:
    """Counts consecutive failures of one backend. Thread-safe.

    Every ``allow()`` that returns True must be followed by ``record_success()`` or ``record_failure()``:
    in the half-open state the one probe slot stays taken until its outcome is recorded.
    """

    def __init__(self, failures: int, reset_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = failures
        self.reset_s = reset_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state: str = CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self.last_error: str | None = None

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open`` (an open breaker whose reset time passed reads half-open)."""
        with self._lock:
            if self._state == OPEN and self._clock() - self._opened_at >= self.reset_s:
                return HALF_OPEN
            return self._state

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def allow(self) -> bool:
        """Whether a call may go to the backend now (taking the probe slot when half-open)."""
        with self._lock:
            if self._state == CLOSED:
                return True
            if self._state == OPEN:
                if self._clock() - self._opened_at < self.reset_s:
                    return False
                self._state = HALF_OPEN
                self._probing = False
            if self._probing:
                return False
            self._probing = True
            return True

    def record_success(self) -> None:
        with self._lock:
            self._state = CLOSED
            self._failures = 0
            self._probing = False
            self.last_error = None

    def record_failure(self, error: str | None = None) -> None:
        with self._lock:
            self._failures += 1
            self.last_error = error
            self._probing = False
            # A failed probe re-opens at once; a closed breaker opens at the threshold.
            if self._state == HALF_OPEN or self._failures >= self.threshold:
                self._state = OPEN
                self._opened_at = self._clock()
