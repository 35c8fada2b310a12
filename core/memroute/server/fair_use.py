"""The fair-use gate of ``memroute serve``: every request that presents an API key is counted against that key's
rate and concurrency cap (:mod:`memroute.deployment.fair_use`) before any route runs — REST, the storage
protocol, MCP and the proxy alike — and refused with ``429`` and ``Retry-After`` beyond them.

Then the request waits for its key's turn on the event loop (:class:`~memroute.server.fair_queue.LoopTurns`,
round-robin across keys), unless ``[server] fair_queueing`` is off.

The gate only needs to know *which* key is calling, not whether it may: the route's own authentication still
answers 401 / 403. So the key's id is remembered per secret hash for :data:`KEY_TTL_S` (a revoked key passes the
gate for at most that long, and is refused by the route). A request without a key is not counted; it waits for
its turn in the queue that requests without a key share.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import anyio.to_thread

from memroute import aio
from memroute.deployment.fair_use import RateLimited
from memroute.deployment.keys import hash_secret
from memroute.errors import AuthenticationError
from memroute.server.errors import api_error_body, api_style
from memroute.server.fair_queue import LoopTurns, QueueFull

__all__ = ["KEY_TTL_S", "MAX_HELD_REFUSALS", "REFUSAL_DELAY_S", "FairUseMiddleware", "renew_leases"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("memroute.server")

KEY_TTL_S: Final = 5.0
REFUSAL_DELAY_S: Final = 0.25
"""How long a 429 is held before it is sent (see :meth:`FairUseMiddleware._slow_down`)."""
MAX_HELD_REFUSALS: Final = 256
_MAX_REMEMBERED: Final = 10_000


def _presented_token(scope: Scope) -> str | None:
    """The secret the request presents, read as :func:`~memroute.server.auth.token_from_headers` reads it
    (``Authorization: Bearer``, else ``x-api-key``) straight from the ASGI headers; ``None`` for none or a
    malformed one (the route answers that 401)."""
    authorization = api_key = None
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            authorization = value
        elif name == b"x-api-key":
            api_key = value
    if authorization is not None:
        scheme, _, token = authorization.decode("latin-1").strip().partition(" ")
        return token.strip() or None if scheme.lower() == "bearer" else None
    return api_key.decode("latin-1").strip() or None if api_key is not None else None


class FairUseMiddleware:
    """Wraps the app (inside the guard); ``mem`` is the served :class:`~memroute.service.Memroute`."""

    def __init__(self, app: ASGIApp, mem: Any, turns: LoopTurns | None = None) -> None:
        self.app = app
        self.mem = mem
        self.turns = turns
        self._key_ids: dict[str, tuple[float, str | None]] = {}
        self._held: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _presented_token(scope)
        key_id = await self._key_id(token) if token else None
        if key_id is None:
            await self._in_turn(None, scope, receive, send)
            return
        fair_use = self.mem.fair_use
        try:
            # Almost always decided here from what this process holds; the shared count is read or written
            # about once per 5 % of a key's minute. When it lives behind a server (PostgreSQL), that read is
            # made from a worker thread, never on the event loop.
            if not fair_use.admit(key_id, store=self._in_process()):
                await anyio.to_thread.run_sync(fair_use.admit, key_id)
        except RateLimited as refused:
            await self._slow_down(key_id)
            await self._refuse(scope, send, refused)
            return
        try:
            await self._in_turn(key_id, scope, receive, send)
        finally:
            if fair_use.release(key_id):
                await self._give_back(key_id)

    async def _give_back(self, key_id: str) -> None:
        """Return the concurrency slots this process no longer uses to the state store (inline when it is in
        this process, like admitting; else from a worker thread). A failure is logged: renewal retries it."""
        fair_use = self.mem.fair_use
        try:
            if self._in_process():
                fair_use.give_back(key_id)
            else:
                await anyio.to_thread.run_sync(fair_use.give_back, key_id)
        except Exception:
            log.warning("fair use: giving back a key's concurrency slots failed", exc_info=True)

    async def _in_turn(self, key_id: str | None, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app in the key's turn on the event loop (:mod:`memroute.server.fair_queue`); requests without
        a key share one queue. A full queue is a 429 like the key's limits."""
        if self.turns is None:
            await self.app(scope, receive, send)
            return
        try:
            await self.turns.take(key_id)
        except QueueFull as refused:
            await self._slow_down(key_id or "")
            await self._refuse(scope, send, refused)
            return
        # The worker threads are shared by key too (memroute.aio.FairShares): a flood's calls that go to a
        # thread wait behind each other, not in front of another key's.
        token = aio.caller.set(key_id or "")
        try:
            await self.app(scope, receive, send)
        finally:
            aio.caller.reset(token)

    async def _slow_down(self, key_id: str) -> None:
        """Hold a refusal for :data:`REFUSAL_DELAY_S` before answering it. A client that retries at once (a
        flood does) otherwise turns the cheap 429 into thousands of requests a second that the event loop serves
        ahead of everyone else's: measured with 50 flooding connections, another tenant's search p50 went from
        2 to ~10 ms with immediate 429s. Held, each connection sends a few requests a second. At most
        :data:`MAX_HELD_REFUSALS` are held per key (the rest are answered at once), so holding costs little."""
        if self._held.get(key_id, 0) >= MAX_HELD_REFUSALS:
            return
        self._held[key_id] = self._held.get(key_id, 0) + 1
        try:
            await asyncio.sleep(REFUSAL_DELAY_S)
        finally:
            left = self._held[key_id] - 1
            if left:
                self._held[key_id] = left
            else:
                del self._held[key_id]

    def _in_process(self) -> bool:
        return getattr(self.mem.keys, "in_process", False) is True

    async def _key_id(self, token: str) -> str | None:
        digest = hash_secret(token)
        now = time.monotonic()
        known = self._key_ids.get(digest)
        if known is not None and now - known[0] < KEY_TTL_S:
            return known[1]
        try:
            if self._in_process():
                key = self.mem.keys.authenticate(token)
            else:
                key = await anyio.to_thread.run_sync(self.mem.keys.authenticate, token)
            key_id: str | None = key.id
        except AuthenticationError:
            key_id = None
        if len(self._key_ids) >= _MAX_REMEMBERED:
            self._key_ids.clear()
        self._key_ids[digest] = (now, key_id)
        return key_id

    @staticmethod
    async def _refuse(scope: Scope, send: Send, refused: RateLimited) -> None:
        message = str(refused)
        style = api_style(scope.get("path", ""), list(scope.get("headers", [])))
        payload = api_error_body(style, 429, message) if style else {"error": {"message": message, "details": []}}
        body = json.dumps(payload).encode("utf-8")
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"retry-after", str(refused.retry_after_s).encode())]})
        await send({"type": "http.response.body", "body": body})


async def renew_leases(fair_use: Any) -> None:
    """Renew this process's leases on its keys' concurrency slots every third of their length, from a worker
    thread (:meth:`memroute.deployment.fair_use.FairUse.renew`), until cancelled. A failed renewal is logged;
    the leases it missed expire, and the next request claims its slot again."""
    while True:
        await asyncio.sleep(fair_use.lease_s / 3)
        try:
            await anyio.to_thread.run_sync(fair_use.renew)
        except Exception:
            log.warning("fair use: renewing the leases on concurrency slots failed", exc_info=True)
