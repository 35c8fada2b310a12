"""Generic HTTP storage backend (``type = "http"``): memories kept by a remote server that speaks the
**memroute HTTP memory protocol** (``docs/backends/http.md``).

What it fixes compared with the reference's ``GenericMemoryBackend`` (reference §3, §17.9):

- endpoint paths resolve *relative to the base URL's path*, with or without a leading slash
  (``https://host/v1`` + ``/memories`` → ``https://host/v1/memories``);
- not-found is a 404 *status*, never a substring of an error message;
- response bodies are validated and parsed into memroute models (dates revived); a malformed body is a
  :class:`~memroute.errors.BackendError` naming the endpoint;
- retries with backoff happen only for idempotent calls (GET, PUT, DELETE), never for POST or PATCH;
- every request, and every redirect hop, passes :mod:`memroute.config.netguard` (hostnames resolved, every address
  checked, credentials in URLs refused), with ``allow_private`` as the explicit opt-in for self-hosted servers;
- ``Content-Type: application/json`` is sent only on requests that have a body.
"""

from __future__ import annotations

import builtins
import errno
import json
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs
import requests

import memroute
from memroute.config.serialization import converter, memory_from_dict, memory_to_dict
from memroute.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    ConflictError,
    MemrouteError,
    ValidationError,
)
from memroute.interfaces import BackendCapabilities, ComponentContext, MemoryAccess, MemoryBackend
from memroute.models import (
    BackendHit,
    HealthResult,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
    as_utc,
    require_id,
)
from memroute.specs import BackendSpec

__all__ = ["DEFAULT_ENDPOINTS", "PRESETS", "HttpBackend", "HttpBackendSettings", "memory_from_wire"]

# --- configuration -------------------------------------------------------------------------------------

DEFAULT_ENDPOINTS: Final[dict[str, str]] = {
    "search": "memories/search",
    "create": "memories",
    "list": "memories",
    "get": "memories/{id}",
    "put": "memories/{id}",
    "update": "memories/{id}",
    "delete": "memories/{id}",
    "health": "health",
    "access": "memories/access",
}
"""Endpoint paths of the protocol, relative to ``base_url``'s path."""

_ID_ENDPOINTS: Final = frozenset({"get", "put", "update", "delete"})
"""Endpoints whose template may (and normally does) hold the memory-id placeholder."""

QUERY_PARAM_NAMES: Final = (
    "query", "api_key_id", "type", "session_id", "limit", "offset", "order_by", "order_dir", "strategy",
    "retention_days", "now",
)
"""Protocol names of query parameters; ``query_params`` maps any of them to the server's name."""

_CAMEL_ALIASES: Final[dict[str, str]] = {
    "apiKeyId": "api_key_id", "sessionId": "session_id", "orderBy": "order_by", "orderDir": "order_dir",
    "retentionDays": "retention_days", "q": "query",
}

PRESETS: Final[dict[str, dict[str, Any]]] = {
    "memroute": {"backend_type": "memroute", "endpoints": dict(DEFAULT_ENDPOINTS), "access_tracking": True},
}
"""Presets that work. The reference's ``obsidian`` and ``notion`` presets pointed at paths those APIs do not
have; memroute ships real ``obsidian`` and ``notion`` backends instead."""

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

IDEMPOTENT_METHODS: Final = frozenset({"GET", "PUT", "DELETE"})
"""Methods that are retried. POST (create) and PATCH (update) never are: a lost response may hide a write
that happened."""

_RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})
_MAX_REDIRECTS: Final = 3
_MAX_RETRY_AFTER_S: Final = 10.0


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{attribute.name}: must be > 0, got {value!r}", [(attribute.name, "range")])


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0 or (attribute.name == "retries" and value > 10):
        raise ConfigError(f"{attribute.name}: must be in [0, 10], got {value!r}", [(attribute.name, "range")])


def _check_base_url(_inst: object, _attribute: attrs.Attribute[Any], value: str) -> None:
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(
            f"base_url: scheme {parts.scheme or '(none)'!r} is not allowed by the SSRF guard (use http or https)",
            [("base_url", "scheme")],
        )
    if not parts.hostname:
        raise ConfigError(f"base_url: {value!r} has no host", [("base_url", "host")])
    if parts.username or parts.password:
        raise ConfigError(
            "base_url: credentials in the URL are refused by the SSRF guard; use api_key or headers",
            [("base_url", "credentials")],
        )
    if parts.query or parts.fragment:
        raise ConfigError("base_url: must not have a query string or fragment", [("base_url", "invalid")])
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"base_url: bad port in {value!r}", [("base_url", "port")]) from None


def _check_headers(_inst: object, _attribute: attrs.Attribute[Any], value: Mapping[str, str]) -> None:
    for name, text in value.items():
        if not _HEADER_NAME.match(name):
            raise ConfigError(f"headers: {name!r} is not a valid header name", [(f"headers.{name}", "invalid")])
        if any(c in text for c in "\r\n\x00"):
            raise ConfigError(f"headers.{name}: value must not contain CR, LF or NUL", [(f"headers.{name}", "invalid")])


@attrs.frozen(kw_only=True)
class HttpBackendSettings:
    """Options of ``[backends.NAME]`` with ``type = "http"`` (the reference's ``GenericBackendConfig``)."""

    base_url: str = attrs.field(validator=_check_base_url)
    """Root of the server's memory API, e.g. ``https://memory.example.com/v1``. Endpoints resolve below its path."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer <api_key>``. Added last, so it wins over an ``Authorization`` in ``headers``."""
    headers: dict[str, str] = attrs.field(factory=dict, validator=_check_headers)
    """Extra headers sent on every request."""
    timeout: float = attrs.field(default=30.0, validator=_positive)
    """Seconds to wait for a connection and for each read (default 30; must be > 0)."""
    backend_type: str = "memroute"
    """Free-form label shown by ``memroute status``."""
    preset: str | None = None
    """A named set of defaults; only ``memroute`` exists (a server speaking the memroute protocol)."""
    endpoints: dict[str, str] = attrs.field(factory=dict)
    """Overrides of :data:`DEFAULT_ENDPOINTS` (``search, create, list, get, put, update, delete, health, access``)."""
    access_tracking: bool = False
    """The server takes batched access telemetry at ``endpoints.access`` (``memroute serve``'s ``/api/storage``
    does; the ``memroute`` preset turns this on): the backend then declares ``access_tracking`` and the counts
    of ``augment`` / ``search`` land on the server's primary. Off by default, since a server without the route
    would refuse every batch."""
    query_params: dict[str, str] = attrs.field(factory=dict)
    """Protocol query-parameter name → the server's name (e.g. ``{api_key_id = "owner", limit = "count"}``)."""
    path_params: dict[str, str] = attrs.field(factory=dict)
    """Placeholder names for the memory id: ``{id = "...", memoryId = "..."}`` (defaults ``id``, ``memoryId``)."""
    allow_private: bool = False
    """Allow a base URL on loopback or a private network (a self-hosted server). Metadata hosts stay blocked."""
    retries: int = attrs.field(default=2, validator=_non_negative)
    """Extra attempts for idempotent calls (GET, PUT, DELETE) after a connection error, timeout, 429 or 502-504."""
    retry_backoff: float = attrs.field(default=0.25, validator=_non_negative)
    """Base of the exponential backoff between retries, in seconds (with jitter)."""


# --- wire format ---------------------------------------------------------------------------------------

_MEMORY_FIELDS: Final = ("id", "api_key_id", "session_id", "type", "key", "content", "metadata", "created_at",
                         "updated_at", "expires_at", "access_count", "last_accessed_at")
_WIRE_ALIASES: Final[dict[str, str]] = {
    "apiKeyId": "api_key_id", "sessionId": "session_id", "createdAt": "created_at", "updatedAt": "updated_at",
    "expiresAt": "expires_at", "accessCount": "access_count", "lastAccessedAt": "last_accessed_at",
}


def memory_from_wire(data: Any, where: str = "memory") -> Memory:
    """A :class:`Memory` from the protocol's JSON: snake_case (``memory_to_dict``) or the reference's
    camelCase shape. Unknown extra fields are ignored (servers may add their own); missing or malformed
    fields raise :class:`~memroute.errors.ValidationError`."""
    if not isinstance(data, Mapping):
        raise ValidationError(f"{where}: expected a JSON object, got {type(data).__name__}", [(where, "type")])
    fields: dict[str, Any] = {}
    for name, value in data.items():
        canonical = _WIRE_ALIASES.get(name, name)
        if canonical in _MEMORY_FIELDS and canonical not in fields:
            fields[canonical] = value
    if isinstance(fields.get("metadata"), str):
        # Some servers (the reference's SQLite rows among them) carry metadata as JSON text.
        try:
            fields["metadata"] = json.loads(fields["metadata"] or "{}")
        except json.JSONDecodeError:
            raise ValidationError(f"{where}.metadata: not a JSON object", [(f"{where}.metadata", "invalid")]) from None
    if fields.get("session_id") == "":
        fields["session_id"] = None
    _lenient_access(fields)
    return memory_from_dict(fields, where)


def _lenient_access(fields: dict[str, Any]) -> None:
    """Access telemetry a server sends is kept when it is well-formed and dropped otherwise (the reference's
    servers send ``accessCount`` as they please; a bad count must not make the memory unreadable)."""
    count = fields.get("access_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        del fields["access_count"]
    stamp = fields.get("last_accessed_at")
    if stamp is not None:
        try:
            fields["last_accessed_at"] = as_utc(stamp, "last_accessed_at")
        except ValidationError:
            del fields["last_accessed_at"]


def _iso(value: Any) -> str:
    text: str = converter.unstructure(value)
    return text


def new_memory_to_wire(new: NewMemory) -> dict[str, Any]:
    """The create body: every field of :class:`NewMemory`, ``id`` and ``now`` included, so the memory's id
    and timestamps are memroute's and identical in every backend."""
    return {
        "id": new.id, "api_key_id": new.api_key_id, "session_id": new.session_id, "type": new.type.value,
        "key": new.key, "content": new.content, "metadata": dict(new.metadata),
        "expires_at": None if new.expires_at is None else _iso(new.expires_at), "now": _iso(new.now),
    }


def patch_to_wire(patch: MemoryPatch) -> dict[str, Any]:
    """The PATCH body: only the changed fields, plus ``now`` (the new ``updated_at``)."""
    body: dict[str, Any] = {}
    for name, value in patch.changes().items():
        if isinstance(value, MemoryType):
            value = value.value
        elif name == "expires_at" and value is not None:
            value = _iso(value)
        elif name == "metadata":
            value = dict(value)
        body[name] = value
    body["now"] = _iso(patch.now)
    return body


# --- the backend ---------------------------------------------------------------------------------------

@attrs.frozen
class _Response:
    status: int
    body: bytes
    url: str
    retry_after: float | None = None


def _errno_name(exc: BaseException) -> str | None:
    """The symbolic errno (``ECONNREFUSED``...) buried in a requests/urllib3 exception chain, if any."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        code = getattr(current, "errno", None)
        if isinstance(code, int) and code in errno.errorcode:
            return errno.errorcode[code]
        stack.extend([current.__cause__, current.__context__, getattr(current, "reason", None)])
        stack.extend(a for a in getattr(current, "args", ()) if isinstance(a, BaseException))
    return None


class HttpBackend(MemoryBackend):
    """A :class:`MemoryBackend` that forwards every call to a remote server over HTTP (thread-safe: one
    ``requests.Session`` per thread)."""

    in_process = False  # a remote HTTP service

    type_name = "http"
    capabilities = BackendCapabilities()

    def __init__(
        self,
        name: str,
        settings: HttpBackendSettings,
        *,
        resolver: Callable[[str, int], Sequence[str]] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(name)
        self.settings = _apply_preset(settings)
        self.base_url = _normalise_base(self.settings.base_url)
        self.endpoints = _resolve_endpoints(self.settings)
        if self.settings.access_tracking:
            self.capabilities = attrs.evolve(HttpBackend.capabilities, access_tracking=True)
        self.query_names = _resolve_query_names(self.settings.query_params)
        self._id_placeholders = (
            self.settings.path_params.get("id", "id"), self.settings.path_params.get("memoryId", "memoryId")
        )
        self._resolver = resolver
        self._sleep = sleep
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()

    # --- lifecycle -----------------------------------------------------------------------------------
    def initialize(self) -> None:
        """Probe ``health`` once; an unreachable or unhealthy server raises
        :class:`~memroute.errors.BackendUnavailableError` (no probe is repeated before later calls)."""
        result = self.health()
        if not result.ok:
            raise BackendUnavailableError(
                f"Cannot connect to {self.name} at {self.base_url}: {result.error}", backend=self.name
            )

    def close(self) -> None:
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
            self._local = threading.local()  # a later call opens a fresh session
        for session in sessions:
            session.close()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_name, "backend_type": self.settings.backend_type,
                "base_url": self.base_url, "allow_private": self.settings.allow_private}

    # --- CRUD ----------------------------------------------------------------------------------------
    def create(self, new: NewMemory) -> Memory:
        response = self._call("create", "POST", self.endpoints["create"], body=new_memory_to_wire(new))
        assert response is not None  # only not_found_ok calls map a 404 to None
        return self._memory_body("create", response)

    def put(self, memory: Memory) -> None:
        self._call("put", "PUT", self._id_path("put", memory.id), body=memory_to_dict(memory))

    def get(self, memory_id: str) -> Memory | None:
        response = self._call("get", "GET", self._id_path("get", memory_id), not_found_ok=True)
        if response is None:
            return None
        return self._memory_body("get", response)

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        path = self._id_path("update", memory_id)
        response = self._call("update", "PATCH", path, body=patch_to_wire(patch), not_found_ok=True)
        if response is None:
            return None
        if response.status == 204 or not response.body.strip():
            # The server acknowledged without a body (the reference's style): read the result back.
            return self.get(memory_id)
        return self._memory_body("update", response)

    def delete(self, memory_id: str) -> bool:
        response = self._call("delete", "DELETE", self._id_path("delete", memory_id), not_found_ok=True)
        return response is not None

    def list(self, filter: ListFilter) -> ListPage:
        params = self._params({
            "api_key_id": filter.api_key_id, "type": filter.type.value if filter.type else None,
            "session_id": filter.session_id, "query": filter.query, "limit": filter.limit, "offset": filter.offset,
            "order_by": filter.order_by, "order_dir": filter.order_dir,
        })
        response = self._call("list", "GET", self.endpoints["list"], params=params)
        assert response is not None
        data = self._json("list", response)
        try:
            if not isinstance(data, Mapping) or not isinstance(data.get("data"), builtins.list):
                raise ValidationError("expected an object with a 'data' array", [("data", "type")])
            memories = tuple(memory_from_wire(item, f"data[{i}]") for i, item in enumerate(data["data"]))
            total = data.get("total", len(memories))
            by_type = data.get("by_type", data.get("byType", {})) or {}
            if isinstance(total, bool) or not isinstance(total, int) or total < 0:
                raise ValidationError(f"total: expected a non-negative integer, got {total!r}", [("total", "type")])
            if not isinstance(by_type, Mapping) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in by_type.values()
            ):
                raise ValidationError("by_type: expected an object of integers", [("by_type", "type")])
        except ValidationError as exc:
            raise self._malformed("list", response, str(exc)) from None
        return ListPage(data=memories, total=total, by_type={str(k): v for k, v in by_type.items()})

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        params = self._params({
            "query": query.text, "api_key_id": query.api_key_id, "strategy": query.strategy, "limit": query.limit,
            "session_id": query.session_id, "retention_days": query.retention_days, "now": _iso(query.now),
        })
        response = self._call("search", "GET", self.endpoints["search"], params=params)
        assert response is not None
        data = self._json("search", response)
        if isinstance(data, Mapping) and isinstance(data.get("data"), builtins.list):
            data = data["data"]  # tolerate {data: [...]} envelopes
        if not isinstance(data, builtins.list):
            raise self._malformed("search", response, "expected a JSON array of hits")
        hits: builtins.list[BackendHit] = []
        try:
            for i, item in enumerate(data):
                if isinstance(item, Mapping) and "memory" in item:
                    score = item.get("score", 0.0)
                    if isinstance(score, bool) or not isinstance(score, (int, float)):
                        raise ValidationError(f"[{i}].score: expected a number", [(f"[{i}].score", "type")])
                    hits.append(BackendHit(memory=memory_from_wire(item["memory"], f"[{i}].memory"),
                                           score=float(score)))
                else:  # a bare memory: rank by position
                    hits.append(BackendHit(memory=memory_from_wire(item, f"[{i}]"), score=float(len(data) - i)))
        except ValidationError as exc:
            raise self._malformed("search", response, str(exc)) from None
        # Never trust a remote with tenant isolation or the query's filters: enforce them here too.
        admitted = [hit for hit in hits if query.admits(hit.memory)]
        return admitted[: query.limit]

    def record_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess]) -> int:
        """POST one tenant's batched accesses to ``endpoints.access`` (``access_tracking = true``); the server
        answers ``{"updated": n}``. Not retried: a lost answer may hide a write that happened."""
        if not self.settings.access_tracking:
            raise BackendError(f"{self.name}: access_tracking is off for this server", backend=self.name)
        body = {"api_key_id": api_key_id,
                "accesses": [{"id": i, "count": a.count, "at": _iso(a.at)} for i, a in sorted(accesses.items())]}
        response = self._call("access", "POST", self.endpoints["access"], body=body)
        assert response is not None
        data = self._json("access", response) if response.body.strip() else {}
        updated = data.get("updated", len(accesses)) if isinstance(data, Mapping) else len(accesses)
        return updated if isinstance(updated, int) and not isinstance(updated, bool) else len(accesses)

    def health(self) -> HealthResult:
        """GET the health endpoint: ``ok`` on any 2xx (the body is not interpreted). Never raises."""
        started = time.perf_counter()
        try:
            response = self._call("health", "GET", self.endpoints["health"], retry=False)
        except Exception as exc:  # a probe reports; it never raises
            error = str(exc) if isinstance(exc, MemrouteError) else f"{self.name}: {type(exc).__name__}: {exc}"
            return HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000, error=error)
        assert response is not None
        return HealthResult(ok=True, latency_ms=(time.perf_counter() - started) * 1000,
                            details={"status": response.status, "url": response.url})

    # --- request machinery ---------------------------------------------------------------------------
    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            from memroute.config.netguard import GuardedSession  # the SSRF guard the remote embedding source uses too

            # Pinned to the checked address, no proxies or .netrc from the environment, every hop checked.
            session = GuardedSession(allow_private=self.settings.allow_private, max_redirects=_MAX_REDIRECTS,
                                     resolver=self._resolver)
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def url_for(self, path: str) -> str:
        """The absolute URL of an (already filled) endpoint path: always below ``base_url``'s path."""
        return self.base_url + path.lstrip("/")

    def _id_path(self, endpoint: str, memory_id: str) -> str:
        require_id(memory_id)  # a lone surrogate cannot be URL-encoded: a ValidationError, not UnicodeError
        quoted = urllib.parse.quote(memory_id, safe="")  # an id can never add path segments
        template = self.endpoints[endpoint]
        return _PLACEHOLDER.sub(lambda m: quoted if m.group(1) in self._id_placeholders else m.group(0), template)

    def _params(self, values: Mapping[str, Any]) -> builtins.list[tuple[str, str]]:
        params = []
        for name, value in values.items():
            if value is None or value == "":
                continue
            params.append((self.query_names[name], str(value)))
        return params

    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"memroute/{_version()}"}
        if has_body:
            headers["Content-Type"] = "application/json"
        headers.update(self.settings.headers)
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        return headers

    def _call(
        self,
        endpoint: str,
        method: str,
        path: str,
        *,
        params: builtins.list[tuple[str, str]] | None = None,
        body: Any = None,
        not_found_ok: bool = False,
        retry: bool = True,
    ) -> _Response | None:
        """One logical call: guard, send, retry idempotent methods, map the status to a memroute result."""
        url = self.url_for(path)
        if params:
            url = url + ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        attempts = 1 + (self.settings.retries if retry and method in IDEMPOTENT_METHODS else 0)
        where = f"{endpoint} ({method} {_redact(url)})"
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._send(method, url, data)
            except _Transient as exc:
                if last:
                    raise BackendUnavailableError(f"{self.name}: {where} failed: {exc}", backend=self.name) from exc
                self._backoff(attempt, None)
                continue
            if response.status in _RETRY_STATUSES and not last:
                self._backoff(attempt, response)
                continue
            return self._outcome(endpoint, where, response, not_found_ok)
        raise AssertionError("unreachable")  # pragma: no cover

    def _outcome(self, endpoint: str, where: str, response: _Response, not_found_ok: bool) -> _Response | None:
        status = response.status
        if 200 <= status < 300:
            return response
        detail = _snippet(response.body)
        message = f"{self.name}: {where} answered HTTP {status}" + (f": {detail}" if detail else "")
        if status == 404 and not_found_ok:
            return None
        if status == 404:
            raise BackendError(message + " (check the endpoints configuration)", backend=self.name)
        if status == 409:
            raise ConflictError(message, backend=self.name)
        if status in (401, 403):
            raise BackendUnavailableError(message + " (check api_key / headers)", backend=self.name)
        if 300 <= status < 400:
            raise BackendError(message + " (redirect not followed)", backend=self.name)
        if status in _RETRY_STATUSES:
            raise BackendUnavailableError(message, backend=self.name)
        raise BackendError(message, backend=self.name)

    def _send(self, method: str, url: str, data: bytes | None) -> _Response:
        """Send one request through the guarded session. Redirects are followed for GET only, each hop
        checked by the guard again (requests drops ``Authorization`` when a hop changes host)."""
        from memroute.config.netguard import BlockedUrlError

        session = self._session()
        try:
            raw = session.request(method, url, data=data, headers=self._headers(data is not None),
                                  timeout=self.settings.timeout, allow_redirects=method == "GET")
        except BlockedUrlError as exc:
            raise BackendUnavailableError(f"{self.name}: {exc}", backend=self.name) from None
        except requests.Timeout as exc:
            raise _Transient(f"timed out after {self.settings.timeout:g}s") from exc
        except requests.ConnectionError as exc:
            code = _errno_name(exc)
            raise _Transient(f"connection failed ({code or type(exc).__name__}): {exc}") from exc
        except requests.TooManyRedirects as exc:
            raise BackendError(f"{self.name}: more than {_MAX_REDIRECTS} redirects from {_redact(url)}",
                               backend=self.name) from exc
        except requests.RequestException as exc:
            raise BackendError(f"{self.name}: request to {_redact(url)} failed: {exc}", backend=self.name) from exc
        try:
            return _Response(status=raw.status_code, body=raw.content, url=raw.url,
                             retry_after=_parse_retry_after(raw.headers.get("Retry-After")))
        except requests.RequestException as exc:  # the body broke off mid-read
            raise _Transient(f"reading the response failed: {exc}") from exc
        finally:
            raw.close()

    def _backoff(self, attempt: int, response: _Response | None) -> None:
        delay = self.settings.retry_backoff * (2**attempt) * (0.5 + random.random())
        if response is not None and response.retry_after is not None:
            delay = min(response.retry_after, _MAX_RETRY_AFTER_S)
        self._sleep(delay)

    def _json(self, endpoint: str, response: _Response) -> Any:
        if not response.body.strip():
            raise self._malformed(endpoint, response, "empty body")
        try:
            return json.loads(response.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise self._malformed(endpoint, response, f"not JSON ({exc})") from None

    def _memory_body(self, endpoint: str, response: _Response) -> Memory:
        data = self._json(endpoint, response)
        if isinstance(data, Mapping) and isinstance(data.get("memory"), Mapping):
            data = data["memory"]  # tolerate {memory: {...}} envelopes (the reference REST API's GET)
        try:
            return memory_from_wire(data)
        except ValidationError as exc:
            raise self._malformed(endpoint, response, str(exc)) from None

    def _malformed(self, endpoint: str, response: _Response, why: str) -> BackendError:
        return BackendError(
            f"{self.name}: malformed response from the {endpoint} endpoint ({_redact(response.url)}): {why}",
            backend=self.name,
        )


class _Transient(Exception):
    """A failure worth retrying for an idempotent call: the connection failed or timed out."""


# --- helpers -------------------------------------------------------------------------------------------

def _version() -> str:
    return getattr(memroute, "__version__", "0")


def _snippet(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace").strip()
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _redact(url: str) -> str:
    """The URL without its query string (queries carry tenant ids and search text)."""
    return url.split("?", 1)[0]


def _parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is rare for APIs and is ignored)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _normalise_base(base_url: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _apply_preset(settings: HttpBackendSettings) -> HttpBackendSettings:
    if settings.preset is None:
        return settings
    preset = PRESETS.get(settings.preset)
    if preset is None:
        raise ConfigError(
            f"preset: unknown preset {settings.preset!r} (available: {', '.join(sorted(PRESETS))}; "
            "Obsidian and Notion have their own backends: type = \"obsidian\" / \"notion\")",
            [("preset", "invalid")],
        )
    return attrs.evolve(
        settings,
        backend_type=settings.backend_type if settings.backend_type != "memroute" else preset["backend_type"],
        endpoints={**preset["endpoints"], **settings.endpoints},
        access_tracking=settings.access_tracking or bool(preset.get("access_tracking")),
    )


def _resolve_endpoints(settings: HttpBackendSettings) -> dict[str, str]:
    unknown = sorted(set(settings.endpoints) - set(DEFAULT_ENDPOINTS))
    if unknown:
        raise ConfigError(
            f"endpoints: unknown endpoint(s) {', '.join(unknown)} (known: {', '.join(DEFAULT_ENDPOINTS)})",
            [(f"endpoints.{name}", "unknown") for name in unknown],
        )
    bad_params = sorted(set(settings.path_params) - {"id", "memoryId"})
    if bad_params:
        raise ConfigError(f"path_params: unknown name(s) {', '.join(bad_params)} (known: id, memoryId)",
                          [(f"path_params.{name}", "unknown") for name in bad_params])
    id_names = {settings.path_params.get("id", "id"), settings.path_params.get("memoryId", "memoryId")}
    endpoints = {**DEFAULT_ENDPOINTS, **settings.endpoints}
    if "put" not in settings.endpoints and "update" in settings.endpoints:
        endpoints["put"] = settings.endpoints["update"]  # a custom update path is where the memory lives
    for name, template in endpoints.items():
        field = f"endpoints.{name}"
        if not isinstance(template, str) or not template.strip("/"):
            raise ConfigError(f"{field}: must be a non-empty path", [(field, "empty")])
        if "://" in template or template.startswith("//") or any(c in template for c in "?#\\ \r\n"):
            raise ConfigError(f"{field}: must be a path below base_url (no scheme, host, query or fragment)",
                              [(field, "invalid")])
        if ".." in template.split("/"):
            raise ConfigError(f"{field}: '..' segments are not allowed", [(field, "invalid")])
        stripped = _PLACEHOLDER.sub("", template)
        if "{" in stripped or "}" in stripped:
            raise ConfigError(f"{field}: unbalanced braces", [(field, "invalid")])
        placeholders = _PLACEHOLDER.findall(template)
        allowed = id_names if name in _ID_ENDPOINTS else set()
        for placeholder in placeholders:
            if placeholder not in allowed:
                hint = f"allowed: {{{'}, {'.join(sorted(allowed))}}}" if allowed else "this endpoint takes none"
                raise ConfigError(f"{field}: unknown placeholder {{{placeholder}}} ({hint})", [(field, "placeholder")])
        if name in _ID_ENDPOINTS and not placeholders:
            raise ConfigError(f"{field}: must contain the memory id placeholder {{id}}", [(field, "placeholder")])
    return endpoints


def _resolve_query_names(mapping: Mapping[str, str]) -> dict[str, str]:
    names = {name: name for name in QUERY_PARAM_NAMES}
    for given, external in mapping.items():
        internal = _CAMEL_ALIASES.get(given, given)
        if internal not in names:
            raise ConfigError(
                f"query_params: unknown parameter {given!r} (known: {', '.join(QUERY_PARAM_NAMES)})",
                [(f"query_params.{given}", "unknown")],
            )
        if not isinstance(external, str) or not external:
            raise ConfigError(f"query_params.{given}: must be a non-empty name", [(f"query_params.{given}", "empty")])
        names[internal] = external
    return names


# --- plugin registration -------------------------------------------------------------------------------

def _factory(settings: HttpBackendSettings, context: ComponentContext) -> HttpBackend:
    return HttpBackend(context.instance_name, settings)


@memroute.hookimpl
def memroute_backends() -> Iterator[BackendSpec]:
    yield BackendSpec(
        name="http",
        factory=_factory,
        settings_class=HttpBackendSettings,
        description="A remote server speaking the memroute HTTP memory protocol (requests).",
    )
