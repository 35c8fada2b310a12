"""A loopback fake model server speaking the OpenAI Chat Completions, OpenAI Responses and Anthropic Messages
wire formats, plus minimal duck-typed SDK-like clients that call it over a real socket with ``requests``.

The server records every request (path, headers, JSON body) and answers with a scripted reply, so tests
can see exactly what memroute sent to "the model".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

__all__ = ["FakeAnthropicClient", "FakeLLMServer", "FakeOpenAIClient", "fake_llm_server"]


class FakeLLMServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.reply = "OK."
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def record(self, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body})

    @property
    def last(self) -> dict[str, Any]:
        with self._lock:
            return self.requests[-1]


class _Handler(BaseHTTPRequestHandler):
    server: FakeLLMServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "invalid JSON"}})
            return
        self.server.record(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        reply = self.server.reply
        if self.path == "/v1/chat/completions":
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                self._send(400, {"error": {"message": "messages is required"}})
                return
            if any(m.get("role") == "system" for m in body["messages"]) and body.get("model", "").startswith("o1"):
                self._send(400, {"error": {"message": "system role not supported by this model"}})
                return
            self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": body.get("model"),
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": reply}}]})
        elif self.path == "/v1/messages":
            if not isinstance(body, dict) or any(m.get("role") == "system" for m in body.get("messages", [])):
                self._send(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                            "message": "messages: role must be user or assistant"}})
                return
            self._send(200, {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
                             "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn"})
        elif self.path == "/v1/responses":
            self._send(200, {"id": "resp_1", "object": "response", "output_text": reply,
                             "output": [{"type": "message", "role": "assistant",
                                         "content": [{"type": "output_text", "text": reply}]}]})
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
