"""Wrap an OpenAI or Anthropic Python SDK client, sync or async, so every chat call augments before and
observes after.

The SDKs are optional and never imported: the wrappers are duck-typed and replace methods on the client's
own resource objects (both SDKs cache those), returning the same client::

    client = wrap_openai(OpenAI(), mem, api_key_id="user-1")
    client.chat.completions.create(model="gpt-4o", messages=[...])   # memories injected, facts extracted

    aclient = wrap_openai(AsyncOpenAI(), amem, api_key_id="user-1")  # amem: memroute.open_async(...)
    await aclient.chat.completions.create(model="gpt-4o", messages=[...])

What is wrapped: OpenAI ``chat.completions`` and ``responses`` (and, where the installed SDK has them,
``beta.chat.completions`` and ``beta.responses``): ``create``, ``parse`` (structured outputs) and the
``.stream()`` helpers (which send through ``create``); Anthropic ``messages`` and ``beta.messages``:
``create``, ``parse`` and ``stream``. Calls through the SDKs' ``with_raw_response`` /
``with_streaming_response`` views run the wrapped methods too (:mod:`memroute.integrations.raw`). ``mem`` may
be the sync service or an :class:`~memroute.aio.AsyncMemroute`, with either kind of client; for an async
client memroute's work runs off the event loop (in the async API's pool, or a worker thread).

Keyword arguments other than the SDK's transport options (``extra_headers``, ``extra_query``,
``extra_body``, ``timeout``) form the request body memroute reads and augments. A streamed reply
(``stream=True`` or a ``.stream()`` helper) reaches the caller event by event, unchanged (the SDK's own event
objects, with nothing awaited between them), and the turn is observed once the stream ends: the user's turn
always, the assistant's text too when it ran to its end (and ``[extraction] mine_assistant`` is on). Memory
never breaks a call: a retrieval, extraction or bookkeeping failure is logged and the call (or the stream)
proceeds.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memroute.aio import AsyncMemroute
from memroute.integrations.raw import ObservedRawResponse, aparse_now, parse_now, raw_mode
from memroute.integrations.streams import (
    AsyncObservedStream,
    AugmentingStreamManager,
    HelperStreamManager,
    ObservedStream,
    ReplyText,
    capture,
)
from memroute.models import require_tenant
from memroute.pipeline.requests import ApiShape

if TYPE_CHECKING:
    from memroute.service import Memroute

__all__ = ["wrap_anthropic", "wrap_create", "wrap_openai"]

log = logging.getLogger("memroute.integrations")

_TRANSPORT_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
_SDK_SENTINELS = frozenset({"Omit", "NotGiven"})  # the SDKs' "argument not given" markers
_WRAPPED = "__memroute_wrapped__"


class _Turn:
    """What one wrapped method needs to augment and observe: the service, the tenant, the options."""

    def __init__(self, mem: Memroute | AsyncMemroute, api_key_id: str, *, api: ApiShape,
                 session_id: str | None, provider: str | None, headers: Mapping[str, str] | None) -> None:
        self.amem = mem if isinstance(mem, AsyncMemroute) else None
        self.mem: Memroute = mem.sync if isinstance(mem, AsyncMemroute) else mem
        self.api_key_id = require_tenant(api_key_id)  # a bad tenant is a ValidationError now, not per call
        self.api, self.session_id, self.provider = api, session_id, provider
        self.headers = dict(headers or {})

    def split(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
        """(request body, transport options, headers for the opt-out check) of one call's keywords."""
        body = {k: v for k, v in kwargs.items()
                if k not in _TRANSPORT_OPTIONS and type(v).__name__ not in _SDK_SENTINELS}
        transport = {k: v for k, v in kwargs.items() if k in _TRANSPORT_OPTIONS}
        return body, transport, {**self.headers, **dict(transport.get("extra_headers") or {})}

    def augment(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        try:
            augmented: dict[str, Any] = self.mem.augment(body, api_key_id=self.api_key_id,
                                                         session_id=self.session_id, provider=self.provider,
                                                         headers=headers, api=self.api)
            return augmented
        except Exception:
            log.exception("memroute: augment failed; calling without memory")
            return body

    def observe(self, body: dict[str, Any], response: Any, headers: dict[str, str]) -> None:
        try:
            self.mem.observe(body, response, api_key_id=self.api_key_id, session_id=self.session_id,
                             headers=headers)
        except Exception:
            log.exception("memroute: observe failed")

    async def aaugment(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        if self.amem is None:
            return await asyncio.to_thread(self.augment, body, headers)
        try:
            augmented: dict[str, Any] = await self.amem.augment(
                body, api_key_id=self.api_key_id, session_id=self.session_id, provider=self.provider,
                headers=headers, api=self.api)
            return augmented
        except Exception:
            log.exception("memroute: augment failed; calling without memory")
            return body

    async def aobserve(self, body: dict[str, Any], response: Any, headers: dict[str, str]) -> None:
        if self.amem is None:
            await asyncio.to_thread(self.observe, body, response, headers)
            return
        try:
            await self.amem.observe(body, response, api_key_id=self.api_key_id, session_id=self.session_id,
                                    headers=headers)
        except Exception:
            log.exception("memroute: observe failed")


def _is_async(method: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(method))


def _mark(function: Callable[..., Any]) -> Callable[..., Any]:
    setattr(function, _WRAPPED, True)
    return function


def _observed(turn: _Turn, body: dict[str, Any], headers: dict[str, str], transport: dict[str, Any],
              response: Any) -> Any:
    """What a wrapped sync ``create`` / ``parse`` returns for the SDK's ``response``, the turn observed (now,
    or when the stream or raw response it hands out is read)."""
    streamed = body.get("stream") is True
    mode = raw_mode(transport)
    observe = functools.partial(turn.observe, body, headers=headers)
    if mode == "stream" or (mode == "read" and streamed):
        return ObservedRawResponse(response, api=turn.api, streamed=streamed, observe_sync=observe)
    if mode == "read":
        observe(parse_now(response))
        return response
    if streamed:
        stream = ObservedStream(response, ReplyText(turn.api), observe)
        capture(stream)
        return stream
    observe(response)
    return response


async def _aobserved(turn: _Turn, body: dict[str, Any], headers: dict[str, str], transport: dict[str, Any],
                     response: Any) -> Any:
    """:func:`_observed` for an async client."""
    streamed = body.get("stream") is True
    mode = raw_mode(transport)
    observe = functools.partial(turn.aobserve, body, headers=headers)
    if mode == "stream" or (mode == "read" and streamed):
        return ObservedRawResponse(response, api=turn.api, streamed=streamed, observe_async=observe,
                                   observe_sync=functools.partial(turn.observe, body, headers=headers))
    if mode == "read":
        await observe(await aparse_now(response))
        return response
    if streamed:
        stream = AsyncObservedStream(response, ReplyText(turn.api), observe)
        capture(stream)
        return stream
    await observe(response)
    return response


def _wrap_create(create: Callable[..., Any], turn: _Turn) -> Callable[..., Any]:
    """``create`` or ``parse`` (they take the same request body) augmenting before and observing after."""
    if _is_async(create):
        @functools.wraps(create)
        async def augmented_acreate(*args: Any, **kwargs: Any) -> Any:
            body, transport, headers = turn.split(kwargs)
            response = await create(*args, **await turn.aaugment(body, headers), **transport)
            return await _aobserved(turn, body, headers, transport, response)

        return _mark(augmented_acreate)

    @functools.wraps(create)
    def augmented_create(*args: Any, **kwargs: Any) -> Any:
        body, transport, headers = turn.split(kwargs)
        response = create(*args, **turn.augment(body, headers), **transport)
        return _observed(turn, body, headers, transport, response)

    return _mark(augmented_create)


def wrap_create(
    create: Callable[..., Any],
    mem: Memroute | AsyncMemroute,
    api_key_id: str,
    *,
    api: ApiShape,
    session_id: str | None = None,
    provider: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Callable[..., Any]:
    """A ``create(**body)`` (sync, or ``async`` when ``create`` is) that augments ``body`` before calling
    ``create`` and observes the turn after; with ``stream=True`` it returns the SDK stream wrapped so that it
    is observed when it ends. Opt-out headers may come from ``headers`` or the call's ``extra_headers``."""
    return _wrap_create(create, _Turn(mem, api_key_id, api=api, session_id=session_id, provider=provider,
                                      headers=headers))


def _wrap_openai_helper(stream: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(stream)
    def observed_stream(*args: Any, **kwargs: Any) -> Any:
        return HelperStreamManager(stream(*args, **kwargs))

    return _mark(observed_stream)


def _wrap_anthropic_stream(stream: Callable[..., Any], turn: _Turn, *, is_async: bool) -> Callable[..., Any]:
    @functools.wraps(stream)
    def augmented_stream(*args: Any, **kwargs: Any) -> AugmentingStreamManager:
        body, transport, headers = turn.split(kwargs)

        def open_sync() -> Any:
            return stream(*args, **turn.augment(body, headers), **transport)

        async def open_async() -> Any:
            return stream(*args, **await turn.aaugment(body, headers), **transport)

        async def observe_async(reply: Any) -> None:
            await turn.aobserve(body, reply, headers)

        if is_async:
            return AugmentingStreamManager(open_async=open_async, observe_async=observe_async)
        return AugmentingStreamManager(open_sync=open_sync,
                                       observe_sync=lambda reply: turn.observe(body, reply, headers))

    return _mark(augmented_stream)


def _patch(resource: Any, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]], *,
           required: bool) -> None:
    method = getattr(resource, name, None)
    if not callable(method):
        if required:
            raise TypeError(f"{type(resource).__name__} has no {name}() method to wrap")
        return
    if getattr(method, _WRAPPED, False):
        return  # wrapping twice would inject twice
    setattr(resource, name, wrap(method))


_RAW_VIEWS = ("with_raw_response", "with_streaming_response")


def _forget_raw_views(*namespaces: Any) -> None:
    """Drop the SDK's cached ``with_raw_response`` / ``with_streaming_response`` views of ``namespaces``: the
    SDKs build them (once, on first access) from the resource's methods, so a view built before wrapping
    would keep calling the unwrapped ones. Rebuilt on next access, they call the wrapped methods."""
    for namespace in namespaces:
        if namespace is None:
            continue
        cached = getattr(namespace, "__dict__", {})
        for name in _RAW_VIEWS:
            if isinstance(inspect.getattr_static(type(namespace), name, None), functools.cached_property):
                cached.pop(name, None)


def _wrap_openai_resource(resource: Any, turn: _Turn, *, required: bool) -> None:
    _patch(resource, "create", lambda create: _wrap_create(create, turn), required=required)
    _patch(resource, "parse", lambda parse: _wrap_create(parse, turn), required=False)
    _patch(resource, "stream", _wrap_openai_helper, required=False)
    _forget_raw_views(resource)


def _path(root: Any, *names: str) -> Any:
    """``root.a.b`` for ``names`` ``("a", "b")``, or ``None`` where the installed SDK has no such attribute."""
    for name in names:
        root = getattr(root, name, None)
        if root is None:
            return None
    return root


def wrap_openai(client: Any, mem: Memroute | AsyncMemroute, api_key_id: str, *, session_id: str | None = None,
                provider: str | None = None, headers: Mapping[str, str] | None = None) -> Any:
    """Make ``client.chat.completions`` (Chat Completions shape) and, when the client has them,
    ``client.responses`` (Responses shape), ``client.beta.chat.completions`` and ``client.beta.responses``
    augment and observe: their ``create``, ``parse`` (structured outputs) and ``.stream()`` helpers, also when
    called through ``with_raw_response`` / ``with_streaming_response``. Works for ``OpenAI`` and
    ``AsyncOpenAI``. Returns ``client``. ``provider`` selects placement rules (``o1``, ``glm``, ``mimo``,
    ...)."""
    def turn(api: ApiShape) -> _Turn:
        return _Turn(mem, api_key_id, api=api, session_id=session_id, provider=provider, headers=headers)

    _wrap_openai_resource(client.chat.completions, turn("openai-chat"), required=True)
    optional: tuple[tuple[tuple[str, ...], ApiShape], ...] = (
        (("responses",), "responses"), (("beta", "chat", "completions"), "openai-chat"),
        (("beta", "responses"), "responses"))
    for names, api in optional:
        resource = _path(client, *names)
        if resource is not None:
            _wrap_openai_resource(resource, turn(api), required=False)
    _forget_raw_views(client, client.chat, _path(client, "beta"), _path(client, "beta", "chat"))
    return client


def _wrap_anthropic_resource(resource: Any, turn: _Turn) -> None:
    is_async = _is_async(resource.create) if callable(getattr(resource, "create", None)) else False
    _patch(resource, "create", lambda create: _wrap_create(create, turn), required=True)
    _patch(resource, "parse", lambda parse: _wrap_create(parse, turn), required=False)
    _patch(resource, "stream", lambda stream: _wrap_anthropic_stream(stream, turn, is_async=is_async),
           required=False)
    _forget_raw_views(resource)


def wrap_anthropic(client: Any, mem: Memroute | AsyncMemroute, api_key_id: str, *,
                   session_id: str | None = None, headers: Mapping[str, str] | None = None) -> Any:
    """Make ``client.messages`` and, when the client has it, ``client.beta.messages`` augment (into top-level
    ``system``) and observe: their ``create``, ``parse`` (structured outputs) and ``stream``, also when called
    through ``with_raw_response`` / ``with_streaming_response``. Works for ``Anthropic`` and
    ``AsyncAnthropic``. Returns ``client``."""
    turn = _Turn(mem, api_key_id, api="anthropic", session_id=session_id, provider="anthropic", headers=headers)
    _wrap_anthropic_resource(client.messages, turn)
    beta_messages = _path(client, "beta", "messages")
    if beta_messages is not None and callable(getattr(beta_messages, "create", None)):
        _wrap_anthropic_resource(beta_messages, turn)
    _forget_raw_views(client, _path(client, "beta"))
    return client
