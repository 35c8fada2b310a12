"""A loopback server that speaks the OpenAI ``POST /v1/embeddings`` API, with injectable faults.

It computes real vectors (by default with memroute's hashing embedder; pass ``embed=`` to use a real model)
so a client test can check ordering, batching and similarity, not just plumbing. Faults are queued per
request: ``server.fail_next(401)``, ``fail_next("slow")``, ``fail_next("malformed")`` and so on.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np

from tests.servers.loopback import LoopbackHTTPServer

Embed = Callable[[Sequence[str]], np.ndarray]


def hashing_embed(dimensions: int = 64) -> Embed:
    from memroute.testing.fakes import HashingEmbeddingSource

    source = HashingEmbeddingSource(dimensions)
    return source.embed_batch


class EmbeddingsServer:
    """State shared with the request handler. ``requests`` records every request (path, headers, body)."""

    def __init__(self, embed: Embed | None = None, *, api_key: str | None = None, slow_seconds: float = 2.0) -> None:
        self.embed = embed or hashing_embed()
        self.api_key = api_key
        self.slow_seconds = slow_seconds
        self.faults: deque[Any] = deque()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def fail_next(self, *faults: Any) -> None:
        """Queue faults for the next requests: an HTTP status (int), or one of ``slow``, ``not_json``,
        ``missing_data``, ``wrong_count``, ``bad_index``, ``duplicate_index``, ``nan``, ``ragged``,
        ``empty_vector``, ``string_vector``, ``redirect_metadata``, ``shuffled`` (valid, out of order)."""
        with self.lock:
            self.faults.extend(faults)

    def next_fault(self) -> Any:
        with self.lock:
            return self.faults.popleft() if self.faults else None


class _Handler(BaseHTTPRequestHandler):
    server: Any  # LoopbackHTTPServer with .state

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any = None, *, raw: bytes | None = None,
              headers: dict[str, str] | None = None) -> None:
        body = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "param": None, "code": None}},
                   headers=headers)

    def do_POST(self) -> None:
        state: EmbeddingsServer = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        with state.lock:
            state.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
        if self.path.rstrip("/") != "/v1/embeddings":
            self._error(404, f"no route {self.path}", "invalid_request_error")
            return
        fault = state.next_fault()
        if isinstance(fault, int):
            headers = {"Retry-After": "7"} if fault == 429 else None
            self._error(fault, f"injected HTTP {fault}", "injected", headers)
            return
        if fault == "slow":
            time.sleep(state.slow_seconds)
        if fault == "redirect_metadata":
            self.send_response(307)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if state.api_key is not None and self.headers.get("Authorization") != f"Bearer {state.api_key}":
            self._error(401, "Incorrect API key provided", "invalid_request_error")
            return
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            self._error(400, "model is required", "invalid_request_error")
            return
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) and t for t in inputs):
            self._error(400, "input must be a non-empty string or array of non-empty strings", "invalid_request_error")
            return
        vectors = np.asarray(state.embed(inputs), dtype=np.float64)
        dimensions = body.get("dimensions")
        if isinstance(dimensions, int) and 0 < dimensions < vectors.shape[1]:
            vectors = vectors[:, :dimensions]
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        data: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": [float(x) for x in row]} for i, row in enumerate(vectors)
        ]
        if fault == "not_json":
            self._send(200, raw=b"<html>gateway error</html>")
            return
        if fault == "missing_data":
            self._send(200, {"object": "list", "model": body["model"]})
            return
        if fault == "wrong_count":
            data = data[:-1] if len(data) > 1 else data + data
        elif fault == "bad_index":
            data[0]["index"] = len(data) + 5
        elif fault == "duplicate_index" and len(data) > 1:
            data[1]["index"] = data[0]["index"]
        elif fault == "nan":
            data[0]["embedding"][0] = float("nan")
        elif fault == "ragged":
            data[0]["embedding"] = data[0]["embedding"][:-1]
        elif fault == "empty_vector":
            data[0]["embedding"] = []
        elif fault == "string_vector":
            data[0]["embedding"] = ["0.1"] * len(data[0]["embedding"])
        elif fault == "shuffled":
            data = list(reversed(data))
        self._send(200, {"object": "list", "data": data, "model": body["model"],
                         "usage": {"prompt_tokens": 0, "total_tokens": 0}})


class _Server(LoopbackHTTPServer):
    pass


@contextmanager
def serve(embed: Embed | None = None, **kwargs: Any) -> Iterator[EmbeddingsServer]:
    """Run an :class:`EmbeddingsServer` on ``127.0.0.1`` (a free port) for the ``with`` block."""
    state = EmbeddingsServer(embed, **kwargs)
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.state = state  # type: ignore[attr-defined]
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
