"""A loopback server speaking the Cohere / Jina ``POST /v1/rerank`` shape, with injectable faults.

A paid rerank API cannot exist in this test environment, so this stands in for it. It scores each document by
the share of the query's words it contains (a real, deterministic relevance, so ordering can be checked),
requires ``Authorization: Bearer <api_key>`` when given one, and records every request. Faults are queued:
``server.fail_next(500)``, ``fail_next("slow")``, ``"not_json"``, ``"bad_index"``, ``"partial"`` (only the
best document), ``"empty"``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.servers.loopback import LoopbackHTTPServer

_WORD = re.compile(r"\w+")


def overlap_score(query: str, document: str) -> float:
    wanted = {w.casefold() for w in _WORD.findall(query)}
    have = {w.casefold() for w in _WORD.findall(document)}
    return len(wanted & have) / max(1, len(wanted))


class RerankServer:
    def __init__(self, *, api_key: str | None = None, slow_seconds: float = 1.0) -> None:
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
        with self.lock:
            self.faults.extend(faults)

    def next_fault(self) -> Any:
        with self.lock:
            return self.faults.popleft() if self.faults else None


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        state: RerankServer = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": "bad json"})
            return
        state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        if self.path != "/v1/rerank":
            self._send(404, {"error": "not found"})
            return
        if state.api_key is not None and self.headers.get("Authorization") != f"Bearer {state.api_key}":
            self._send(401, {"error": "unauthorized"})
            return
        fault = state.next_fault()
        if isinstance(fault, int):
            self._send(fault, {"error": "injected"})
            return
        if fault == "slow":
            time.sleep(state.slow_seconds)
        if fault == "not_json":
            self._send(200, b"<html>oops</html>")
            return
        documents = body.get("documents") or []
        scored = sorted(((overlap_score(body.get("query", ""), d), i) for i, d in enumerate(documents)),
                        key=lambda pair: (-pair[0], pair[1]))
        results = [{"index": i, "relevance_score": s} for s, i in scored[: body.get("top_n") or len(documents)]]
        if fault == "bad_index":
            results[0]["index"] = len(documents) + 5
        elif fault == "partial":
            results = results[:1]
        elif fault == "empty":
            results = []
        self._send(200, {"model": body.get("model"), "results": results})


@contextmanager
def rerank_server(**kwargs: Any) -> Iterator[RerankServer]:
    state = RerankServer(**kwargs)
    httpd = LoopbackHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.state = state  # type: ignore[attr-defined]
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
