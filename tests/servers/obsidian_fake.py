"""A loopback fake of the Obsidian "Local REST API" plugin, built from ``reference/apis.md`` §1 and §4.1.

Real HTTP (or HTTPS with a self-signed certificate made at test time) over a socket on ``127.0.0.1``, backed
by a real directory that plays the vault. What it does, with the version switch ``plugin_version``
(``"3.6.2"``, ``"4.1.7"`` or ``"5.1.0"``):

* Auth exactly as the plugin: ``Authorization`` must equal ``Bearer <key>`` (case-sensitive, no trimming) on
  every route except ``/``, ``/obsidian-local-rest-api.crt`` and ``/openapi.yaml``, *including unknown
  routes* (the middleware runs before routing). Failure: 401 ``{"message": ..., "errorCode": 40101}``.
* Error bodies ``{"message", "errorCode"}`` with status ``errorCode // 100``; status-only errors use Node's
  reason phrase and ``status * 100`` (``{"message": "Not Found", "errorCode": 40400}``).
* ``GET /`` (status), ``GET /vault/`` and ``GET /vault/{dir}/`` (listing), ``GET/PUT/POST/DELETE
  /vault/{path}``, ``Accept: application/vnd.olrapi.note+json`` (exact compare) for NoteJson,
  ``POST /search/simple/`` and ``POST /search/`` with JsonLogic (exact ``Content-Type`` compare).
* Paths: 5.x percent-decodes each segment on its own (``%2F`` inside a segment does not resolve); before 5.0
  the whole path is decoded first. Traversal out of the vault: 400 40021 from 4.1.0 on.
* 5.x DELETE moves the file to ``.trash/`` unless ``?permanent=true``; 3.x/4.x delete permanently and ignore
  the query string. Simple search: ascending score on 3.x, descending on 4.x/5.x. NoteJson gains ``links`` /
  ``backlinks`` in 4.x and ``unresolvedLinks`` in 5.x. JsonLogic blanks ``content`` from 4.0.3 on unless
  the query text mentions ``"content"``. Frontmatter tags that are not strings are dropped from 4.0.1 on
  (3.x turns them into strings).

Where the fake is **stricter than, or different from, the real plugin** (on purpose, or because the real
behaviour is unverified):

* PUT with a non-``text/*`` Content-Type is refused with 400 40010 (the real plugin writes bytes or fails).
* Every PATCH is refused with 400 40081: memroute must not depend on PATCH.
* The DQL content type (3.x) is refused with 400 40070 "not supported by fake".
* Simple search is a case-insensitive substring matcher over ``basename + "\\n\\n" + content`` with made-up
  scores; the real one is Obsidian's fuzzy ``prepareSimpleSearch``. Tests must not assert scores or order.
* Canned error messages other than 40101 and the status-only ones are paraphrases, not the plugin's text.
* Traversal on 3.x gives 404 (the real 3.x has no 40021 guard; what Obsidian's adapter then does is
  unverified, and a test fake must never write outside its directory).
* URL sub-targets (``/heading/…``, ``/block/…``, ``/frontmatter/…``) are not served; only the real quirk that
  PUT/POST of a *new* file whose path has such a segment answers 404 is.

Fault knobs: ``stop()`` / ``start()`` (Obsidian closed: connection refused, same port on restart),
``delay_s`` (slow answers), ``fail_next(status, error_code, times, route)`` (e.g. 500 50000),
``metadata_lag_reads`` (the next N metadata reads after a write see the previous frontmatter, tags and
search text), ``metadata_lag_s`` (the metadata cache catches up N seconds after a write) and
``hold_metadata()`` / ``release_metadata()`` (the metadata cache is frozen until released). The metadata cache
feeds NoteJson ``frontmatter``/``tags``, JsonLogic and simple search; raw GET and the listing are always fresh.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from tests.servers.loopback import LoopbackHTTPServer

__all__ = ["NOTE_JSON", "JSONLOGIC", "ObsidianFake", "make_self_signed_cert"]

NOTE_JSON = "application/vnd.olrapi.note+json"
JSONLOGIC = "application/vnd.olrapi.jsonlogic+json"
DQL = "application/vnd.olrapi.dataview.dql+txt"
EXEMPT_PATHS = ("/", "/obsidian-local-rest-api.crt", "/openapi.yaml")
SECTION_WORDS = frozenset({"heading", "block", "frontmatter"})

_CANNED = {
    40010: "Incoming content must be text data.",
    40011: "Content-Type header required.",
    40012: "Unknown or invalid Content-Type specified.",
    40015: "Content was not valid for the specified Content-Type.",
    40021: "Path traversal is not allowed.",
    40070: "Invalid filter query.",
    40081: "Invalid patch instruction.",
    40090: "Invalid search.",
    40510: "Request method is valid only for files.",
}
_REASONS = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error"}
_AUTH_MESSAGE = {
    3: "Authorization required.  Find your API Key in the 'Local REST API' section of your Obsidian settings.",
    4: "Authorization required.  Find your API Key in the 'Local REST API' section of your Obsidian settings.",
    5: "Authorization required.  Find your API Key in the 'Local REST API with MCP' section of your Obsidian "
       "settings.",
}
_FRONTMATTER = re.compile(r"\A---\r?\n(.*?)(?:\r?\n)?^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_INLINE_TAG = re.compile(r"(?:^|\s)#([^\s#\d][^\s#]*)")


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A certificate shaped like the plugin's (RSA-2048, CA, SAN = IP 127.0.0.1 only) and its key, made with
    the ``openssl`` command line tool. Returns ``(cert_path, key_path)``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command line tool is needed to make the fake's TLS certificate")
    cert, key = directory / "obsidian-local-rest-api.crt", directory / "obsidian-local-rest-api.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "365", "-subj", "/CN=Obsidian Local REST API",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
         "-addext", "extendedKeyUsage=serverAuth,clientAuth"],
        check=True, capture_output=True,
    )
    return cert, key


@functools.lru_cache(maxsize=4096)
def _frontmatter_json(text: str) -> str:
    match = _FRONTMATTER.match(text)
    if not match:
        return "{}"
    try:
        data = yaml.load(match.group(1), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return "{}"
    return json.dumps(_jsonable(data) if isinstance(data, dict) else {})


class _HttpError(Exception):
    def __init__(self, status: int, error_code: int | None = None, detail: str | None = None) -> None:
        self.status = status
        self.error_code = error_code if error_code is not None else status * 100
        base = _CANNED.get(self.error_code, _REASONS.get(status, "Error"))
        self.message = base + ("\n" + detail if detail else "")
        super().__init__(self.message)


def _truthy(value: Any) -> bool:
    """JsonLogic truthiness: false, null, 0, "", [] and {} are false."""
    if isinstance(value, (list, dict)):
        return bool(value)
    return bool(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


def _glob_match(pattern: str, value: str) -> bool:
    # ``*`` and ``?`` stay within one path segment, ``**`` crosses them; anchored at both ends.
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.fullmatch("".join(out), value, re.S) is not None


class _JsonLogic:
    """The JsonLogic subset apis.md §4.1 lists, plus the plugin's ``glob`` and ``regexp``."""

    def __init__(self) -> None:
        self.ops: dict[str, Callable[..., Any]] = {
            "==": lambda a, b: a == b, "===": lambda a, b: a == b and type(a) is type(b),
            "!=": lambda a, b: a != b, "!==": lambda a, b: not (a == b and type(a) is type(b)),
            "<": lambda a, b: a < b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b,
            "!": lambda a: not _truthy(a), "!!": _truthy,
            "in": lambda a, b: (a in b) if isinstance(b, (str, list)) else False,
            "glob": lambda p, v: isinstance(p, str) and isinstance(v, str) and _glob_match(p, v),
            "regexp": lambda p, v: isinstance(p, str) and isinstance(v, str) and re.search(p, v) is not None,
            "cat": lambda *parts: "".join("" if p is None else str(p) for p in parts),
        }

    def apply(self, logic: Any, data: Any) -> Any:
        if isinstance(logic, list):
            return [self.apply(item, data) for item in logic]
        if not isinstance(logic, dict) or len(logic) != 1:
            return logic
        op, args = next(iter(logic.items()))
        if not isinstance(args, list):
            args = [args]
        if op == "var":
            return self._var(self.apply(args[0], data) if args else "", data, args[1:] if len(args) > 1 else [None])
        if op == "and":
            current: Any = None
            for arg in args:
                current = self.apply(arg, data)
                if not _truthy(current):
                    return current
            return current
        if op == "or":
            current = None
            for arg in args:
                current = self.apply(arg, data)
                if _truthy(current):
                    return current
            return current
        if op == "if":
            for i in range(0, len(args) - 1, 2):
                if _truthy(self.apply(args[i], data)):
                    return self.apply(args[i + 1], data)
            return self.apply(args[-1], data) if len(args) % 2 else None
        fn = self.ops.get(op)
        if fn is None:
            raise ValueError(f"Unrecognized operation {op}")
        values = [self.apply(arg, data) for arg in args]
        try:
            return fn(*values)
        except TypeError as exc:
            raise ValueError(str(exc)) from None

    @staticmethod
    def _var(name: Any, data: Any, default: list[Any]) -> Any:
        if name in ("", None):
            return data
        current = data
        for part in str(name).split("."):
            if isinstance(current, dict) and part in current:
                current = current[part]
            elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
                current = current[int(part)]
            else:
                return default[0]
        return current


class ObsidianFake:
    """The fake plugin. Use as a context manager, or call :meth:`start` / :meth:`stop`.

    ``base_url`` is ``http(s)://127.0.0.1:<port>``; ``requests_log`` records ``(method, path, headers, body)``.
    """

    def __init__(self, vault: Path, *, api_key: str = "a" * 64, plugin_version: str = "5.1.0",
                 tls_cert: tuple[Path, Path] | None = None) -> None:
        self.vault = Path(vault)
        self.vault.mkdir(parents=True, exist_ok=True)
        self.api_key = api_key
        self.plugin_version = plugin_version
        self.major = int(plugin_version.split(".")[0])
        self._vtuple = tuple(int(p) for p in plugin_version.split("."))
        self.tls_cert = tls_cert
        self.requests_log: list[tuple[str, str, dict[str, str], bytes]] = []
        self.delay_s = 0.0
        self.metadata_lag_reads = 0
        self.metadata_lag_s = 0.0
        self._held = False
        self._failures: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        # The metadata cache: path -> the content Obsidian last indexed (None: not indexed yet).
        self._indexed: dict[str, str | None] = {}
        self._pending: dict[str, tuple[str | None, float, int]] = {}
        self._server: LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self._connections: set[Any] = set()
        self._logic = _JsonLogic()

    # --- lifecycle ---------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls_cert else 'http'}://127.0.0.1:{self._port}"

    @property
    def cert_path(self) -> Path | None:
        return self.tls_cert[0] if self.tls_cert else None

    def start(self) -> ObsidianFake:
        fake = self
        context: ssl.SSLContext | None = None
        if self.tls_cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.tls_cert[0]), str(self.tls_cert[1]))

        class Server(LoopbackHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def process_request(self, request: Any, client_address: Any) -> None:
                with fake._lock:
                    fake._connections.add(request)
                super().process_request(request, client_address)

            def shutdown_request(self, request: Any) -> None:
                with fake._lock:
                    fake._connections.discard(request)
                super().shutdown_request(request)

            def finish_request(self, request: Any, client_address: Any) -> None:
                if context is None:
                    super().finish_request(request, client_address)
                    return
                # The TLS handshake runs in the request's own thread, so one stalled client blocks nobody.
                try:
                    tls = context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return
                # wrap_socket detaches the plain socket: track the TLS one, so stop() can drop it too.
                with fake._lock:
                    fake._connections.add(tls)
                try:
                    super().finish_request(tls, client_address)
                finally:
                    with fake._lock:
                        fake._connections.discard(tls)
                    tls.close()

        class Handler(_Handler):
            owner = fake

        self._server = Server(("127.0.0.1", self._port), Handler)
        self._port = self._server.server_address[1]
        # A short poll interval: stop() (once per test) waits for the serving loop to notice.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), name="obsidian-fake",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listening socket: clients now get "connection refused", as when Obsidian is closed."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:  # a closed Obsidian also drops the kept-alive connections
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ObsidianFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- knobs -------------------------------------------------------------------------------------------

    def fail_next(self, status: int = 500, error_code: int | None = None, *, times: int = 1,
                  route: str | None = None, method: str | None = None) -> None:
        """The next ``times`` requests (whose path starts with ``route`` and whose method is ``method``,
        when given) get ``status`` with the plugin's error body."""
        with self._lock:
            self._failures.append({"status": status, "code": error_code, "times": times, "route": route,
                                   "method": method})

    def hold_metadata(self) -> None:
        """Freeze the metadata cache: NoteJson, JsonLogic and simple search see the state before this call."""
        with self._lock:
            self._catch_up(force=False)
            self._held = True

    def release_metadata(self) -> None:
        with self._lock:
            self._held = False
            self._catch_up(force=True)

    # --- vault state -------------------------------------------------------------------------------------

    def files(self) -> list[str]:
        """Every vault file (vault-relative, ``/``-separated), hidden folders excluded, as ``vault.getFiles()``."""
        out = []
        for path in self.vault.rglob("*"):
            rel = path.relative_to(self.vault)
            if path.is_file() and not any(part.startswith(".") for part in rel.parts):
                out.append(rel.as_posix())
        return sorted(out)

    def read(self, rel: str) -> str:
        # Bytes, not read_text: universal-newline translation would turn CRLF into LF.
        return (self.vault / rel).read_bytes().decode("utf-8", errors="surrogateescape")

    def trash(self) -> list[str]:
        root = self.vault / ".trash"
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []

    def _record_write(self, rel: str, content: str | None) -> None:
        with self._lock:
            lagging = self._held or self.metadata_lag_reads > 0 or self.metadata_lag_s > 0
            if not lagging:
                self._indexed[rel] = content
                self._pending.pop(rel, None)
                return
            if rel not in self._indexed:
                self._indexed[rel] = None
            self._pending[rel] = (content, time.monotonic() + self.metadata_lag_s, self.metadata_lag_reads)

    def _catch_up(self, force: bool) -> None:
        """Apply the writes the metadata cache has caught up with (called on every metadata read)."""
        now = time.monotonic()
        for rel, (content, ready_at, reads_left) in list(self._pending.items()):
            if force or (not self._held and now >= ready_at and reads_left <= 0):
                self._indexed[rel] = content
                del self._pending[rel]
            elif not self._held and reads_left > 0:
                self._pending[rel] = (content, ready_at, reads_left - 1)

    def _indexed_content(self, rel: str) -> str:
        """What the metadata cache holds for ``rel`` (a file written outside the API is indexed as is)."""
        if rel in self._indexed:
            return self._indexed[rel] or ""
        return self.read(rel)

    def note_json(self, rel: str, *, include_content: bool = True) -> dict[str, Any]:
        path = self.vault / rel
        content = self.read(rel) if include_content else ""
        indexed = self._indexed_content(rel)
        frontmatter = self._frontmatter(indexed)
        stat = path.stat()
        note: dict[str, Any] = {
            "path": rel, "content": content,
            "frontmatter": frontmatter, "tags": self._tags(frontmatter, indexed),
            "stat": {"ctime": int(stat.st_ctime * 1000), "mtime": int(stat.st_mtime * 1000), "size": stat.st_size},
        }
        if self.major >= 4:
            note["links"], note["backlinks"] = [], []
        if self.major >= 5:
            note["unresolvedLinks"] = []
        return note

    @staticmethod
    def _frontmatter(text: str) -> dict[str, Any]:
        # Parsed once per distinct text (JsonLogic reads every note's frontmatter on every query).
        parsed: dict[str, Any] = json.loads(_frontmatter_json(text))
        return parsed

    def _tags(self, frontmatter: dict[str, Any], text: str) -> list[str]:
        tags: list[str] = []
        raw = frontmatter.get("tags")
        if isinstance(raw, list):
            for tag in raw:
                if isinstance(tag, str):
                    tags.append(tag)
                elif self._vtuple < (4, 0, 1) and tag is not None:
                    tags.append(str(tag))
        match = _FRONTMATTER.match(text)
        body = text[match.end():] if match else text
        tags.extend(_INLINE_TAG.findall(body))
        seen: dict[str, None] = {}
        for tag in tags:
            seen.setdefault(tag.lstrip("#"), None)
        return list(seen)


class _Handler(BaseHTTPRequestHandler):
    owner: ObsidianFake
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: avoid the 40 ms delayed-ACK stall
    server_version = "ObsidianLocalRestApiFake/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- plumbing ----------------------------------------------------------------------------------------

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", content_type: str | None = None,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any, content_type: str = "application/json; charset=utf-8") -> None:
        self._send(status, json.dumps(data, ensure_ascii=False).encode("utf-8"), content_type)

    def _error(self, err: _HttpError) -> None:
        self._json(err.status, {"message": err.message, "errorCode": err.error_code})

    def _dispatch(self) -> None:
        fake = self.owner
        body = self._body()
        raw_path, _, query_string = self.path.partition("?")
        fake.requests_log.append((self.command, self.path, dict(self.headers.items()), body))
        if fake.delay_s:
            time.sleep(fake.delay_s)
        try:
            self._maybe_fail(raw_path)
            if raw_path not in EXEMPT_PATHS and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                raise _HttpError(401, 40101)
            self._route(raw_path, urllib.parse.parse_qs(query_string, keep_blank_values=True), body)
        except _HttpError as err:
            if err.error_code == 40101:
                self._json(401, {"message": _AUTH_MESSAGE[min(max(fake.major, 3), 5)], "errorCode": 40101})
            else:
                self._error(err)
        except Exception as exc:  # an uncaught error in the plugin is a 500 50000 with the error text
            self._error(_HttpError(500, 50000, f"{type(exc).__name__}: {exc}"))

    def _maybe_fail(self, raw_path: str) -> None:
        fake = self.owner
        with fake._lock:
            for failure in fake._failures:
                if failure["route"] and not raw_path.startswith(failure["route"]):
                    continue
                if failure["method"] and failure["method"] != self.command:
                    continue
                failure["times"] -= 1
                if failure["times"] <= 0:
                    fake._failures.remove(failure)
                raise _HttpError(failure["status"], failure["code"])

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_MOVE = do_COPY = _dispatch

    # --- routing -----------------------------------------------------------------------------------------

    def _route(self, raw_path: str, query: dict[str, list[str]], body: bytes) -> None:
        fake = self.owner
        method = self.command
        if raw_path == "/" and method == "GET":
            authed = self.headers.get("Authorization") == f"Bearer {fake.api_key}"
            status = {
                "status": "OK", "service": "Obsidian Local REST API", "authenticated": authed,
                "versions": {"obsidian": "1.8.0", "self": fake.plugin_version},
                "manifest": {"id": "obsidian-local-rest-api", "name": "Local REST API",
                             "version": fake.plugin_version},
            }
            if authed:
                status["certificateInfo"] = {"validityDays": 365, "regenerateRecommended": False}
                status["apiExtensions"] = []
            self._json(200, status)
            return
        if raw_path == "/obsidian-local-rest-api.crt" and method == "GET":
            if fake.cert_path is None:
                raise _HttpError(404)
            self._send(200, fake.cert_path.read_bytes(), "application/octet-stream")
            return
        if raw_path in ("/search/simple", "/search/simple/") and method == "POST":
            self._simple_search(query)
            return
        if raw_path in ("/search", "/search/") and method == "POST":
            self._structured_search(body)
            return
        if raw_path == "/vault" or raw_path.startswith("/vault/"):
            if method == "PATCH":
                raise _HttpError(400, 40081, "PATCH is not supported by this fake")
            self._vault(raw_path[len("/vault/"):] if raw_path.startswith("/vault/") else "", query, body)
            return
        raise _HttpError(404)

    def _vault_path(self, raw: str) -> tuple[list[str], bool]:
        """The decoded segments of a vault path and whether it names a folder (trailing slash)."""
        fake = self.owner
        is_dir = raw == "" or raw.endswith("/")
        if fake.major >= 5:
            segments = [urllib.parse.unquote(s) for s in raw.split("/") if s != ""]
            if any("/" in s for s in segments):
                raise _HttpError(404)  # 5.x decodes per segment: "a%2Fb" names no file
        else:
            segments = [s for s in urllib.parse.unquote(raw).split("/") if s != ""]
        resolved: list[str] = []
        for seg in segments:
            if seg == ".":
                continue
            if seg == "..":
                if not resolved:
                    raise _HttpError(400, 40021) if fake._vtuple >= (4, 1, 0) else _HttpError(404)
                resolved.pop()
                continue
            if "\\" in seg or "\x00" in seg:
                raise _HttpError(400, 40021) if fake._vtuple >= (4, 1, 0) else _HttpError(404)
            resolved.append(seg)
        return resolved, is_dir

    def _vault(self, raw: str, query: dict[str, list[str]], body: bytes) -> None:
        fake = self.owner
        method = self.command
        segments, is_dir = self._vault_path(raw)
        rel = "/".join(segments)
        target = fake.vault.joinpath(*segments) if segments else fake.vault
        if method == "GET":
            if is_dir or (target.is_dir() and fake._vtuple >= (3, 6, 2)):
                self._listing(rel)
                return
            if not target.is_file():
                raise _HttpError(404)
            if self.headers.get("Accept") == NOTE_JSON:
                with fake._lock:
                    fake._catch_up(force=False)
                    note = fake.note_json(rel)
                self._json(200, note, NOTE_JSON + "; charset=utf-8")
                return
            ctype = "text/markdown; charset=utf-8" if rel.endswith(".md") else "application/octet-stream"
            self._send(200, target.read_bytes(), ctype,
                       {"Content-Disposition": f'attachment; filename="{segments[-1]}"'})
            return
        if is_dir or not segments:
            raise _HttpError(405, 40510)
        if method in ("PUT", "POST"):
            ctype = self.headers.get("Content-Type") or ""
            if not ctype.startswith("text/"):
                raise _HttpError(400, 40010)
            if not target.exists() and any(s in SECTION_WORDS for s in segments):
                raise _HttpError(404)  # the plugin reads such a segment as a section target
            if target.is_dir():
                raise _HttpError(405, 40510)
            text = body.decode("utf-8", errors="surrogateescape")
            target.parent.mkdir(parents=True, exist_ok=True)
            if method == "POST" and target.exists():
                existing = fake.read(rel)
                text = existing + ("" if existing.endswith("\n") or not existing else "\n") + text
            target.write_bytes(text.encode("utf-8", errors="surrogateescape"))
            fake._record_write(rel, text)
            self._send(204)
            return
        if method == "DELETE":
            if target.is_dir():
                raise _HttpError(405, 40510)
            if not target.is_file():
                raise _HttpError(404)
            permanent = query.get("permanent", [""])[-1] == "true"
            if fake.major >= 5 and not permanent:
                dest = fake.vault / ".trash" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                target.replace(dest)
            else:
                target.unlink()
            fake._record_write(rel, None)
            self._send(204)
            return
        raise _HttpError(405)

    def _listing(self, rel: str) -> None:
        prefix = rel + "/" if rel else ""
        names: set[str] = set()
        for path in self.owner.files():
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix):]
            names.add(rest.split("/", 1)[0] + "/" if "/" in rest else rest)
        if not names:
            raise _HttpError(404)
        self._json(200, {"files": sorted(names)})

    def _markdown_files(self) -> list[str]:
        return [f for f in self.owner.files() if f.endswith(".md")]

    def _simple_search(self, query: dict[str, list[str]]) -> None:
        fake = self.owner
        if "query" not in query:
            raise _HttpError(400, 40090)
        needle = query["query"][-1].lower()
        try:
            context_length = int(query.get("contextLength", ["100"])[-1])
        except ValueError:
            context_length = 100
        results = []
        with fake._lock:
            fake._catch_up(force=False)
            for rel in self._markdown_files():
                basename = rel.rsplit("/", 1)[-1][:-3]
                text = basename + "\n\n" + fake._indexed_content(rel)
                haystack = text.lower()
                matches, start = [], haystack.find(needle) if needle else -1
                while start >= 0:
                    end = start + len(needle)
                    source = "filename" if start < len(basename) else "content"
                    context = text[max(0, start - context_length): end + context_length]
                    matches.append({"match": {"start": start, "end": end, "source": source}, "context": context})
                    start = haystack.find(needle, end)
                if matches:
                    results.append({"filename": rel, "score": -1.0 / len(matches), "matches": matches})
        results.sort(key=lambda r: r["score"], reverse=fake._vtuple >= (4, 0, 0))
        self._json(200, results)

    def _structured_search(self, body: bytes) -> None:
        fake = self.owner
        ctype = self.headers.get("Content-Type")
        if ctype is None:
            raise _HttpError(400, 40011)
        if ctype == DQL and fake.major < 4:
            raise _HttpError(400, 40070, "Dataview DQL is not supported by fake")
        if ctype != JSONLOGIC:
            raise _HttpError(400, 40012)
        try:
            logic = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _HttpError(400, 40015) from None
        text = body.decode("utf-8")
        include_content = fake._vtuple < (4, 0, 3) or '"content"' in text
        results = []
        with fake._lock:
            fake._catch_up(force=False)
            for rel in self._markdown_files():
                note = fake.note_json(rel, include_content=include_content)
                if fake._vtuple >= (4, 0, 3) and not include_content:
                    note["content"] = ""
                try:
                    result = fake._logic.apply(logic, note)
                except (ValueError, re.error) as exc:
                    raise _HttpError(400, 40070, f"{exc} (while processing {rel})") from None
                if _truthy(result):
                    results.append({"filename": rel, "result": result})
        self._json(200, results)

