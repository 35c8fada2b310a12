"""A loopback fake model server speaking the OpenAI Chat Completions, OpenAI Responses and Anthropic Messages
wire formats — non-streamed JSON and streamed Server-Sent Events — plus minimal duck-typed SDK-like clients that
call it over a real socket with ``requests``.

It stands in for a paid remote API (the one thing the tests cannot reach). It records every request (method,
path, headers, JSON body) and answers with a scripted reply, so tests can see exactly what memroute sent to "the
model". Knobs for the proxy's tests:

* ``reply``: the assistant's text (streamed one word per event);
* ``fail_next(status, body, headers)``: the next request gets that answer instead (a 429 with ``Retry-After``, a
  500, ...);
* ``delay``: seconds to wait before answering (an upstream timeout);
* ``hold()``: streams send their first event, then wait until :meth:`release` (so a test can see the first
  event arrive while the upstream has not finished); a client that goes away while a stream is held is noticed
  (``disconnects``) without the server writing anything more.

HTTP/1.1 with keep-alive (streams use chunked transfer encoding), like a real API.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import requests

from tests.servers.loopback import LoopbackHTTPServer

__all__ = ["FakeAnthropicClient", "FakeLLMServer", "FakeOpenAIClient", "fake_llm_server"]

MODELS = {"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]}
ANTHROPIC_MODELS = {"data": [{"type": "model", "id": "claude-fake", "display_name": "Claude Fake",
                              "created_at": "2026-01-01T00:00:00Z"}],
                    "has_more": False, "first_id": "claude-fake", "last_id": "claude-fake"}


class FakeLLMServer(LoopbackHTTPServer):
    request_queue_size = 128

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.reply = "OK."
        self.outputs: deque[list[dict[str, Any]]] = deque()
        """Scripted Responses API ``output`` items (e.g. a ``function_call``), one list per non-streamed
        ``/v1/responses`` request, used before falling back to ``reply``."""
        self.delay = 0.0
        self._failures: deque[tuple[int, Any, dict[str, str]]] = deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._release.set()
        self.first_event_sent = threading.Event()
        """Set when a held stream has written its first event."""
        self.streams_finished = 0
        """Streams written to the end."""
        self.disconnects = 0
        """Streams whose client went away before the end."""

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})

    @property
    def last(self) -> dict[str, Any]:
        with self._lock:
            return self.requests[-1]

    def fail_next(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Answer the next request with ``status`` and JSON ``body`` (and ``headers``)."""
        with self._lock:
            self._failures.append((status, body, dict(headers or {})))

    def take_output(self) -> list[dict[str, Any]] | None:
        with self._lock:
            return self.outputs.popleft() if self.outputs else None

    def take_failure(self) -> tuple[int, Any, dict[str, str]] | None:
        with self._lock:
            return self._failures.popleft() if self._failures else None

    def hold(self) -> None:
        """Streams stop after their first event until :meth:`release`."""
        self.first_event_sent.clear()
        self._release.clear()

    def release(self) -> None:
        self._release.set()

    def count(self, attribute: str) -> None:
        with self._lock:
            setattr(self, attribute, getattr(self, attribute) + 1)


class _ClientGone(Exception):
    pass


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [part + (" " if i < len(parts) - 1 else "") for i, part in enumerate(parts)] or [""]


def _chat_events(body: dict[str, Any], reply: str) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        payload = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body.get("model"),
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": word}) for word in _words(reply)]
    events += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    return events


def _sse(event: str, payload: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: ".encode() + json.dumps(payload).encode() + b"\n\n"


def _anthropic_message(body: dict[str, Any], reply: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 3}}


def _anthropic_events(body: dict[str, Any], reply: str) -> list[bytes]:
    start = {**_anthropic_message(body, ""), "content": [], "stop_reason": None}
    events = [_sse("message_start", {"type": "message_start", "message": start}),
              _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}})]
    events += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": word}}) for word in _words(reply)]
    events += [_sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
               _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                                         "stop_sequence": None},
                                      "usage": {"output_tokens": 3}}),
               _sse("message_stop", {"type": "message_stop"})]
    return events


def _response(body: dict[str, Any], reply: str, status: str = "completed") -> dict[str, Any]:
    output = [{"type": "message", "id": "msg_1", "status": status, "role": "assistant",
               "content": [{"type": "output_text", "text": reply, "annotations": []}]}] if reply else []
    return {"id": "resp_1", "object": "response", "created_at": 0, "model": body.get("model"), "status": status,
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


def _responses_events(body: dict[str, Any], reply: str) -> list[bytes]:
    # The item and content-part events a real API sends around the deltas: the SDK's ``responses.stream()``
    # helper needs them to accumulate its snapshot.
    item = {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    payloads: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _response(body, "", "in_progress")}),
        ("response.output_item.added", {"output_index": 0, "item": item}),
        ("response.content_part.added", {"item_id": "msg_1", "output_index": 0, "content_index": 0, "part": part}),
    ]
    for word in _words(reply):
        payloads.append(("response.output_text.delta", {"item_id": "msg_1", "output_index": 0, "content_index": 0,
                                                        "delta": word, "logprobs": []}))
    done = _response(body, reply)
    payloads += [
        ("response.output_text.done", {"item_id": "msg_1", "output_index": 0, "content_index": 0, "text": reply,
                                       "logprobs": []}),
        ("response.content_part.done", {"item_id": "msg_1", "output_index": 0, "content_index": 0,
                                        "part": {**part, "text": reply}}),
        ("response.output_item.done", {"output_index": 0, "item": done["output"][0] if done["output"] else item}),
        ("response.completed", {"response": done}),
    ]
    return [_sse(kind, {"type": kind, "sequence_number": number, **payload})
            for number, (kind, payload) in enumerate(payloads)]


class _Handler(BaseHTTPRequestHandler):
    server: FakeLLMServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm holds the body back until
        # the client's delayed ACK (40 ms on Linux), which no real API server does.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", "req_fake")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:  # the client gave up waiting (a timeout test)
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError:
            raise _ClientGone from None

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _stream(self, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_fake")
        self.end_headers()
        try:
            for index, event in enumerate(events):
                self._chunk(event)
                if index == 0:
                    self.server.first_event_sent.set()
                    while not self.server._release.wait(0.01):
                        if self._client_gone():
                            raise _ClientGone
            self._chunk(b"")
        except _ClientGone:
            self.server.count("disconnects")
            self.close_connection = True
            return
        self.server.count("streams_finished")

    def do_GET(self) -> None:
        self.server.record("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, None)
        if self.path.split("?")[0] == "/v1/models":
            self._send(200, ANTHROPIC_MODELS if "anthropic-version" in self.headers else MODELS)
        elif self.path.startswith("/v1/models/"):
            self._send(200, {"id": self.path.rsplit("/", 1)[1], "object": "model", "created": 0, "owned_by": "fake"})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "invalid JSON"}})
            return
        self.server.record("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        if self.server.delay:
            time.sleep(self.server.delay)
        failure = self.server.take_failure()
        if failure is not None:
            self._send(failure[0], failure[1], failure[2])
            return
        reply = self.server.reply
        stream = isinstance(body, dict) and body.get("stream") is True
        path = self.path.split("?")[0]  # Anthropic's beta resources add ?beta=true
        if path == "/v1/chat/completions":
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                self._send(400, {"error": {"message": "messages is required"}})
                return
            if any(m.get("role") == "system" for m in body["messages"]) and _rejects_system(body.get("model")):
                # As the o1 and GLM APIs do (the reference's #1522: GLM's 400 "Request contains an invalid argument").
                self._send(400, {"error": {"message": "system role not supported by this model"}})
                return
            if stream:
                self._stream(_chat_events(body, reply))
                return
            self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": reply}}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}})
        elif path == "/v1/messages":
            if not isinstance(body, dict) or any(m.get("role") == "system" for m in body.get("messages", [])):
                self._send(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                            "message": "messages: role must be user or assistant"}})
                return
            if stream:
                self._stream(_anthropic_events(body, reply))
                return
            self._send(200, _anthropic_message(body, reply))
        elif path == "/v1/responses":
            if stream and isinstance(body, dict):
                self._stream(_responses_events(body, reply))
                return
            scripted = self.server.take_output()
            if scripted is not None:
                self._send(200, {**_response(body if isinstance(body, dict) else {}, ""), "output": scripted})
                return
            self._send(200, {**_response(body if isinstance(body, dict) else {}, reply), "output_text": reply})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})


@contextmanager
def fake_llm_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release()
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Resource:
    def __init__(self, base_url: str, path: str) -> None:
        self._url = base_url + path

    def create(self, **kwargs: Any) -> dict[str, Any]:
        headers = dict(kwargs.pop("extra_headers", None) or {})
        kwargs.pop("timeout", None)
        response = requests.post(self._url, json=kwargs, headers=headers, timeout=10)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]


class _Chat:
    def __init__(self, base_url: str) -> None:
        self.completions = _Resource(base_url, "/v1/chat/completions")


class FakeOpenAIClient:
    """``client.chat.completions.create(**body)`` and ``client.responses.create(**body)``, like the SDK."""

    def __init__(self, base_url: str) -> None:
        self.chat = _Chat(base_url)
        self.responses = _Resource(base_url, "/v1/responses")


class FakeAnthropicClient:
    """``client.messages.create(**body)``, like the SDK."""

    def __init__(self, base_url: str) -> None:
        self.messages = _Resource(base_url, "/v1/messages")


def _rejects_system(model: object) -> bool:
    """o1 models and the GLM family (``glm-4``, ``z-ai/glm-4.6``) refuse a system message."""
    return isinstance(model, str) and re.search(r"(^|/)(o1|glm)", model.lower()) is not None
