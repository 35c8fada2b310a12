"""The streamed half of the proxy: an ASGI response that relays an upstream's Server-Sent Events as they
arrive, notices a client that goes away, and reports how the stream ended.

* Each chunk the upstream sends is written to the client at once (no buffering of the reply) and copied into a
  bounded :class:`~memroute.server.proxy.sse.ReplyCollector`.
* A watcher waits for ``http.disconnect`` the whole time, so a client that leaves while the upstream is
  silent is noticed immediately: the relay stops and the upstream connection is closed (which tells the
  upstream to stop generating).
* An upstream that fails mid-stream (a read timeout, a dropped connection) cannot change the status line any
  more; the client gets one error event in the API's own format and the stream ends.
* Whatever happened, ``await on_done(collector, outcome)`` runs once at the end (``complete``, ``disconnected``
  or ``upstream-error``), after the last byte went out and the upstream response is closed, shielded from the
  cancellation a disconnect causes: the proxy queues ``observe`` there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from memroute.server.proxy.sse import ReplyCollector

__all__ = ["Outcome", "RelayedStream", "error_event"]

log = logging.getLogger("memroute.proxy")

Outcome = Literal["complete", "disconnected", "upstream-error"]


def error_event(style: str, message: str, kind: str = "api_error") -> bytes:
    """One SSE error event: Anthropic's ``event: error`` shape, or the ``data: {"error": …}`` chunk the OpenAI
    SDK raises on."""
    if style == "anthropic":
        payload = {"type": "error", "error": {"type": kind, "message": message}}
        return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"
    payload = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class RelayedStream(Response):
    """The ASGI response for one streamed upstream reply (status and headers as the upstream sent them)."""

    def __init__(self, upstream: httpx.Response, *, headers: Mapping[str, str], style: str,
                 on_done: Callable[[ReplyCollector, Outcome], Awaitable[None]]) -> None:
        self.upstream = upstream
        self.status_code = upstream.status_code
        self.background = None
        self.init_headers(headers)
        self.style = style
        self.on_done = on_done
        self.collector = ReplyCollector()
        self.outcome: Outcome = "complete"
        self._ended = False
        """The last body message is being sent: a disconnect from here on is the normal end of the exchange."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch, receive, group.cancel_scope)
                try:
                    await send({"type": "http.response.start", "status": self.status_code,
                                "headers": self.raw_headers})
                    await self._relay(send)
                except OSError:  # the server refused a send: the client is gone
                    self.outcome = "disconnected"
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self.upstream.aclose()
                except Exception:  # a broken upstream connection cannot be closed cleanly; it is gone anyway
                    log.debug("memroute proxy: closing the upstream stream failed", exc_info=True)
                try:
                    await self.on_done(self.collector, self.outcome)
                except Exception:
                    log.exception("memroute proxy: the end-of-stream hook failed")

    async def _watch(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self._ended:
                    self.outcome = "disconnected"
                scope.cancel()
                return

    async def _relay(self, send: Send) -> None:
        try:
            async for chunk in self.upstream.aiter_bytes():
                if chunk:
                    self.collector.feed(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.TimeoutException:
            self.outcome = "upstream-error"
            await self._fail(send, "memroute: the upstream stopped sending (read timeout)", "timeout_error")
            return
        except httpx.HTTPError as exc:
            self.outcome = "upstream-error"
            await self._fail(send, f"memroute: the upstream stream failed ({type(exc).__name__})", "api_error")
            return
        self._ended = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _fail(self, send: Send, message: str, kind: str) -> None:
        log.warning("memroute proxy: %s", message)
        await send({"type": "http.response.body", "body": error_event(self.style, message, kind), "more_body": True})
        self._ended = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
