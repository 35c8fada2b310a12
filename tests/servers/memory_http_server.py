"""A real loopback server speaking the memroute HTTP memory protocol (``docs/backends/http.md``).

It runs the stdlib ``ThreadingHTTPServer`` on ``127.0.0.1`` port 0 in a thread, over a store that implements
the protocol's semantics for real: by default memroute's :class:`~memroute.testing.memory.InMemoryBackend`
(which passes the backend conformance suite), or any :class:`~memroute.interfaces.MemoryBackend` passed as
``store`` (the conformance tests put memroute's SQLite backend behind it). Optional bearer-token auth (``api_key``).

Knobs (set on ``server.knobs``) let tests make it misbehave: fail with a status, answer slowly, send a
malformed body, redirect elsewhere; every request is recorded (method, path, query, headers, body).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import attrs

from memroute.config.serialization import memory_to_dict
from memroute.errors import ConflictError, MemrouteError, ValidationError
from memroute.interfaces import MemoryBackend
from memroute.models import (
    ListFilter,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
    as_utc,
)
from memroute.testing.memory import InMemoryBackend
from tests.servers.loopback import LoopbackHTTPServer

__all__ = ["MemoryHttpServer", "Recorded", "running_server"]

_TOKEN = re.compile(r"\w+", re.UNICODE)


@attrs.define
class Recorded:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@attrs.define
class Knobs:
    """Ways to make the server misbehave. ``fail_status`` answers every matching request with that status
    (``fail_times`` limits how many); ``only_paths`` restricts the knobs to paths containing one of the
    strings."""

    fail_status: int | None = None
    fail_times: int | None = None
    fail_body: str = '{"error": "injected failure"}'
    retry_after: str | None = None
    delay_s: float = 0.0
    malformed_body: str | None = None
    redirect_to: str | None = None
    only_paths: tuple[str, ...] = ()
    handler: Callable[[BaseHTTPRequestHandler], bool] | None = None
    """A custom responder: return True when it answered the request itself."""


class MemoryHttpServer:
    """Serve the protocol at ``http://127.0.0.1:<port><prefix>`` (``prefix`` default ``/v1``)."""

    def __init__(self, prefix: str = "/v1", api_key: str | None = None, store: MemoryBackend | None = None) -> None:
        self.prefix = prefix.rstrip("/")
        self.api_key = api_key
        self.path_aliases: dict[str, str] = {}
        """Path prefix → the protocol path it stands for (a server with its own route names)."""
        self.query_aliases: dict[str, str] = {}
        """Query-parameter name → the protocol name it stands for."""
        self.empty_write_responses = False
        """Answer PATCH with 204 and no body (the reference's servers do)."""
        self.store: Any = store if store is not None else InMemoryBackend("server-store")
        self.knobs = Knobs()
        self.requests: list[Recorded] = []
        self._requests_lock = threading.Lock()
        self._httpd = LoopbackHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def start(self) -> MemoryHttpServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="memory-http-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def reset_knobs(self) -> None:
        self.knobs = Knobs()

    def count(self, method: str | None = None, path_contains: str = "") -> int:
        with self._requests_lock:
            return sum(1 for r in self.requests
                       if (method is None or r.method == method) and path_contains in r.path)

    def _record(self, record: Recorded) -> None:
        with self._requests_lock:
            self.requests.append(record)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body leave in one write (no Nagle / delayed-ACK stalls)

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def _dispatch(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server._record(Recorded(self.command, parts.path, urllib.parse.parse_qs(parts.query),
                                        {k: v for k, v in self.headers.items()}, body))
                try:
                    server._respond(self, parts, body)
                except BrokenPipeError:
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

            def send_json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_raw(status, data, "application/json", extra)

            def send_raw(self, status: int, data: bytes, content_type: str = "application/json",
                         extra: dict[str, str] | None = None) -> None:
                self.send_response(status)
                if data or status != 204:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if data:
                    self.wfile.write(data)

        return Handler

    # --- protocol --------------------------------------------------------------------------------------
    def _knobs_apply(self, path: str) -> bool:
        knobs = self.knobs
        return not knobs.only_paths or any(p in path for p in knobs.only_paths)

    def _respond(self, h: Any, parts: urllib.parse.SplitResult, body: bytes) -> None:
        knobs = self.knobs
        path = parts.path
        if self._knobs_apply(path):
            if knobs.handler is not None and knobs.handler(h):
                return
            if knobs.delay_s:
                time.sleep(knobs.delay_s)
            if knobs.redirect_to is not None:
                h.send_json(302, None, {"Location": knobs.redirect_to})
                return
            if knobs.fail_status is not None and (knobs.fail_times is None or knobs.fail_times > 0):
                if knobs.fail_times is not None:
                    knobs.fail_times -= 1
                extra = {"Retry-After": knobs.retry_after} if knobs.retry_after else None
                h.send_raw(knobs.fail_status, knobs.fail_body.encode(), "application/json", extra)
                return
            if knobs.malformed_body is not None:
                h.send_raw(200, knobs.malformed_body.encode())
                return
        if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            h.send_json(401, {"error": "Unauthorized"})
            return
        for alias, target in self.path_aliases.items():
            if path.startswith(alias):
                path = target + path[len(alias):]
                break
        if not path.startswith(self.prefix + "/"):
            h.send_json(404, {"error": f"no route {path}"})
            return
        route = path[len(self.prefix) + 1:]
        query = {self.query_aliases.get(k, k): v[-1]
                 for k, v in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items()}
        try:
            self._route(h, h.command, route, query, body)
        except ValidationError as exc:
            h.send_json(400, {"message": "Invalid request", "details": [{"field": f, "message": m}
                                                                        for f, m in exc.problems]})
        except (ValueError, KeyError, TypeError) as exc:
            h.send_json(400, {"message": f"Invalid request: {exc}"})
        except MemrouteError as exc:
            h.send_json(500, {"error": {"message": str(exc)}})

    def _route(self, h: Any, method: str, route: str, query: dict[str, str], body: bytes) -> None:
        store = self.store
        if route == "health" and method == "GET":
            h.send_json(200, {"status": "ok"})
        elif route == "memories/search" and method == "GET":
            hits = store.search(_search_query(query))
            h.send_json(200, [{"memory": memory_to_dict(hit.memory), "score": hit.score} for hit in hits])
        elif route == "memories" and method == "GET":
            page = store.list(_list_filter(query))
            h.send_json(200, {"data": [memory_to_dict(m) for m in page.data], "total": page.total,
                              "by_type": page.by_type})
        elif route == "memories" and method == "POST":
            data = json.loads(body)
            h.send_json(201, memory_to_dict(store.create(NewMemory(**data))))
        elif route.startswith("memories/") and route.count("/") == 1:
            memory_id = urllib.parse.unquote(route.split("/", 1)[1])
            self._item(h, method, memory_id, body)
        else:
            h.send_json(404, {"error": f"no route {method} {route}"})

    def _item(self, h: Any, method: str, memory_id: str, body: bytes) -> None:
        store = self.store
        if method == "GET":
            memory = store.get(memory_id)
            h.send_json(200, memory_to_dict(memory)) if memory else h.send_json(404, {"error": "Not found"})
        elif method == "PUT":
            data = json.loads(body)
            memory = Memory(**data)
            if memory.id != memory_id:
                h.send_json(400, {"message": "id in body does not match the path"})
                return
            store.put(memory)
            h.send_json(200, memory_to_dict(memory))
        elif method == "PATCH":
            data = json.loads(body)
            try:
                result = store.update(memory_id, MemoryPatch(**data))
            except ConflictError as exc:
                h.send_json(409, {"error": str(exc)})
                return
            if result is None:
                h.send_json(404, {"error": "Memory not found"})
            elif self.empty_write_responses:
                h.send_json(204, None)
            else:
                assert isinstance(result, Memory)
                h.send_json(200, memory_to_dict(result))
        elif method == "DELETE":
            h.send_json(204, None) if store.delete(memory_id) else h.send_json(404, {"error": "Memory not found"})
        else:
            h.send_json(405, {"error": "method not allowed"})


def _int(query: dict[str, str], name: str, default: int | None) -> int | None:
    return int(query[name]) if query.get(name) else default


def _list_filter(query: dict[str, str]) -> ListFilter:
    return ListFilter(
        api_key_id=query.get("api_key_id") or None, type=query.get("type") or None,
        session_id=query.get("session_id") or None, query=query.get("query") or None,
        limit=_int(query, "limit", 50) or 50, offset=_int(query, "offset", 0) or 0,
        order_by=query.get("order_by") or "created_at", order_dir=query.get("order_dir") or "desc",
    )


def _search_query(query: dict[str, str]) -> SearchQuery:
    now: datetime | str = query["now"] if query.get("now") else as_utc(datetime.now().astimezone())
    return SearchQuery(
        api_key_id=query.get("api_key_id", ""), text=query.get("query", ""),
        strategy=query.get("strategy") or "hybrid", limit=_int(query, "limit", 20) or 20,
        session_id=query.get("session_id") or None, retention_days=_int(query, "retention_days", None), now=now,
    )


@contextmanager
def running_server(prefix: str = "/v1", api_key: str | None = None,
                   store: MemoryBackend | None = None) -> Iterator[MemoryHttpServer]:
    """A started server, stopped on exit."""
    server = MemoryHttpServer(prefix=prefix, api_key=api_key, store=store).start()
    try:
        yield server
    finally:
        server.stop()
