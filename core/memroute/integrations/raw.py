"""Raw responses through the SDK wrappers: ``with_raw_response`` and ``with_streaming_response``.

Both SDKs build those views from the resource's own methods, so a request made through them runs the wrapped
``create`` / ``parse`` (memroute augments it as usual) with an ``X-Stainless-Raw-Response`` header that asks
for a raw response object instead of the parsed one:

* ``"true"`` (OpenAI) or ``"raw"`` (Anthropic), from ``with_raw_response``: a response (OpenAI's
  ``LegacyAPIResponse``, Anthropic's ``APIResponse`` / ``AsyncAPIResponse``) whose body has already been read
  (unless the request streams). The wrapper parses it (the SDK caches the parsed object, so the caller's
  ``.parse()`` returns that same object) and observes the turn at once; the caller gets the SDK's own object.
* ``"stream"`` (``with_streaming_response``), and ``with_raw_response`` with ``stream=True``: the body has not
  been read,
  and reading it is the caller's business. The caller gets an :class:`ObservedRawResponse`, the SDK's response
  with ``parse()`` and ``json()`` observed: the parsed reply is observed when it is parsed, a parsed stream
  (``stream=True``) is an observed stream (:mod:`memroute.integrations.streams`). A response that is closed
  (the ``with`` block ends) or dropped without being parsed observes the user's turn only.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from memroute.integrations.streams import AsyncObservedStream, ObservedStream, ReplyText
from memroute.pipeline.requests import ApiShape

__all__ = ["RAW_RESPONSE_HEADER", "ObservedRawResponse", "aparse_now", "parse_now", "raw_mode"]

log = logging.getLogger("memroute.integrations")

RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"  # the same name in both SDKs (their _constants.py)


def raw_mode(transport: Mapping[str, Any]) -> str | None:
    """Which raw response the SDK asked for in this call's headers: ``"read"`` (``with_raw_response``: the
    body is read before the response is returned, unless it streams), ``"stream"``
    (``with_streaming_response``: the caller reads the body) or ``None`` (a plain call)."""
    headers = transport.get("extra_headers")
    if not isinstance(headers, Mapping):
        return None
    mode = headers.get(RAW_RESPONSE_HEADER)
    if mode in ("true", "raw"):
        return "read"
    return "stream" if mode == "stream" else None


def parse_now(response: Any) -> Any:
    """The parsed reply of a raw response whose body has been read (``None`` when it cannot be parsed: the
    caller's own ``.parse()`` then raises the SDK's error, not memroute)."""
    try:
        return response.parse()
    except Exception:
        log.exception("memroute: could not parse the raw response; the reply will not be mined")
        return None


async def aparse_now(response: Any) -> Any:
    """:func:`parse_now` for a response whose ``parse()`` may be a coroutine (Anthropic's ``AsyncAPIResponse``)."""
    try:
        parsed = response.parse()
        return await parsed if inspect.isawaitable(parsed) else parsed
    except Exception:
        log.exception("memroute: could not parse the raw response; the reply will not be mined")
        return None


class _Pending:
    """Whether the turn of one raw response has been observed; observes the user's turn only if it was not
    (kept apart from the response so that a garbage-collection finalizer can hold it)."""

    def __init__(self, observe_now: Callable[[Any], None]) -> None:
        self.observe_now = observe_now
        self.done = False

    def take(self) -> bool:
        if self.done:
            return False
        self.done = True
        return True

    def finish(self) -> None:
        if self.take():
            try:
                self.observe_now(None)
            except Exception:
                log.exception("memroute: observe failed")


class ObservedRawResponse:
    """An SDK raw response (``APIResponse``, ``AsyncAPIResponse`` or a streaming ``LegacyAPIResponse``) whose
    ``parse()`` / ``json()`` observe the turn; every other attribute is the SDK response's.

    ``observe_sync(reply)`` runs the observation without awaiting (used by sync responses and by the
    garbage-collection fallback); ``observe_async(reply)`` is used by async responses."""

    def __init__(self, raw: Any, *, api: ApiShape, streamed: bool, observe_sync: Callable[[Any], None],
                 observe_async: Callable[[Any], Awaitable[None]] | None = None) -> None:
        self._raw = raw
        self._api = api
        self._streamed = streamed
        self._observe_sync = observe_sync
        self._observe_async = observe_async
        self._pending = _Pending(observe_sync)
        self._stream: ObservedStream | AsyncObservedStream | None = None
        weakref.finalize(self, self._pending.finish)

    def __getattr__(self, name: str) -> Any:
        if name == "_raw":
            raise AttributeError(name)
        return getattr(self._raw, name)

    def __repr__(self) -> str:
        return f"<memroute observed {self._raw!r}>"

    # --- parse: observe the reply, or hand out an observed stream -----------------------------------
    def parse(self, **kwargs: Any) -> Any:
        if inspect.iscoroutinefunction(self._raw.parse):
            return self._aparse(**kwargs)
        parsed = self._raw.parse(**kwargs)
        if self._streamed:
            return self._wrap_stream(parsed)
        if self._pending.take():
            self._observe_sync(parsed)
        return parsed

    async def _aparse(self, **kwargs: Any) -> Any:
        parsed = await self._raw.parse(**kwargs)
        if self._streamed:
            return self._wrap_stream(parsed)
        if self._pending.take():
            await self._aobserve(parsed)
        return parsed

    def json(self) -> Any:
        if inspect.iscoroutinefunction(self._raw.json):
            return self._ajson()
        data = self._raw.json()
        if not self._streamed and self._pending.take():
            self._observe_sync(data)
        return data

    async def _ajson(self) -> Any:
        data = await self._raw.json()
        if not self._streamed and self._pending.take():
            await self._aobserve(data)
        return data

    def _wrap_stream(self, stream: Any) -> Any:
        if self._stream is None:
            if not self._pending.take():
                return stream
            if hasattr(stream, "__aiter__"):
                self._stream = AsyncObservedStream(stream, ReplyText(self._api), self._aobserve)
            else:
                self._stream = ObservedStream(stream, ReplyText(self._api), self._observe_sync)
        return self._stream

    async def _aobserve(self, reply: Any) -> None:
        if self._observe_async is None:
            self._observe_sync(reply)
        else:
            await self._observe_async(reply)

    # --- close: the user's turn, if nothing was parsed ------------------------------------------------
    def close(self) -> Any:
        close = getattr(self._raw, "close", None)
        if close is not None and inspect.iscoroutinefunction(close):
            return self._aclose(close)
        try:
            if close is not None:
                close()
        finally:
            if isinstance(self._stream, ObservedStream):
                self._stream.finish()  # a parsed stream closed before (or while) it was read
            self._pending.finish()
        return None

    async def _aclose(self, close: Callable[[], Awaitable[None]]) -> None:
        try:
            await close()
        finally:
            if isinstance(self._stream, AsyncObservedStream):
                await self._stream.finish()
            if self._pending.take():
                await self._aobserve(None)
