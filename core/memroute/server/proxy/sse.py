"""Reading a streamed reply after the fact: the proxy forwards Server-Sent Events byte for byte as they arrive
and keeps a bounded copy; when the stream is over, :func:`reply_from_events` turns that copy into a
non-streamed reply shape that :func:`memroute.pipeline.requests.assistant_text` understands, for ``observe``.

Nothing here runs on the streaming path itself, so the events reach the client untouched and unparsed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final, Literal

__all__ = ["MAX_COLLECTED_BYTES", "ReplyCollector", "iter_events", "reply_from_events"]

MAX_COLLECTED_BYTES: Final = 8 * 1024 * 1024
"""At most this much of a stream is kept for extraction (the reply text itself is then capped at 64 KiB)."""

Api = Literal["openai-chat", "responses", "anthropic"]


class ReplyCollector:
    """A bounded copy of the bytes of one streamed reply."""

    def __init__(self, limit: int = MAX_COLLECTED_BYTES) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self.limit = limit
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        if self._size >= self.limit:
            self.truncated = True
            return
        room = self.limit - self._size
        if len(chunk) > room:
            chunk, self.truncated = chunk[:room], True
        self._chunks.append(chunk)
        self._size += len(chunk)

    @property
    def size(self) -> int:
        return self._size

    def data(self) -> bytes:
        return b"".join(self._chunks)


def iter_events(data: bytes) -> Iterator[tuple[str, str]]:
    """``(event, data)`` for every event in an SSE byte stream (``event`` is ``""`` when the event names none;
    multi-line ``data`` joined with newlines; comments and incomplete trailing events skipped)."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    for block in text.split("\n\n"):
        event, lines = "", []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                lines.append(value)
        if lines:
            yield event, "\n".join(lines)


def _payloads(data: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    for event, raw in iter_events(data):
        if raw.strip() == "[DONE]":
            continue
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(payload, dict):
            yield event or str(payload.get("type", "")), payload


def reply_from_events(api: Api, data: bytes) -> dict[str, Any] | None:
    """The assistant's reply in a stream, as the non-streamed response of the same API would carry it
    (``None`` when the stream holds no text)."""
    pieces: list[str] = []
    if api == "openai-chat":
        for _event, payload in _payloads(data):
            for choice in payload.get("choices") or ():
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    content = (choice.get("delta") or {}).get("content")
                    if isinstance(content, str):
                        pieces.append(content)
        text = "".join(pieces)
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]} if text else None
    if api == "anthropic":
        for event, payload in _payloads(data):
            delta = payload.get("delta")
            if (event == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta"
                    and isinstance(delta.get("text"), str)):
                pieces.append(delta["text"])
        text = "".join(pieces)
        return {"content": [{"type": "text", "text": text}]} if text else None
    for event, payload in _payloads(data):
        if event == "response.output_text.delta" and isinstance(payload.get("delta"), str):
            pieces.append(payload["delta"])
    text = "".join(pieces)
    return {"output_text": text} if text else None
