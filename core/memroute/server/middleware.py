"""The ASGI guard in front of every route: ``Host`` check, body size limit (413), body time limit (408), JSON
nesting limit (400), time-to-first-byte limit (504) and security headers. Pure ASGI, so streamed responses
(export, MCP, the proxy) pass through untouched."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from memroute.config.settings import ServerSettings
from memroute.server.errors import PROXY_PREFIX, api_error_body, api_style
from memroute.server.jsondepth import json_nesting_exceeds

__all__ = ["GuardMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

IMPORT_PATH: Final = "/api/memory/import"
IMPORT_PATHS: Final = (IMPORT_PATH, IMPORT_PATH + "/omniroute")
"""The routes whose bodies may be as large as ``[server] max_import_bytes``."""
_DOCS_PATHS: Final = ("/docs", "/redoc")
_SECURITY_HEADERS: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_API_CSP: Final = b"default-src 'none'; frame-ancestors 'none'"


def _json_error(status: int, message: str, scope: Scope) -> tuple[Message, Message]:
    """memroute's error shape, or on a proxy route (``/v1/…``) the shape of the API the caller speaks."""
    style = api_style(scope.get("path", ""), list(scope.get("headers", [])))
    payload = api_error_body(style, status, message) if style else {"error": {"message": message, "details": []}}
    body = json.dumps(payload).encode("utf-8")
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    return start, {"type": "http.response.body", "body": body}


class GuardMiddleware:
    """Wraps the app; configured by :class:`~memroute.config.settings.ServerSettings`. The memory proxy's routes
    (``/v1/…``) take their body limit from ``proxy_max_body_bytes`` and have no time-to-first-byte limit: a model
    may think for minutes before it answers, and the proxy bounds the wait itself (``[proxy.*] timeout``)."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, proxy_max_body_bytes: int | None = None) -> None:
        self.app = app
        self.settings = settings
        self.proxy_max_body_bytes = proxy_max_body_bytes or settings.max_body_bytes
        self.allowed_hosts = {h.lower() for h in settings.allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        https = scope.get("scheme") == "https"
        started = False
        timer: asyncio.TimerHandle | None = None

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if timer is not None:
                    timer.cancel()  # the response started in time: it runs to the end
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in _SECURITY_HEADERS if h[0] not in present)
                if b"content-security-policy" not in present and not path.startswith(_DOCS_PATHS):
                    headers.append((b"content-security-policy", _API_CSP))
                if b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                if https:
                    headers.append((b"strict-transport-security", b"max-age=31536000"))
                message = {**message, "headers": headers}
            await send(message)

        if self.allowed_hosts and self._host(scope) not in self.allowed_hosts:
            for message in _json_error(400, "Host header not allowed", scope):
                await guarded_send(message)
            return
        proxied = path.startswith(PROXY_PREFIX)
        limit = (self.settings.max_import_bytes if path in IMPORT_PATHS
                 else self.proxy_max_body_bytes if proxied else self.settings.max_body_bytes)
        declared = self._content_length(scope)
        if declared is not None and declared > limit:
            for message in _json_error(413, f"request body larger than {limit} bytes", scope):
                await guarded_send(message)
            return
        body = await self._read_body(receive, limit, scope)
        if isinstance(body, tuple):  # refused: too large, too slow or nested too deeply
            for message in _json_error(*body, scope):
                await guarded_send(message)
            return
        replayed = False

        async def replay_receive() -> Message:
            # The body once, as one message; then the client's own messages (a disconnect, for a stream).
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if proxied:  # no time-to-first-byte limit: nothing to race the app against, so no extra task
            await self.app(scope, replay_receive, guarded_send)
            return
        # The app runs in this request's own task, which a timer cancels if no response has started in time. One
        # timer a request, cancelled by the response's first message: cheaper than racing a task of its own
        # against an event (asyncio.wait, a second task and their callbacks cost the loop ~0.1 ms a request),
        # and no second task means no extra turn of the event loop before the route runs (which the fair queue,
        # memroute.server.fair_queue, counts on: a request reaches its key's queue in the loop's next turn).
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            if not started:
                expired = True
                task.cancel()

        timer = asyncio.get_running_loop().call_later(self.settings.request_timeout_s, expire)
        try:
            await self.app(scope, replay_receive, guarded_send)
        except asyncio.CancelledError:
            if not expired:  # this request itself was cancelled (the client left, the server stops)
                raise
        finally:
            timer.cancel()
        if expired:
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the cancellation was ours, and is over
            if uncancel is not None:
                uncancel()
            if not started:  # no response started in time: the request was given up
                for message in _json_error(504, f"no response within {self.settings.request_timeout_s:g}s", scope):
                    await guarded_send(message)

    async def _read_body(self, receive: Receive, limit: int, scope: Scope) -> bytes | tuple[int, str]:
        """The whole request body, read before the app sees any of it, or the refusal ``(status, message)``:
        413 past ``limit`` bytes, 408 when the client takes longer than ``body_timeout_s`` to send it, 400 when
        it is JSON nested deeper than ``max_json_depth`` (every parser on the way recurses per level). Every
        route reads its whole body anyway, so reading it here costs nothing but makes the checks hold for all
        of them — REST, storage, MCP, the proxy and the lean fast path alike."""
        chunks: list[bytes] = []
        received = 0
        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":  # the client left: the app sees an empty body
                        break
                    chunk = message.get("body", b"")
                    received += len(chunk)
                    if received > limit:
                        return 413, f"request body larger than {limit} bytes"
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            return 408, f"request body not received within {self.settings.body_timeout_s:g}s"
        body = b"".join(chunks)
        depth = self.settings.max_json_depth
        if body and not self._form(scope) and json_nesting_exceeds(body, depth):
            return 400, f"request body nests JSON deeper than {depth} levels"
        return body

    @staticmethod
    def _form(scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"content-type":
                return value.lower().startswith((b"multipart/form-data", b"application/x-www-form-urlencoded"))
        return False

    @staticmethod
    def _host(scope: Scope) -> str:
        for name, value in scope.get("headers", []):
            if name == b"host":
                host = value.decode("latin-1").lower()
                if host.startswith("["):
                    return host[: host.find("]") + 1]
                return host.rsplit(":", 1)[0] if ":" in host else host
        return ""

    @staticmethod
    def _content_length(scope: Scope) -> int | None:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return None
        return None
