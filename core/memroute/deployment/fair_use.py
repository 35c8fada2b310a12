"""Fair use: per-key request rates and concurrency caps, kept where the key store lives.

One tenant's flood must not starve the others (issue 29: 50 concurrent requests of one tenant raised another's
search p50 from 5 to 137 ms). Every key has

- a **rate**: requests per minute, counted in the deployment's shared state store (SQLite ``state.db`` or
  PostgreSQL), so it holds across every server process. A process does not write the store per request: it
  claims a slice of the minute's budget at a time (:data:`CLAIM_FRACTION` of it) and counts it down locally;
  a process that stops leaves its unused slice unspent for the rest of that minute, nothing more.
- a **concurrency cap**: requests in flight at once, across every process too. A process holds a *lease* on
  some of the key's slots in the state store (:class:`_Slots`): it admits requests against the slots it holds
  without asking the store, claims more when they run out (a little more than it needs, so that a busy key
  does not write the store per request), and renews its leases in the background (:meth:`FairUse.renew`,
  every third of :attr:`FairUse.lease_s`). When a request ends, the slots it no longer uses go back
  (:meth:`FairUse.give_back`: under a cap of 16 all of them, so a sequential client served by several processes
  in turn is never refused by a slot one of them holds idle; from 16 up it keeps a few ahead). A process that
  dies (``kill -9``) stops renewing: its slots come free when its lease expires, ``lease_s`` later (``[server]
  concurrency_lease_s``, 30 s by default).

Both come from the deployment's defaults (``[server] requests_per_minute``, ``concurrent_requests``) unless the
key has limits of its own (:meth:`FairUse.set_limits`: ``memroute keys limits``, ``PUT /api/keys/{id}/limits``),
stored in the state store next to the key and re-read by each process at most every :data:`LIMITS_TTL_S`.
A refusal says when to retry (:class:`RateLimited`, 429 with ``Retry-After`` on HTTP). 0 means unlimited.
"""

from __future__ import annotations

import asyncio
import collections
import math
import secrets
import threading
import time
from collections.abc import Hashable
from typing import Any, Final

import attrs

from memroute.errors import ValidationError

__all__ = ["CLAIM_FRACTION", "LIMITS_TTL_S", "FairUse", "KeyLimits", "RateLimited", "WaitingLine"]

LIMITS_TTL_S: Final = 5.0
"""Seconds a process reuses a key's limits before reading them again: a change reaches every process this fast."""
CLAIM_FRACTION: Final = 0.05
"""The share of a key's per-minute budget one process claims from the shared count at once (at least 1)."""
SLOT_REFUSAL_TTL_S: Final = 0.5
"""After the store refused a key a slot, this process refuses the key's next requests for this long without
asking the store again (a flood of refusals would otherwise be a flood of writes)."""
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
    """Requests in flight at once across the deployment's processes (``[server] concurrent_requests`` when
    ``None``)."""

    def to_dict(self) -> dict[str, int | None]:
        return {"requestsPerMinute": self.requests_per_minute, "concurrentRequests": self.concurrent_requests}


class RateLimited(Exception):
    """A request over its key's rate or concurrency cap; ``retry_after_s`` says when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@attrs.define
class _Slots:
    """This process's lease on some of one key's concurrency slots (the state store has every process's)."""

    held: int = 0
    slack: int = 0
    """Slots kept beyond those in use (:func:`_slack`), so that a key's next requests need no store write."""
    cap: int = 0
    expires: float = 0.0
    """When the lease runs out (the clock's time: compared with other processes' leases in the store)."""
    refused_until: float = 0.0


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
                 lease_s: float = 30.0, holder: str | None = None, clock: Any = time.time) -> None:
        from memroute.deployment.state import lease_holder_id

        self.state = state
        self.default = KeyLimits(requests_per_minute=requests_per_minute, concurrent_requests=concurrent_requests)
        self.lease_s = lease_s
        """How long a lease on a key's slots lasts unless renewed (:meth:`renew`)."""
        self.holder = holder or f"{lease_holder_id()}:{secrets.token_hex(3)}"
        """This process (and this object: two services in one process are two holders) in the store's leases."""
        self._clock = clock
        self._slots: dict[str, _Slots] = {}
        self._lease_lock = threading.Lock()
        """Held across a lease's store write and the matching local update, so two threads' writes and
        updates cannot cross."""
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
        if not self._hold_slot(key_id, cap, store=store):
            return False
        try:
            counted = self._count(key_id, limits.requests_per_minute or 0, store=store)
        except BaseException:
            self.release(key_id)
            raise
        if not counted:
            self.release(key_id)
        return counted

    def _hold_slot(self, key_id: str, cap: int, *, store: bool) -> bool:
        """Count one more request of ``key_id`` in flight: at once against the slots this process holds, else
        after claiming more from the store (False when that is needed and ``store`` is False)."""
        refused = RateLimited(f"too many requests in flight for this API key (at most {cap} at once)", 1)
        now = self._clock()
        with self._lock:
            in_flight = self._in_flight.get(key_id, 0)
            slots = self._slots.get(key_id)
            if cap and in_flight >= cap:
                raise refused
            if cap and slots is not None and now < slots.refused_until:
                raise refused
            # A lease is used until two thirds of it have passed; renew() extends it long before that.
            if not cap or (slots is not None and in_flight < slots.held and now < slots.expires - self.lease_s / 3):
                self._in_flight[key_id] = in_flight + 1
                return True
        if not store:
            return False
        with self._lease_lock:
            granted = self._set_lease(key_id, in_flight + max(1, _slack(cap)), cap, now)
            with self._lock:
                slots = self._slots.setdefault(key_id, _Slots())
                slots.held, slots.expires, slots.slack, slots.cap = granted, now + self.lease_s, _slack(cap), cap
                in_flight = self._in_flight.get(key_id, 0)
                if in_flight >= granted:
                    slots.refused_until = now + SLOT_REFUSAL_TTL_S
                    raise refused
                self._in_flight[key_id] = in_flight + 1
        return True

    def renew(self) -> None:
        """Renew this process's leases on the keys it has requests in flight for, down to what it uses (plus a
        little), and give up the others. The server calls it every third of :attr:`lease_s` from a thread."""
        with self._lock:
            plan = {key_id: (self._in_flight.get(key_id, 0), slots.held) for key_id, slots in self._slots.items()}
        for key_id, (in_flight, held) in plan.items():
            cap = self.effective(key_id).concurrent_requests or 0
            wanted = min(max(held, in_flight), in_flight + _slack(cap)) if in_flight and cap else 0
            with self._lease_lock:
                now = self._clock()
                kept = self._set_lease(key_id, wanted, cap, now)
                with self._lock:
                    slots = self._slots.get(key_id)
                    if slots is None:
                        continue
                    if kept:
                        slots.held, slots.expires = kept, now + self.lease_s
                    elif not self._in_flight.get(key_id):
                        del self._slots[key_id]
                    else:  # requests in flight and no slot in the store for them: the next one claims again
                        slots.held, slots.expires = 0, 0.0

    def _set_lease(self, key_id: str, wanted: int, cap: int, now: float) -> int:
        """Store this process's lease on ``key_id``'s slots as ``wanted`` or as many as the other processes' live
        leases leave free (none: no lease); how many it holds now."""
        kept = 0

        def change(current: Any) -> dict[str, Any]:
            nonlocal kept
            holders = _live_holders(current, now)
            holders.pop(self.holder, None)
            kept = max(0, min(wanted, cap - sum(int(lease["slots"]) for lease in holders.values())))
            if kept:
                holders[self.holder] = {"slots": kept, "expires": now + self.lease_s}
            return {"holders": holders}

        self.state.update_value(_NAMESPACE, f"slots:{key_id}", change)
        return kept

    def release_all(self) -> None:
        """Give up every lease this process holds (on shutdown)."""
        with self._lock:
            keys = list(self._slots)
            self._slots.clear()
        for key_id in keys:
            self._set_lease(key_id, 0, 0, self._clock())

    def _cached(self, key_id: str) -> KeyLimits | None:
        with self._lock:
            cached = self._limits.get(key_id)
        return cached[1] if cached is not None and time.monotonic() - cached[0] < LIMITS_TTL_S else None

    def release(self, key_id: str) -> bool:
        """One request of ``key_id`` is over. True when this process now holds more of the key's slots than it
        uses plus its slack: call :meth:`give_back` (with the store), or other processes may be refused the
        slots until the next :meth:`renew`."""
        with self._lock:
            left = self._in_flight.get(key_id, 0) - 1
            if left > 0:
                self._in_flight[key_id] = left
            else:
                self._in_flight.pop(key_id, None)
            slots = self._slots.get(key_id)
            return slots is not None and slots.held > max(0, left) + slots.slack

    def give_back(self, key_id: str) -> None:
        """Shrink this process's lease on ``key_id``'s slots to the requests in flight and its slack (a key with
        a cap under 16 keeps none: a sequential client served by several processes in turn must not be refused
        by a slot one of them no longer uses)."""
        with self._lease_lock:
            with self._lock:
                slots = self._slots.get(key_id)
                if slots is None:
                    return
                in_flight, slack, cap = self._in_flight.get(key_id, 0), slots.slack, slots.cap
            now = self._clock()
            kept = self._set_lease(key_id, in_flight + slack, cap, now)
            with self._lock:
                slots = self._slots.get(key_id)
                if slots is None:
                    return
                if kept or self._in_flight.get(key_id):
                    slots.held, slots.expires = kept, now + self.lease_s
                else:
                    del self._slots[key_id]

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


def _slack(cap: int) -> int:
    """The slots a process keeps beyond those in use: for a cap of 16 or more, one more than a sixteenth of it
    (64: 5), so that a key's next requests need no store write; none under 16, where the cap is exact."""
    return cap // 16 + 1 if cap >= 16 else 0


def _live_holders(current: Any, now: float) -> dict[str, dict[str, Any]]:
    """The leases in a stored slots value that have not expired (a dead process's go here)."""
    holders = current.get("holders") if isinstance(current, dict) else None
    if not isinstance(holders, dict):
        return {}
    return {holder: dict(lease) for holder, lease in holders.items()
            if isinstance(lease, dict) and float(lease.get("expires", 0)) > now and int(lease.get("slots", 0)) > 0}


_NOBODY: Final = object()


class WaitingLine:
    """Requests waiting per key, served round-robin across keys: the one line behind the event loop's turns
    (:class:`memroute.server.fair_queue.LoopTurns`) and the async API's workers (:class:`memroute.aio.FairShares`).

    :meth:`join` puts a future in its key's queue; :meth:`grant` resolves the first live one of the next key in
    rotation, and that key goes to the back. A key that arrived since the key served last goes before it, so
    another key's backlog never waits in front of a request: it waits for at most one request of each other key
    that is waiting too. Not thread-safe: used from one event loop (``key in line`` may be asked from any thread:
    one dictionary lookup)."""

    def __init__(self) -> None:
        self._queues: collections.OrderedDict[Hashable, collections.deque[asyncio.Future[None]]] = (
            collections.OrderedDict())
        self._last: Hashable = _NOBODY

    def __bool__(self) -> bool:
        return bool(self._queues)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._queues

    def waiting(self, key: Hashable | None = None) -> int:
        """Requests waiting: of ``key``, or of every key."""
        if key is not None:
            return len(self._queues.get(key, ()))
        return sum(len(queue) for queue in self._queues.values())

    def served(self, key: Hashable) -> None:
        """``key`` was served without waiting (the resource was free): it counts as the key served last."""
        self._last = key

    def join(self, key: Hashable) -> asyncio.Future[None]:
        """A future resolved when ``key`` is granted its turn (await it; :meth:`forget` it when cancelled)."""
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, collections.deque()).append(granted)
        return granted

    @property
    def last(self) -> Hashable:
        """The key served last."""
        return self._last

    def grant(self) -> bool:
        """Resolve the next waiter in rotation (one cancelled meanwhile is skipped); False when nobody waits."""
        while self._queues:
            key = next(iter(self._queues))
            if key == self._last and len(self._queues) > 1:  # a key that arrived since goes before it
                self._queues.move_to_end(key)
                key = next(iter(self._queues))
            queue = self._queues[key]
            granted = queue.popleft()
            if queue:
                self._queues.move_to_end(key)  # round-robin: this key goes to the back of the rotation
            else:
                del self._queues[key]
            if not granted.done():
                self._last = key
                granted.set_result(None)
                return True
        return False

    def forget(self, key: Hashable, granted: asyncio.Future[None]) -> None:
        """Take ``granted`` out of ``key``'s queue (its request gave up waiting)."""
        queue = self._queues.get(key)
        if queue is None or granted not in queue:
            return
        queue.remove(granted)
        if not queue:
            del self._queues[key]
