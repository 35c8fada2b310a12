"""A loopback server speaking Qdrant's REST API, backed by qdrant-client's local mode.

No Qdrant server can be installed here (no package registry ships the binary), and local mode is one process
at a time. ``PUT /api/settings/qdrant`` needs a Qdrant *server* — something at ``host:port`` that several
memroute processes share and that a probe can reach or fail to reach — so this serves the REST routes the
``qdrant`` store uses, on ``127.0.0.1``, with ``QdrantClient(":memory:")`` doing the real work (its exact
search and filter semantics). Requests are parsed with qdrant-client's own REST models and answered in
Qdrant's envelope (``{"result": ..., "status": "ok", "time": ...}``; errors ``{"status": {"error": ...}}``).

Stricter or narrower than a real server, on purpose: only the routes below exist (anything else is 404);
an ``api_key`` given to the constructor is required in the ``api-key`` header (401 otherwise, as the server
does); quantisation is recorded but not applied (local mode ignores it). ``requests`` records every
``(method, path)``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client.http import models as m

from tests.servers.loopback import LoopbackHTTPServer

_COLLECTION = re.compile(r"^/collections/([^/]+)(/.*)?$")


class QdrantRestServer:
    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.client = QdrantClient(":memory:")
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.quantization: dict[str, Any] = {}
        self._server: LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> QdrantRestServer:
        handler = type("Handler", (_Handler,), {"qdrant": self})
        self._server = LoopbackHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="qdrant-rest", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self.client.close()

    def __enter__(self) -> QdrantRestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def points(self, collection: str) -> int:
        with self.lock:
            if not self.client.collection_exists(collection):
                return 0
            return int(self.client.count(collection, exact=True).count)

    # --- routes ----------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, body: Any) -> Any:
        c = self.client
        if method == "GET" and path == "/":
            return {"title": "qdrant - vector search engine", "version": "1.20.0", "commit": None}
        if method == "GET" and path == "/collections":
            return c.get_collections()
        match = _COLLECTION.match(path)
        if match is None:
            raise LookupError(f"no route {method} {path}")
        name, rest = match.group(1), match.group(2) or ""
        routes: dict[tuple[str, str], Callable[[], Any]] = {
            ("GET", "/exists"): lambda: {"exists": c.collection_exists(name)},
            ("GET", ""): lambda: c.get_collection(name),
            ("DELETE", ""): lambda: c.delete_collection(name),
            ("PUT", ""): lambda: self._create(name, m.CreateCollection.model_validate(body)),
            ("PUT", "/index"): lambda: self._index(name, m.CreateFieldIndex.model_validate(body)),
            ("PUT", "/points"): lambda: c.upsert(name, points=m.PointsList.model_validate(body).points),
            ("POST", "/points/delete"): lambda: c.delete(name, points_selector=(
                m.PointIdsList.model_validate(body) if "points" in body else m.FilterSelector.model_validate(body))),
            ("POST", "/points/count"): lambda: self._count(name, m.CountRequest.model_validate(body or {})),
            ("POST", "/points/query"): lambda: self._query(name, m.QueryRequest.model_validate(body)),
            ("POST", "/points/scroll"): lambda: self._scroll(name, m.ScrollRequest.model_validate(body or {})),
        }
        route = routes.get((method, rest))
        if route is None:
            raise LookupError(f"no route {method} {path}")
        return route()

    def _create(self, name: str, req: m.CreateCollection) -> bool:
        self.quantization[name] = req.quantization_config
        return self.client.create_collection(name, vectors_config=req.vectors, metadata=req.metadata)

    def _index(self, name: str, req: m.CreateFieldIndex) -> m.UpdateResult:
        if not self.client.collection_exists(name):
            raise KeyError(f"Collection {name} not found")
        return m.UpdateResult(operation_id=0, status=m.UpdateStatus.COMPLETED)

    def _count(self, name: str, req: m.CountRequest) -> m.CountResult:
        return self.client.count(name, count_filter=req.filter, exact=True)

    def _query(self, name: str, req: m.QueryRequest) -> m.QueryResponse:
        return self.client.query_points(name, query=req.query, query_filter=req.filter, limit=req.limit or 10,
                                        with_payload=req.with_payload if req.with_payload is not None else False,
                                        with_vectors=req.with_vector if req.with_vector is not None else False)

    def _scroll(self, name: str, req: m.ScrollRequest) -> m.ScrollResult:
        points, offset = self.client.scroll(name, scroll_filter=req.filter, limit=req.limit or 10, offset=req.offset,
                                            with_payload=bool(req.with_payload), with_vectors=bool(req.with_vector))
        return m.ScrollResult(points=points, next_page_offset=offset)


class _Handler(BaseHTTPRequestHandler):
    qdrant: QdrantRestServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _serve(self, method: str) -> None:
        started = time.perf_counter()
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        server = self.qdrant
        server.requests.append((method, path))
        if server.api_key is not None and self.headers.get("api-key") != server.api_key:
            self._send(401, {"status": {"error": "Must provide an API key or an Authorization bearer token"},
                             "time": 0.0})
            return
        try:
            body = json.loads(raw) if raw else None
            with server.lock:
                result = server.handle(method, path, body)
        except LookupError as exc:
            self._send(404, {"status": {"error": f"Not found: {exc}"}, "time": 0.0})
            return
        except (ValueError, TypeError) as exc:
            status = 404 if "not found" in str(exc).lower() else 400
            self._send(status, {"status": {"error": f"Wrong input: {exc}"}, "time": 0.0})
            return
        except Exception as exc:  # a bug in this double: answer, never drop the connection
            self._send(500, {"status": {"error": f"{type(exc).__name__}: {exc}"}, "time": 0.0})
            return
        if hasattr(result, "model_dump"):
            result = result.model_dump(mode="json")
        self._send(200, {"result": result, "status": "ok", "time": time.perf_counter() - started})

    def do_GET(self) -> None:
        self._serve("GET")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")
