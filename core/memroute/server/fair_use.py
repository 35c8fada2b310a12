"""The fair-use gate of ``memroute serve``: every request that presents an API key is counted against that key's
rate and concurrency cap (:mod:`memroute.deployment.fair_use`) before any route runs — REST, the storage
protocol, MCP and the proxy alike — and refused with ``429`` and ``Retry-After`` beyond them.

The gate only needs to know *which* key is calling, not whether it may: the route's own authentication still
answers 401 / 403. So the key's id is remembered per secret hash for :data:`KEY_TTL_S` (a revoked key passes the
gate for at most that long, and is refused by the route), and a request without a key passes untouched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import anyio.to_thread
from starlette.datastructures import Headers

from memroute.deployment.fair_use import RateLimited
from memroute.deployment.keys import hash_secret
from memroute.errors import AuthenticationError
from memroute.server.auth import token_from_headers
from memroute.server.errors import api_error_body, api_style

__all__ = ["KEY_TTL_S", "FairUseMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

KEY_TTL_S: Final = 5.0
_MAX_REMEMBERED: Final = 10_000


class FairUseMiddleware:
    """Wraps the app (inside the guard); ``mem`` is the served :class:`~memroute.service.Memroute`."""

    def __init__(self, app: ASGIApp, mem: Any) -> None:
        self.app = app
        self.mem = mem
        self._key_ids: dict[str, tuple[float, str | None]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            token = token_from_headers(Headers(scope=scope))
        except AuthenticationError:
            token = None  # a malformed header: the route says so (401)
        key_id = await self._key_id(token) if token else None
        if key_id is None:
            await self.app(scope, receive, send)
            return
        fair_use = self.mem.fair_use
        try:
            if self._in_process():
                fair_use.admit(key_id)
            else:  # the shared count is behind a server (PostgreSQL): never wait on it on the event loop
                await anyio.to_thread.run_sync(fair_use.admit, key_id)
        except RateLimited as refused:
            await self._refuse(scope, send, refused)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            fair_use.release(key_id)

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
