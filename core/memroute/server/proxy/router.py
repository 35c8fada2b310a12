"""The memory proxy's routes: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages, streamed and
not, plus ``GET /v1/models`` passed through (see ``docs/proxy.md``).

For every chat request: authenticate the caller's memroute key (its tenant owns the memories) → ``augment`` the
body through the service (the pipeline's placement rules) → forward it with memroute's own upstream credential
→ return the upstream's answer unchanged (streamed event by event) → queue ``observe`` once the turn is over,
when the upstream answered 2xx. This module decides nothing about memory itself: it calls the public service.

Memory never breaks a request: any failure while augmenting sends the body as it came, is logged, and counted
in :class:`ProxyStats`. Upstream errors reach the client with their status, headers (``Retry-After``) and body;
an upstream that cannot be reached is a 502, one that does not answer in time a 504, and so is a request that
found every one of the upstream's ``max_connections`` busy for ``connect_timeout``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final, Literal
from urllib.parse import quote

import anyio.to_thread
import attrs
import httpx
from fastapi import Request
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from memroute.config.netguard import BlockedUrlError
from memroute.config.settings import ProxySettings
from memroute.errors import MemrouteError, ValidationError
from memroute.models import require_session
from memroute.pipeline.conversation import NOT_CACHED
from memroute.pipeline.gate import MESSAGE_TIME_HEADERS, SESSION_HEADERS, memory_enabled, opted_out
from memroute.pipeline.turns import parse_said_at
from memroute.server.api.lean import InlineBudget
from memroute.server.auth import Principal, ScopedRouter, end_users, principal_for_request
from memroute.server.errors import api_error_response
from memroute.server.proxy.sse import Api, ReplyCollector, reply_from_events
from memroute.server.proxy.stream import Outcome, RelayedStream
from memroute.server.proxy.upstream import OutsideUpstreamError, Upstream, response_headers

__all__ = ["MEMORIES_HEADER", "MemoryProxy", "ProxyStats", "create_proxy_router"]

log = logging.getLogger("memroute.proxy")

MEMORIES_HEADER: Final = "x-memroute-memories"
"""Response header: how many memories were injected into the request."""
SKIPPED_HEADER: Final = "x-memroute-memory-skipped"
"""Response header, when none were: why (``opted out by header``, ``no memories``, ``retrieval failed``, ...)."""
LEARNING_HEADER: Final = "x-memroute-learning"
"""Response header: ``on`` when the turn will be observed, else ``off (<why>)``."""
TIMING_HEADER: Final = "server-timing"
"""Response header (W3C Server Timing, shown by browsers' developer tools): ``memroute-memory`` (the memory step
before the request went out) and ``memroute-upstream`` (the upstream's answer), after any the upstream sent."""
INLINE_OBSERVE_BYTES: Final = 64 * 1024
"""A reply up to this size is parsed for ``observe`` on the event loop, after the response went out; a longer
one in a worker thread (parsing a long stream's events takes milliseconds)."""

Style = Literal["openai", "anthropic"]


@attrs.define
class ProxyStats:
    """Counters since the server started (``to_dict`` is what status shows)."""

    requests: int = 0
    streamed: int = 0
    injected: int = 0
    """Requests that went out with memories."""
    memories_injected: int = 0
    memory_failures: int = 0
    """Augment or observe calls that failed (the request went out without memory)."""
    observed: int = 0
    """Turns handed to ``observe`` (which stores what it extracts in the service's background worker)."""
    upstream_errors: int = 0
    """Upstream answers with a non-2xx status (passed through)."""
    upstream_unreachable: int = 0
    upstream_timeouts: int = 0
    pool_timeouts: int = 0
    """Requests that found every connection to their upstream busy (``max_connections``) until the wait ran out."""
    stream_failures: int = 0
    """Streams the upstream broke off after it had started answering (the client got an error event)."""
    client_disconnects: int = 0

    def to_dict(self) -> dict[str, int]:
        return attrs.asdict(self)


@attrs.frozen
class _Route:
    api: Api
    style: Style
    upstream: str
    path: str
    """The path on the upstream, relative to its ``base_url``."""


MODEL_QUERY_PARAMETERS: Final = frozenset({"after_id", "before_id", "limit"})
"""The query parameters ``GET /v1/models`` passes on (Anthropic's pagination; OpenAI's list takes none)."""

_CHAT = _Route("openai-chat", "openai", "openai", "/chat/completions")
_RESPONSES = _Route("responses", "openai", "openai", "/responses")
_MESSAGES = _Route("anthropic", "anthropic", "anthropic", "/v1/messages")


@attrs.frozen
class _Augmented:
    body: Any
    count: int = 0
    skipped: str | None = None
    failed: bool = False
    searched: bool = False
    memory_ids: tuple[str, ...] = ()
    """The memories injected, whose access the handler records (:meth:`MemoryProxy._record_access`)."""


def error_response(style: Style, status: int, message: str, kind: str | None = None,
                   headers: Mapping[str, str] | None = None, param: str | None = None) -> JSONResponse:
    """An error in the wire format of the caller's API, so its SDK raises its typed error with the message
    (:func:`memroute.server.errors.api_error_response`)."""
    return api_error_response(style, status, message, kind=kind, param=param, headers=headers)


def _session_problem(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """``(header, message)`` when a session header names no valid session id (over 256 characters, a NUL)."""
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        try:
            require_session(value.strip())
        except ValidationError as exc:
            return name, f"memroute: header {name}: {exc}"
    return None


def _message_time_problem(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """``(header, message)`` when ``x-memroute-message-time`` is not a time ``observe`` would accept: refused
    before the request goes out, not found after the upstream answered."""
    for name in MESSAGE_TIME_HEADERS:
        value = headers.get(name)
        if value is not None and value.strip():
            try:
                parse_said_at(value, name)
            except ValidationError as exc:
                return name, f"memroute: header {exc}"
    return None


class MemoryProxy:
    """The proxy's state: the two upstreams and the counters. One per app."""

    def __init__(self, mem: Any, settings: ProxySettings, *,
                 transports: Mapping[str, httpx.AsyncBaseTransport] | None = None,
                 inline: InlineBudget | None = None) -> None:
        self.mem = mem
        self.settings = settings
        self.inline = inline or InlineBudget(0, in_process=False)
        """Which tenants' searches run on the event loop (``[proxy] inline_search_ms``); none without one."""
        transports = transports or {}
        self.upstreams = {
            "openai": Upstream("openai", settings.openai, transport=transports.get("openai")),
            "anthropic": Upstream("anthropic", settings.anthropic, transport=transports.get("anthropic")),
        }
        self.stats = ProxyStats()

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()

    # --- the steps ---------------------------------------------------------------------------------------
    def _augment(self, body: Any, api: Api, tenant: str, headers: Mapping[str, str],
                 provider: str | None, cached_only: bool = False) -> _Augmented:
        """Never raises: a failure sends the body as it came. With ``cached_only``, the service answers only what
        needs no search (``skipped`` is :data:`NOT_CACHED` otherwise)."""
        try:
            report = self.mem.explain_augment(body, api_key_id=tenant, provider=provider, headers=headers, api=api,
                                              preview=False, cached_only=cached_only, record_access=False)
        except Exception:
            log.exception("memroute proxy: augment failed; the request goes out without memory")
            return _Augmented(body, skipped="memory error", failed=True, searched=True)
        skipped = getattr(report, "skipped", None)
        searched = getattr(report, "searched", True) is not False
        if report.request is body or skipped:
            failed = isinstance(skipped, str) and "failed" in skipped
            return _Augmented(body, skipped=skipped or "nothing injected", failed=failed, searched=searched)
        return _Augmented(report.request, count=report.count, searched=searched,
                          memory_ids=tuple(getattr(report, "memory_ids", ())))

    async def _augment_in_time(self, body: Any, api: Api, tenant: str, headers: Mapping[str, str],
                               provider: str | None) -> _Augmented:
        """:meth:`_augment`; a search runs off the event loop, given at most ``[proxy] memory_timeout_s``: a slow or
        hung memory store delays no request for longer (the abandoned call finishes, or times out, in its thread).

        What needs no search is answered here, on the event loop, because a thread hop costs more than the work
        (two wake-ups: ~0.3 ms on the shared 2-core machine, more under load): memory off, opted out, no user
        message, and — when every component works in this process (the embedded default: SQLite reads that
        never wait for a writer) — a repeated message whose retrieval is reused. A store that waits elsewhere
        (PostgreSQL, an HTTP backend) could block the loop even for that, so there only a search-free answer
        skips the thread.

        On such an in-process stack a search runs on the loop too while the tenant's recent augments averaged at
        most ``[proxy] inline_search_ms`` (:class:`~memroute.server.api.lean.InlineBudget`, the rule of the REST
        search route): then ``memory_timeout_s`` does not bound it, but nothing in it can wait on a server; it is
        CPU work of a few milliseconds, which in a worker thread would hold the GIL (and so the loop) for most of
        its time anyway, and a tenant whose augments grow slower goes back to the thread and its timeout.
        Out-of-process stores always search in the thread."""
        budget = self.inline

        def augment() -> _Augmented:  # timed where it runs: the augment's own time, not a thread hop's wake-ups
            started = time.perf_counter()
            done = self._augment(body, api, tenant, headers, provider)
            if done.searched:  # the average is a search's: a reused retrieval or an opt-out would lower it
                budget.record(tenant, time.perf_counter() - started)
            return done

        if self.mem.runs_in_process():
            if budget.allows(tenant):
                # One call answers whatever this request needs, on the loop: what needs no search, a reused
                # retrieval, or a search (asking for what is cached first would prepare the augment twice: 0.3-0.4
                # ms of a new message's path, paced in one process).
                return augment()
            quick = self._augment(body, api, tenant, headers, provider, cached_only=True)
            if quick.skipped != NOT_CACHED:
                return quick
        elif not memory_enabled(self.mem.memory_settings()) or opted_out(headers):
            return self._augment(body, api, tenant, headers, provider)
        limit = self.settings.memory_timeout_s
        with anyio.move_on_after(limit):
            return await anyio.to_thread.run_sync(augment, abandon_on_cancel=True)
        log.warning("memroute proxy: memories took longer than %gs ([proxy] memory_timeout_s); the request goes "
                    "out without them", limit)
        return _Augmented(body, skipped="memory timed out", failed=True)

    def _record_access(self, tenant: str, memory_ids: tuple[str, ...]) -> None:
        """Count the injected memories as accessed (queued for the background writer; never fails a request)."""
        try:
            self.mem.record_access(memory_ids, api_key_id=tenant)
        except Exception:
            log.exception("memroute proxy: recording the injected memories' accesses failed")

    def _observe(self, body: Any, reply: Any, tenant: str, headers: Mapping[str, str]) -> bool:
        try:
            self.mem.observe(body, reply, api_key_id=tenant, headers=headers)
        except Exception:
            self.stats.memory_failures += 1
            log.exception("memroute proxy: observe failed; nothing learned from this turn")
            return False
        return True

    async def _observe_later(self, body: Any, reply: Callable[[], Any], tenant: str,
                             headers: Mapping[str, str], size: int) -> None:
        """After the response has gone out: read the reply (``reply()`` parses its ``size`` bytes) and hand the
        turn to ``observe``, which only queues the extraction for the service's background worker. A short
        reply is handled right here (parsing it costs less than a thread hop); a long one off the event loop."""
        if size <= INLINE_OBSERVE_BYTES:
            observed = self._observe(body, reply(), tenant, headers)
        else:
            observed = await anyio.to_thread.run_sync(lambda: self._observe(body, reply(), tenant, headers))
        if observed:
            self.stats.observed += 1

    # --- the handlers --------------------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        return await self._handle(request, _CHAT)

    async def responses(self, request: Request) -> Response:
        return await self._handle(request, _RESPONSES)

    async def messages(self, request: Request) -> Response:
        return await self._handle(request, _MESSAGES)

    async def _handle(self, request: Request, route: _Route) -> Response:
        self.stats.requests += 1
        # The key check first, before anything else is read: a missing, bad or revoked key (401) or one without
        # the read scope (403) raises, and the app's error handlers answer in the caller's API format. Inline,
        # not a FastAPI dependency: it is one indexed read of the shared key store (so a revoked key fails at
        # once in every process), cheaper than the thread hop FastAPI makes for a sync dependency.
        principal = principal_for_request(request)
        principal.check("read")
        upstream = self.upstreams[route.upstream]
        if not upstream.configured:
            return error_response(route.style, 503, f"memroute: the proxy has no upstream for this API; set "
                                  f"[proxy.{upstream.name}] base_url", "api_error")
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_response(route.style, 400, f"memroute: the request body is not valid JSON ({exc})",
                                  "invalid_request_error")
        if not isinstance(body, dict):
            return error_response(route.style, 400, "memroute: the request body must be a JSON object",
                                  "invalid_request_error")
        header_problem = _session_problem(request.headers) or _message_time_problem(request.headers)
        if header_problem is not None:
            return error_response(route.style, 422, header_problem[1], param=header_problem[0])
        principal = end_users.from_body(principal, body, self.settings.end_user_fields)
        tenant = principal.acting_tenant  # an app key that named no end user: 422, in the caller's API format
        headers = dict(request.headers)
        memory_headers: dict[str, str] = {}
        model = body.get("model")
        provider = upstream.settings.provider or (model if isinstance(model, str) else None)
        started = time.perf_counter()
        augmented = await self._augment_in_time(body, route.api, tenant, headers, provider)
        memory_ms = (time.perf_counter() - started) * 1000
        if augmented.failed:
            self.stats.memory_failures += 1
        if augmented.count:
            self.stats.injected += 1
            self.stats.memories_injected += augmented.count
        if augmented.memory_ids:
            # Counted while the upstream answers (the callback runs at the loop's next turn, during the send's
            # first wait), not before the request goes out: 0.25 ms for 56 memories, paced in one process.
            asyncio.get_running_loop().call_soon(self._record_access, tenant, augmented.memory_ids)
        memory_headers[MEMORIES_HEADER] = str(augmented.count)
        if augmented.skipped:
            memory_headers[SKIPPED_HEADER] = _header_text(augmented.skipped)
        learning = self._learning(principal, headers)
        memory_headers[LEARNING_HEADER] = "on" if learning is None else f"off ({learning})"
        timing = self.settings.server_timing
        if timing:
            memory_headers[TIMING_HEADER] = _memory_timing(augmented, memory_ms)
        content = raw if augmented.body is body else _json_bytes(augmented.body)
        outgoing = upstream.build("POST", route.path, headers=request.headers.items(), content=content,
                                  json_body=augmented.body is not body)
        streamed = body.get("stream") is True
        if streamed:
            self.stats.streamed += 1
        sent = time.perf_counter()
        try:
            answer = await upstream.send(outgoing, stream=streamed)
        except (httpx.HTTPError, MemrouteError, OSError) as exc:
            return self._unreachable(route, upstream, exc, memory_headers)
        passed = response_headers(answer.headers)
        if timing:
            # Until the answer's headers when streamed, else until its whole body.
            ours = f"{memory_headers[TIMING_HEADER]}, memroute-upstream;dur={(time.perf_counter() - sent) * 1000:.2f}"
            theirs = passed.pop(TIMING_HEADER, None)
            memory_headers[TIMING_HEADER] = ours if not theirs else f"{theirs}, {ours}"
        headers_out = {**passed, **memory_headers}
        ok = 200 <= answer.status_code < 300
        if not ok:
            self.stats.upstream_errors += 1
        if streamed and ok:
            async def done(collector: ReplyCollector, outcome: Outcome) -> None:
                if outcome == "disconnected":
                    self.stats.client_disconnects += 1
                elif outcome == "upstream-error":
                    self.stats.stream_failures += 1
                if learning is None:
                    await self._observe_later(body, lambda: reply_from_events(route.api, collector.data()),
                                              tenant, headers, collector.size)

            return RelayedStream(answer, headers=headers_out, style=route.style, on_done=done)
        if streamed:
            await answer.aread()
            await answer.aclose()
        background = None
        if ok and learning is None:
            data = answer.content
            background = BackgroundTask(self._observe_later, body, partial(_json_or_none, data), tenant, headers,
                                        len(data))
        return Response(answer.content, status_code=answer.status_code, headers=headers_out, background=background)

    def _learning(self, principal: Principal, headers: Mapping[str, str]) -> str | None:
        """Why this turn will not be observed, or None when it will."""
        if not memory_enabled(self.mem.memory_settings()):
            return "memory disabled"
        if opted_out(headers):
            return "opted out by header"
        if not principal.allows("write"):
            return "key lacks the write scope"
        return None

    def _unreachable(self, route: _Route, upstream: Upstream, exc: Exception,
                     memory_headers: Mapping[str, str]) -> Response:
        if isinstance(exc, httpx.PoolTimeout):
            self.stats.pool_timeouts += 1
            settings = upstream.settings
            return error_response(route.style, 504, f"memroute: every connection to the upstream stayed busy for "
                                  f"{settings.connect_timeout:g} s ([proxy.{upstream.name}] max_connections = "
                                  f"{settings.max_connections}, connect_timeout)", "timeout_error", memory_headers)
        if isinstance(exc, httpx.TimeoutException):
            self.stats.upstream_timeouts += 1
            kind = "connect" if isinstance(exc, httpx.ConnectTimeout) else "read"
            limit = upstream.settings.connect_timeout if kind == "connect" else upstream.settings.timeout
            return error_response(route.style, 504, f"memroute: the upstream did not answer in time ({kind} timeout "
                                  f"of {limit:g} s, [proxy.{upstream.name}])", "timeout_error", memory_headers)
        self.stats.upstream_unreachable += 1
        # The details (addresses, the guard's reason) go to the operator's log, not to a tenant.
        log.warning("proxy: [proxy.%s] upstream unreachable: %s: %s", upstream.name, type(exc).__name__, exc)
        if isinstance(exc, BlockedUrlError):
            return error_response(route.style, 502, f"memroute: [proxy.{upstream.name}] base_url is refused by the "
                                  "address guard (a private or loopback address needs allow_private = true; the "
                                  "server log says why)", "api_error", memory_headers)
        return error_response(route.style, 502, f"memroute: the upstream could not be reached "
                              f"({type(exc).__name__}; the server log has the details)", "api_error", memory_headers)

    def status(self) -> dict[str, Any]:
        """The counters since the server started, and which upstreams are configured (never their keys)."""
        upstreams = {name: {"base_url": u.settings.base_url, "configured": u.configured,
                            "credential": bool(u.settings.api_key), "allow_private": u.settings.allow_private,
                            "connections": u.connections()}
                     for name, u in self.upstreams.items()}
        return {"counters": self.stats.to_dict(), "upstreams": upstreams}

    async def models(self, request: Request, model_id: str | None = None) -> Response:
        """``GET /v1/models`` (and ``/v1/models/{id}``), passed through: to the Anthropic upstream for Anthropic
        clients (they send ``anthropic-version``), else to the OpenAI one. No memory is involved.

        The request goes out with memroute's own credential, so nothing of the caller's shapes it but the model
        id — one path segment, percent-encoded, never ``.`` or ``..`` — and the query parameters the APIs document
        for listing models (:data:`MODEL_QUERY_PARAMETERS`); the URL built must stay under ``base_url``."""
        anthropic = "anthropic-version" in request.headers and self.upstreams["anthropic"].configured
        route = _MESSAGES if anthropic else _CHAT
        self.stats.requests += 1
        upstream = self.upstreams[route.upstream]
        if not upstream.configured:
            return error_response(route.style, 503, f"memroute: the proxy has no upstream for this API; set "
                                  f"[proxy.{upstream.name}] base_url", "api_error")
        if model_id is not None and model_id.strip(".") == "":
            return error_response(route.style, 404, f"memroute: no model {model_id!r}", param="model")
        path = ("/v1/models" if anthropic else "/models") + (f"/{quote(model_id, safe='')}" if model_id else "")
        params = {name: value[:256] for name, value in request.query_params.items()
                  if name in MODEL_QUERY_PARAMETERS}
        try:
            outgoing = upstream.build("GET", path, headers=request.headers.items(), params=params)
        except OutsideUpstreamError as exc:
            return error_response(route.style, 404, str(exc), param="model")
        try:
            answer = await upstream.send(outgoing)
        except (httpx.HTTPError, MemrouteError, OSError) as exc:
            return self._unreachable(route, upstream, exc, {})
        if answer.status_code >= 300:
            self.stats.upstream_errors += 1
        return Response(answer.content, status_code=answer.status_code, headers=response_headers(answer.headers))


def _json_bytes(body: Any) -> bytes:
    """``body`` as UTF-8 JSON text; with a lone surrogate in it (``"\\udfff"`` is valid JSON, but no UTF-8), as
    ASCII JSON, where the surrogate stays the escape the client sent."""
    try:
        return json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body).encode("ascii")


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _memory_timing(augmented: _Augmented, elapsed_ms: float) -> str:
    """The ``memroute-memory`` metric: how long the memory step took and what it did (``search``: retrieved for
    this request; ``reused``: a repeated message's retrieval; ``failed``; ``none``: nothing needed, e.g. opted out)."""
    what = ("failed" if augmented.failed else "search" if augmented.searched
            else "reused" if augmented.count else "none")
    return f'memroute-memory;dur={elapsed_ms:.2f};desc="{what}"'


def _header_text(text: str) -> str:
    cleaned = " ".join(str(text).split())
    return cleaned.encode("latin-1", errors="replace").decode("latin-1")[:200]


_STATUS_EXAMPLE: Final = {
    "counters": {**ProxyStats(requests=12, streamed=5, injected=9, memories_injected=31, observed=11).to_dict()},
    "upstreams": {"openai": {"base_url": "https://api.openai.com/v1", "configured": True, "credential": True,
                             "allow_private": False,
                             "connections": {"open": 3, "idle": 2, "waiting": 0, "waited": 0, "max": 100}},
                  "anthropic": {"base_url": None, "configured": False, "credential": False, "allow_private": False,
                                "connections": None}},
}


class _ChatEndpoint:
    """The plain ASGI endpoint of one chat route (not a FastAPI route): a request that passes through needs
    none of FastAPI's dependency solving and response wrapping, and no thread hop for the key check, which
    :meth:`MemoryProxy._handle` does inline. Errors it raises (401, 403, 413) reach the app's handlers, which
    answer in the caller's API format, as for every other route."""

    def __init__(self, proxy: MemoryProxy, route: _Route) -> None:
        self.proxy = proxy
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.proxy._handle(Request(scope, receive), self.route)
        await response(scope, receive, send)


def _chat_route(path: str, proxy: MemoryProxy, route: _Route) -> Route:
    chat = Route(path, endpoint=_ChatEndpoint(proxy, route), methods=["POST"], include_in_schema=False)
    chat.memroute_scope = "read"  # type: ignore[attr-defined]  # declared like every route (a test walks them)
    return chat


def create_proxy_router(mem: Any, *, settings: ProxySettings | None = None,
                        transports: Mapping[str, httpx.AsyncBaseTransport] | None = None,
                        inline: InlineBudget | None = None) -> ScopedRouter:
    """The proxy's routes for ``mem`` (``settings`` default to ``mem.settings.proxy``). Every chat route needs a
    memroute key with the ``read`` scope (the server's scope dependency authenticates it: a missing or bad key
    is a 401 before anything else happens); ``GET /api/proxy/status`` needs ``admin``. The router's ``proxy``
    attribute is the :class:`MemoryProxy` (its counters, and ``aclose()`` for the app's shutdown); ``inline``
    decides which tenants' searches run on the event loop (none without it); its
    ``chat_routes`` (the three chat routes, plain ASGI routes) go at the front of the app's route table."""
    proxy = MemoryProxy(mem, settings or mem.settings.proxy, transports=transports, inline=inline)
    router = ScopedRouter()
    hidden = {"include_in_schema": False}
    # The chat routes are plain routes the app puts first in its table (``chat_routes``): a request that
    # passes through is matched at once instead of after every REST route (42 pattern matches, ~0.2 ms).
    router.chat_routes = [_chat_route(path, proxy, chat_route)  # type: ignore[attr-defined]
                          for path, chat_route in (("/v1/chat/completions", _CHAT), ("/v1/responses", _RESPONSES),
                                                   ("/v1/messages", _MESSAGES))]
    router.add_api_route("/v1/models", proxy.models, methods=["GET"], scope="read", **hidden)
    router.add_api_route("/v1/models/{model_id}", proxy.models, methods=["GET"], scope="read", **hidden)
    router.add_api_route("/api/proxy/status", proxy.status, methods=["GET"], scope="admin", tags=["proxy"],
                         summary="The memory proxy's counters and upstreams",
                         responses={200: {"content": {"application/json": {"example": _STATUS_EXAMPLE}}}})
    router.proxy = proxy  # type: ignore[attr-defined]
    return router
