"""Streamed replies through the SDK wrappers: events reach the caller unchanged, as they arrive; the reply's
text is collected on the side and handed to a callback once, when the stream ends.

* :class:`ObservedStream` / :class:`AsyncObservedStream` stand in for the SDK's ``Stream`` / ``AsyncStream``
  (what ``create(stream=True)`` returns): iterating them yields the SDK's own event objects; every other
  attribute (``response``, ``close()``, ...) is the SDK stream's.
* :class:`HelperStreamManager` stands in for OpenAI's ``.stream()`` helper managers, whose request goes
  through the (wrapped) ``create``: it only makes sure a stream left early is observed when the ``with``
  block exits rather than when it is garbage-collected.
* :class:`AugmentingStreamManager` stands in for Anthropic's ``messages.stream()`` manager, whose request
  does not go through ``create``: it augments when entered and observes the stream's final snapshot on exit.

The callback gets the reply (a response dict in the API's shape) when the stream ran to its end, ``None``
when it was closed early or failed: a cut-off reply is not mined, the user's turn always is. A failure in
memroute's bookkeeping is logged and never reaches the caller's stream.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any

from memroute.pipeline.requests import MAX_TEXT_CHARS, ApiShape

__all__ = [
    "AsyncObservedStream",
    "AugmentingStreamManager",
    "HelperStreamManager",
    "ObservedStream",
    "ReplyText",
    "capture",
]

log = logging.getLogger("memroute.integrations")

_CAPTURE: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("memroute_stream_capture",
                                                                            default=None)


def capture(stream: ObservedStream | AsyncObservedStream) -> None:
    """Hand ``stream`` to the :class:`HelperStreamManager` being entered in this context, if any."""
    captured = _CAPTURE.get()
    if captured is not None:
        captured.append(stream)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _text_piece(api: ApiShape, event: Any) -> str | None:
    """The assistant text one stream event adds (SDK event objects or plain dicts)."""
    if api == "openai-chat":
        for choice in _field(event, "choices") or ():
            if _field(choice, "index") in (0, None):  # the first choice is the reply memroute reads
                content = _field(_field(choice, "delta"), "content")
                return content if isinstance(content, str) else None
        return None
    kind = _field(event, "type")
    if api == "anthropic":
        delta = _field(event, "delta")
        if kind == "content_block_delta" and _field(delta, "type") == "text_delta":
            text = _field(delta, "text")
            return text if isinstance(text, str) else None
        return None
    if kind == "response.output_text.delta":
        delta = _field(event, "delta")
        return delta if isinstance(delta, str) else None
    return None


class ReplyText:
    """The assistant's text, collected from the stream events of one API shape (kept to the last 64 KiB,
    as extraction reads it)."""

    def __init__(self, api: ApiShape) -> None:
        self.api = api
        self._parts: list[str] = []
        self._size = 0
        self._broken = False

    def feed(self, event: Any) -> None:
        if self._broken:
            return
        try:
            piece = _text_piece(self.api, event)
        except Exception:  # an event shape memroute does not know: stop reading, never disturb the stream
            self._broken = True
            log.exception("memroute: could not read a stream event; the reply will not be mined")
            return
        if piece:
            self._parts.append(piece)
            self._size += len(piece)
            if self._size > 2 * MAX_TEXT_CHARS:
                text = "".join(self._parts)[-MAX_TEXT_CHARS:]
                self._parts, self._size = [text], len(text)

    def response(self) -> dict[str, Any] | None:
        """The reply as a response dict in the API's shape, for ``observe``."""
        if self._broken:
            return None
        text = "".join(self._parts)
        if self.api == "openai-chat":
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        if self.api == "anthropic":
            return {"role": "assistant", "content": [{"type": "text", "text": text}]}
        return {"output_text": text}


class ObservedStream:
    """A sync SDK stream, passed through event by event; ``on_end(reply_or_None)`` runs once when it ends
    (exhausted, closed, failed, or garbage-collected unfinished)."""

    def __init__(self, stream: Any, text: ReplyText, on_end: Callable[[Any], None]) -> None:
        self._stream = stream
        self._text = text
        self._on_end = on_end
        self._ended = False
        self._iterator = self._events()

    def __getattr__(self, name: str) -> Any:
        if name == "_stream":
            raise AttributeError(name)
        return getattr(self._stream, name)

    def __iter__(self) -> Iterator[Any]:
        return self._iterator

    def __next__(self) -> Any:
        return next(self._iterator)

    def __enter__(self) -> ObservedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._iterator.close()
            self.finish()

    def _events(self) -> Generator[Any, None, None]:
        complete = False
        try:
            for event in self._stream:
                self._text.feed(event)
                yield event
            complete = True
        finally:
            self.finish(complete)

    def finish(self, complete: bool = False) -> None:
        """Observe the turn now (once): with the reply when ``complete``."""
        if self._ended:
            return
        self._ended = True
        try:
            self._on_end(self._text.response() if complete else None)
        except Exception:
            log.exception("memroute: observe failed")


class AsyncObservedStream:
    """:class:`ObservedStream` for an SDK ``AsyncStream``; ``on_end`` is a coroutine function."""

    def __init__(self, stream: Any, text: ReplyText, on_end: Callable[[Any], Awaitable[None]]) -> None:
        self._stream = stream
        self._text = text
        self._on_end = on_end
        self._ended = False
        self._iterator = self._events()

    def __getattr__(self, name: str) -> Any:
        if name == "_stream":
            raise AttributeError(name)
        return getattr(self._stream, name)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterator

    async def __anext__(self) -> Any:
        return await self._iterator.__anext__()

    async def __aenter__(self) -> AsyncObservedStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        try:
            await self._stream.close()
        finally:
            await self._iterator.aclose()
            await self.finish()

    aclose = close

    async def _events(self) -> AsyncGenerator[Any, None]:
        complete = False
        try:
            async for event in self._stream:
                self._text.feed(event)
                yield event
            complete = True
        finally:
            await self.finish(complete)

    async def finish(self, complete: bool = False) -> None:
        """Observe the turn now (once): with the reply when ``complete``."""
        if self._ended:
            return
        self._ended = True
        try:
            await self._on_end(self._text.response() if complete else None)
        except Exception:
            log.exception("memroute: observe failed")


class HelperStreamManager:
    """Wraps an OpenAI ``.stream()`` manager (sync or async). Its request goes through the wrapped
    ``create``, which augments it and observes the raw stream; this only finishes that observation when the
    ``with`` block exits, so a stream left early is observed at once."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager
        self._captured: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        if name == "_manager":
            raise AttributeError(name)
        return getattr(self._manager, name)

    def __enter__(self) -> Any:
        token = _CAPTURE.set(self._captured)
        try:
            return self._manager.__enter__()
        finally:
            _CAPTURE.reset(token)

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self._manager.__exit__(*exc)
        finally:
            for stream in self._captured:
                stream.finish()

    async def __aenter__(self) -> Any:
        token = _CAPTURE.set(self._captured)
        try:
            return await self._manager.__aenter__()
        finally:
            _CAPTURE.reset(token)

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._manager.__aexit__(*exc)
        finally:
            for stream in self._captured:
                await stream.finish()


def _final_snapshot(stream: Any) -> Any:
    """An Anthropic ``MessageStream``'s accumulated message if the reply ran to its end, else ``None``."""
    try:
        snapshot = getattr(stream, "current_message_snapshot", None)
    except Exception:  # no event arrived yet
        return None
    return snapshot if _field(snapshot, "stop_reason") is not None else None


class AugmentingStreamManager:
    """Stands in for Anthropic's ``messages.stream(...)`` manager (sync or async): entering it augments the
    request, opens the SDK's own manager and returns the SDK's own stream object; leaving it observes the
    turn (with the final message when the stream reached its end)."""

    def __init__(self, *, open_sync: Callable[[], Any] | None = None,
                 open_async: Callable[[], Awaitable[Any]] | None = None,
                 observe_sync: Callable[[Any], None] | None = None,
                 observe_async: Callable[[Any], Awaitable[None]] | None = None) -> None:
        self._open_sync, self._open_async = open_sync, open_async
        self._observe_sync, self._observe_async = observe_sync, observe_async
        self._manager: Any = None
        self._stream: Any = None

    def __enter__(self) -> Any:
        if self._open_sync is None:
            raise TypeError("this stream manager is async: use 'async with'")
        self._manager = self._open_sync()
        self._stream = self._manager.__enter__()
        return self._stream

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self._manager.__exit__(*exc)
        finally:
            try:
                if self._observe_sync is not None:
                    self._observe_sync(_final_snapshot(self._stream))
            except Exception:
                log.exception("memroute: observe failed")

    async def __aenter__(self) -> Any:
        if self._open_async is None:
            raise TypeError("this stream manager is sync: use 'with'")
        self._manager = await self._open_async()
        self._stream = await self._manager.__aenter__()
        return self._stream

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._manager.__aexit__(*exc)
        finally:
            try:
                if self._observe_async is not None:
                    await self._observe_async(_final_snapshot(self._stream))
            except Exception:
                log.exception("memroute: observe failed")
