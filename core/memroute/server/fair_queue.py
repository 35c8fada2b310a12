"""Fair queueing per API key for the event loop of ``memroute serve``.

The event loop is the server's shared bottleneck: with one tenant keeping 50 searches in flight, the server
process used one core, all of it on the loop, and another tenant's search waited behind every request already
waiting for the loop — first come, first served — 74 ms instead of 1.9 ms (``python -m memroute.bench.fair_use``).
A request's work on the loop (routing, validation, a short search run inline, writing the answer) runs in one
go, a *step*, from when its task starts until it first waits for something (a worker thread, a write's commit,
an upstream, the client).

:class:`LoopTurns` gives those steps out one *turn* at a time, round-robin across keys. A request takes a turn
before its route runs; the turn passes on in the loop's next iteration, after the sockets that iteration found
readable were served, so a request that arrived meanwhile is in its key's queue before the next turn is given.
What the request does after its first step (a thread's result, an upstream's answer) needs no turn: a request
waiting on a thread or an upstream holds up nobody. While a turn is out, the next requests wait in a queue of
their key; the next turn goes to the next key in rotation that has a request waiting (a key that arrived since
before the key served last), so another key's backlog never waits in front of a request: it waits for at most
one request of each other key that is waiting too. Uncontended (no turn out, nobody waiting) a request goes
straight on, and one timer callback is all it costs.

A key's queue holds at most ``per_key`` requests (0: no limit); beyond them :class:`QueueFull`, a 429 with
``Retry-After``. Requests without a key share one queue (``None``), so an anonymous flood cannot starve keyed
requests either. Not thread-safe: used from the event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Final

from memroute.deployment.fair_use import RateLimited, WaitingLine

__all__ = ["QUEUE_RETRY_AFTER_S", "LoopTurns", "QueueFull"]

QUEUE_RETRY_AFTER_S: Final = 1
"""The ``Retry-After`` of a request refused because its key's queue was full."""


class QueueFull(RateLimited):
    """The request's key already has ``per_key`` requests waiting for a turn (a 429, like the key's limits)."""

    def __init__(self, per_key: int) -> None:
        super().__init__(f"too many requests queued for this API key (at most {per_key} waiting)",
                         QUEUE_RETRY_AFTER_S)
        self.per_key = per_key


class LoopTurns:
    """Turns on the event loop, round-robin across keys (the module docstring)."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._busy = False
        self._line = WaitingLine()
        self.queued = 0
        """Requests that had to wait for a turn (the benchmark and the tests read it)."""

    def waiting(self, key: Hashable | None = None) -> int:
        """Requests waiting for a turn: of ``key``, or of every key."""
        return self._line.waiting(key)

    async def take(self, key: Hashable) -> None:
        """Wait for ``key``'s turn (at once when the loop is free and nobody waits); :class:`QueueFull` when
        ``key`` has ``per_key`` requests waiting already. The turn ends by itself (nothing to give back)."""
        loop = asyncio.get_running_loop()
        if not self._busy and not self._line:
            self._busy = True
            self._line.served(key)
            loop.call_later(0, self._pass)
            return
        if self.per_key and self._line.waiting(key) >= self.per_key:
            raise QueueFull(self.per_key)
        granted = self._line.join(key)
        self.queued += 1
        try:
            await granted
        except asyncio.CancelledError:  # the client left (or the server stops) while it waited
            if not granted.cancelled():  # it had been given the turn: pass it on
                self._pass()
            else:
                self._line.forget(key, granted)
            raise
        loop.call_later(0, self._pass)

    def _pass(self) -> None:
        """End the turn and give the next one to the next key in rotation. Scheduled with ``call_later(0)`` when
        the turn starts, so it runs after the request's step, in the loop's next iteration, behind the sockets
        that iteration found readable: a request that arrived meanwhile is in its queue before the next turn
        is given (``call_soon`` would run before them)."""
        self._busy = self._line.grant()
