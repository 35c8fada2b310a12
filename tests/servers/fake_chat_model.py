"""A loopback fake of an OpenAI-compatible model server for the ``llm`` extractor: ``POST /v1/chat/completions``
answered in the real Chat Completions wire format (``chat.completion`` objects with ``choices`` and ``usage``;
errors as ``{"error": {...}}`` with their status and headers), over a real socket.

There is no model here, so the tests script its judgement: each answer is queued per step of the extractor
(``extract``: the request whose system prompt asks for facts; ``decide``: the one that asks for operations) and
stands in for what a model would have answered. The server records every request (headers and JSON body) so a
test can check exactly what memroute sent to the model: which memories, quoted how.

Besides a JSON answer, a scripted step can be :class:`Status` (a 429 with ``Retry-After``, a 500, a 400 that
refuses ``response_format``) or :class:`Slow` (an answer that comes after the client's timeout).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import attrs

from tests.servers.loopback import LoopbackHTTPServer

__all__ = ["Drip", "FakeChatModel", "Slow", "Status", "fake_chat_model"]


@attrs.frozen
class Status:
    """Answer with this HTTP status, error body and headers."""

    status: int
    message: str = "error"
    headers: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Slow:
    """Wait ``seconds``, then answer ``then``."""

    seconds: float
    then: Any = None


@attrs.frozen
class Drip:
    """Send a 200 answer's body one byte every ``interval`` seconds (a server that never quite times out)."""

    interval: float
    size: int = 1000


def _step(body: Any) -> str:
    messages = body.get("messages") if isinstance(body, dict) else None
    system = messages[0].get("content", "") if isinstance(messages, list) and messages else ""
    return "decide" if "long-term memory consistent" in system else "extract"


class FakeChatModel(LoopbackHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._script: dict[str, deque[Any]] = {"extract": deque(), "decide": deque()}
        self.usage = {"prompt_tokens": 120, "completion_tokens": 30}
        """What every answer reports it cost (``None``: no ``usage`` in the answer)."""

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def on_extract(self, *answers: Any) -> None:
        """Queue step-1 answers: a dict or list is sent as the JSON content, a str as it is."""
        with self._lock:
            self._script["extract"].extend(answers)

    def on_decide(self, *answers: Any) -> None:
        with self._lock:
            self._script["decide"].extend(answers)

    def next_answer(self, step: str) -> Any:
        with self._lock:
            queue = self._script[step]
            if queue:
                return queue.popleft()
        return {"facts": []} if step == "extract" else {"operations": []}

    def record(self, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body, "step": _step(body)})

    def of_step(self, step: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["step"] == step]

    def data_of(self, request: dict[str, Any]) -> Any:
        """The JSON document a request carried in its user message (the quoted data)."""
        return json.loads(request["body"]["messages"][1]["content"])


class _Handler(BaseHTTPRequestHandler):
    server: FakeChatModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (a timeout test)
            self.close_connection = True

    def _drip(self, drip: Drip) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(drip.size))
            self.end_headers()
            for _ in range(drip.size):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(drip.interval)
        except OSError:  # the client gave up, as it should
            self.close_connection = True

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "invalid JSON", "type": "invalid_request_error"}})
            return
        if self.path.split("?")[0] != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        self.server.record(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        answer = self.server.next_answer(_step(body))
        if isinstance(answer, Slow):
            time.sleep(answer.seconds)
            answer = answer.then if answer.then is not None else {"facts": []}
        if isinstance(answer, Drip):
            self._drip(answer)
            return
        if isinstance(answer, Status):
            self._send(answer.status, {"error": {"message": answer.message, "type": "api_error",
                                                 "param": None, "code": None}}, answer.headers)
            return
        content = answer if isinstance(answer, str) else json.dumps(answer)
        payload: dict[str, Any] = {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model"),
            "system_fingerprint": None,
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": content, "refusal": None}}],
        }
        if self.server.usage is not None:
            payload["usage"] = {**self.server.usage,
                                "total_tokens": sum(self.server.usage.values())}
        self._send(200, payload)


@contextmanager
def fake_chat_model() -> Iterator[FakeChatModel]:
    server = FakeChatModel()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
