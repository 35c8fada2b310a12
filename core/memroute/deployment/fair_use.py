"""Fair use: per-key request rates and concurrency caps, kept where the key store lives.

One tenant's flood must not starve the others (issue 29: 50 concurrent requests of one tenant raised another's
search p50 from 5 to 137 ms). Every key has

- a **rate**: requests per minute, counted in the deployment's shared state store (SQLite ``state.db`` or
  PostgreSQL), so it holds across every server process. A process does not write the store per request: it
  claims a slice of the minute's budget at a time (:data:`CLAIM_FRACTION` of it) and counts it down locally;
  a process that stops leaves its unused slice unspent for the rest of that minute, nothing more.
- a **concurrency cap**: requests in flight at once. In-flight requests belong to one process, so the cap holds
  per server process (with ``--workers N`` a key may have N times the cap in flight).

Both come from the deployment's defaults (``[server] requests_per_minute``, ``concurrent_requests``) unless the
key has limits of its own (:meth:`FairUse.set_limits`: ``memroute keys limits``, ``PUT /api/keys/{id}/limits``),
stored in the state store next to the key and re-read by each process at most every :data:`LIMITS_TTL_S`.
A refusal says when to retry (:class:`RateLimited`, 429 with ``Retry-After`` on HTTP). 0 means unlimited.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Final

import attrs

from memroute.errors import ValidationError

__all__ = ["CLAIM_FRACTION", "LIMITS_TTL_S", "FairUse", "KeyLimits", "RateLimited"]

LIMITS_TTL_S: Final = 5.0
"""Seconds a process reuses a key's limits before reading them again: a change reaches every process this fast."""
CLAIM_FRACTION: Final = 0.05
"""The share of a key's per-minute budget one process claims from the shared count at once (at least 1)."""
_NAMESPACE: Final = "fair_use"
_MAX_LIMIT: Final = 10**9
_BOUNDS: Final = {"ge": 0, "le": _MAX_LIMIT}


def _limit(_inst: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_LIMIT):
        raise ValidationError(f"{attribute.name}: expected an integer from 0 (unlimited) to {_MAX_LIMIT}",
                              [(attribute.name, "range")])


@attrs.frozen(kw_only=True)
class KeyLimits:
    """One key's own limits; ``None`` takes the deployment's default, 0 is unlimited."""

    requests_per_minute: int | None = attrs.field(default=None, validator=_limit, metadata=_BOUNDS)
    """Requests a minute across the deployment's processes (``[server] requests_per_minute`` when ``None``)."""
    concurrent_requests: int | None = attrs.field(default=None, validator=_limit, metadata=_BOUNDS)
    """Requests in flight at once in one process (``[server] concurrent_requests`` when ``None``)."""

    def to_dict(self) -> dict[str, int | None]:
        return {"requestsPerMinute": self.requests_per_minute, "concurrentRequests": self.concurrent_requests}


class RateLimited(Exception):
    """A request over its key's rate or concurrency cap; ``retry_after_s`` says when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@attrs.define
class _Budget:
    """This process's share of one key's current minute."""

    minute: int = -1
    left: int = 0
    exhausted: bool = False


class FairUse:
    """The limits of a deployment's keys, checked by every server process (thread-safe).

    ``state``: the deployment's :class:`~memroute.deployment.state.StateStore`; ``clock``: seconds (tests)."""

    def __init__(self, state: Any, *, requests_per_minute: int, concurrent_requests: int,
                 clock: Any = time.time) -> None:
        self.state = state
        self.default = KeyLimits(requests_per_minute=requests_per_minute, concurrent_requests=concurrent_requests)
        self._clock = clock
        self._lock = threading.Lock()
        self._limits: dict[str, tuple[float, KeyLimits]] = {}
        self._budgets: dict[str, _Budget] = {}
        self._in_flight: dict[str, int] = {}

    # --- configuration ---------------------------------------------------------------------------------
    def own_limits(self, key_id: str) -> KeyLimits:
        """The key's own limits as stored (``None`` fields take the defaults)."""
        stored = self.state.get_value(_NAMESPACE, f"limits:{key_id}") or {}
        return KeyLimits(requests_per_minute=stored.get("requests_per_minute"),
                         concurrent_requests=stored.get("concurrent_requests"))

    def set_limits(self, key_id: str, limits: KeyLimits) -> KeyLimits:
        """Store ``key_id``'s own limits (every process applies them within :data:`LIMITS_TTL_S`)."""
        self.state.put_value(_NAMESPACE, f"limits:{key_id}", attrs.asdict(limits))
        with self._lock:
            self._limits.pop(key_id, None)
        return limits

    def effective(self, key_id: str) -> KeyLimits:
        """The limits that apply to ``key_id`` now: its own, else the defaults (cached per process)."""
        now = time.monotonic()
        with self._lock:
            cached = self._limits.get(key_id)
        if cached is not None and now - cached[0] < LIMITS_TTL_S:
            return cached[1]
        own = self.own_limits(key_id)
        limits = KeyLimits(
            requests_per_minute=self.default.requests_per_minute if own.requests_per_minute is None
            else own.requests_per_minute,
            concurrent_requests=self.default.concurrent_requests if own.concurrent_requests is None
            else own.concurrent_requests)
        with self._lock:
            self._limits[key_id] = (now, limits)
        return limits

    # --- admission ---------------------------------------------------------------------------------------
    def admit(self, key_id: str, *, store: bool = True) -> bool:
        """Count one request of ``key_id`` and hold one of its concurrency slots until :meth:`release`; True.
        :class:`RateLimited` (nothing held) when either limit is reached. With ``store=False`` nothing waits on
        the state store: when admitting needs it (the key's limits are due to be read again, or this process's
        slice of its minute is spent), nothing is counted and the answer is False — call again with the store
        (from a thread, where the store is a server)."""
        limits = self._cached(key_id)
        if limits is None:
            if not store:
                return False
            limits = self.effective(key_id)
        cap = limits.concurrent_requests or 0
        with self._lock:
            in_flight = self._in_flight.get(key_id, 0)
            if cap and in_flight >= cap:
                raise RateLimited(f"too many requests in flight for this API key (at most {cap} at once)", 1)
            self._in_flight[key_id] = in_flight + 1
        try:
            counted = self._count(key_id, limits.requests_per_minute or 0, store=store)
        except BaseException:
            self.release(key_id)
            raise
        if not counted:
            self.release(key_id)
        return counted

    def _cached(self, key_id: str) -> KeyLimits | None:
        with self._lock:
            cached = self._limits.get(key_id)
        return cached[1] if cached is not None and time.monotonic() - cached[0] < LIMITS_TTL_S else None

    def release(self, key_id: str) -> None:
        with self._lock:
            left = self._in_flight.get(key_id, 0) - 1
            if left > 0:
                self._in_flight[key_id] = left
            else:
                self._in_flight.pop(key_id, None)

    def in_flight(self, key_id: str) -> int:
        with self._lock:
            return self._in_flight.get(key_id, 0)

    def _count(self, key_id: str, per_minute: int, *, store: bool = True) -> bool:
        if not per_minute:
            return True
        now = self._clock()
        minute = int(now // 60)
        retry = max(1, math.ceil((minute + 1) * 60 - now))
        refused = RateLimited(f"rate limit of this API key reached ({per_minute} requests a minute)", retry)
        with self._lock:
            budget = self._budgets.setdefault(key_id, _Budget())
            if budget.minute != minute:
                budget.minute, budget.left, budget.exhausted = minute, 0, False
            if budget.left > 0:
                budget.left -= 1
                return True
            if budget.exhausted:
                raise refused
        if not store:
            return False
        granted = self._claim(key_id, minute, per_minute)
        with self._lock:
            budget = self._budgets.setdefault(key_id, _Budget())
            if budget.minute != minute:
                budget.minute, budget.left, budget.exhausted = minute, 0, False
            budget.left += granted
            if budget.left <= 0:
                budget.exhausted = True
                raise refused
            budget.left -= 1
        return True

    def _claim(self, key_id: str, minute: int, per_minute: int) -> int:
        """Take a slice of the minute's budget from the shared count; how many requests it allows (0: none)."""
        wanted = max(1, int(per_minute * CLAIM_FRACTION))
        granted = 0

        def take(current: Any) -> dict[str, int]:
            nonlocal granted
            used = int(current["used"]) if isinstance(current, dict) and current.get("minute") == minute else 0
            granted = max(0, min(wanted, per_minute - used))
            return {"minute": minute, "used": used + granted}

        self.state.update_value(_NAMESPACE, f"rate:{key_id}", take)
        return granted
