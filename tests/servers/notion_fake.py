"""A loopback fake of the Notion API (version 2025-09-03), for the endpoints notion-client 3.x calls for
memroute's Notion backend. Built from ``shared/reference/apis.md`` §2 and §4.2.

Real HTTP over a socket (``ThreadingHTTPServer`` on ``127.0.0.1:0`` in a thread). Requests are validated in
the order the real API does: ``Notion-Version`` header → ``Authorization`` → URL → JSON body → body schema,
and every error has Notion's body shape ``{"object":"error","status","code","message","request_id"}``.

Endpoints: ``GET/POST /v1/databases[/{id}]``, ``GET /v1/data_sources/{id}``,
``POST /v1/data_sources/{id}/query``, ``POST /v1/pages``, ``GET/PATCH /v1/pages/{id}``, ``POST /v1/search``.
Anything else answers 400 ``invalid_request_url`` (a fake choice, so calls to legacy endpoints surface).

Where the fake is **stricter than the real service** (or guesses), it says so:

* ``null`` for ``filter`` / ``sorts`` / ``start_cursor`` / ``page_size`` is rejected (catches notion-client's
  ``pick`` forwarding ``None``; the real answer is unverified).
* An unknown ``Notion-Version`` gives 400 ``validation_error`` (the real code is unverified).
* A payload over 500 KB gives 400 ``validation_error`` (the documented limit; the real status is unverified).
* A title is required on page create; text ``equals`` is case-sensitive, ``contains`` is not (unverified).
* New ``select`` option names are added to the schema (unverified real behaviour).
* Date-times are kept at millisecond precision, as Notion returns them.
* Rich-text lengths are counted in UTF-16 code units, as Notion's JavaScript does (an emoji counts 2).
* Page content blocks (``children``) are refused: memroute keeps content in properties, so the fake does
  not model blocks. Query results are strongly consistent (the real service may lag a write briefly).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs

from tests.servers.loopback import LoopbackHTTPServer

__all__ = ["NotionFake", "RecordedRequest", "running_notion_fake", "utf16_len"]

API_VERSION = "2025-09-03"
TEXT_LIMIT = 2000
ARRAY_LIMIT = 100
PAYLOAD_LIMIT = 500 * 1024
MISSING_VERSION = (
    "Notion-Version header failed validation: Notion-Version header should be defined, instead was `undefined`."
)
ARCHIVED_EDIT = "Can't edit block that is archived. You must unarchive the block before editing."
DEFAULT_CODES = {
    400: "validation_error", 401: "unauthorized", 403: "restricted_resource", 404: "object_not_found",
    409: "conflict_error", 429: "rate_limited", 500: "internal_server_error", 503: "service_unavailable",
    504: "gateway_timeout", 529: "service_overload",
}
TEXT_TYPES = {"title", "rich_text", "url", "email", "phone_number"}
QUERY_KEYS = {"sorts", "filter", "start_cursor", "page_size", "archived", "in_trash", "result_type"}
PAGE_CREATE_KEYS = {"parent", "properties", "icon", "cover", "content", "children", "markdown", "template", "position"}
PAGE_UPDATE_KEYS = {"properties", "icon", "cover", "is_locked", "template", "erase_content", "archived", "in_trash"}
DB_CREATE_KEYS = {"parent", "title", "description", "is_inline", "initial_data_source", "icon", "cover"}


def utf16_len(text: str) -> int:
    """Length as Notion counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


class NotionError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def _invalid(message: str) -> NotionError:
    return NotionError(400, "validation_error", message)


def _should(path: str, expected: str, value: Any) -> NotionError:
    shown = "undefined" if value is _MISSING else json.dumps(value)[:80]
    return _invalid(f"body failed validation: {path} should be {expected}, instead was `{shown}`.")


_MISSING = object()


@attrs.define
class RecordedRequest:
    """One request as the fake saw it (after the response was decided)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0

    @property
    def route(self) -> str:
        return f"{self.method} {_template(self.path)}"


@attrs.define
class _Fault:
    status: int
    body: Any
    headers: dict[str, str]
    times: int


def _template(path: str) -> str:
    return re.sub(r"/[0-9a-fA-F-]{32,36}(?=/|$)", "/{id}", path)


def _norm_id(raw: str, what: str) -> str:
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise _invalid(f"path failed validation: path.{what}_id should be a valid uuid, instead was `\"{raw}\"`.")\
            from None


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + "000Z"


def _rt_response(text: str) -> dict[str, Any]:
    return {
        "type": "text", "text": {"content": text, "link": None},
        "annotations": {"bold": False, "italic": False, "strikethrough": False, "underline": False,
                        "code": False, "color": "default"},
        "plain_text": text, "href": None,
    }


def _plain(items: list[dict[str, Any]]) -> str:
    return "".join(i["plain_text"] for i in items)


def _parse_date(value: Any, path: str) -> tuple[datetime, bool]:
    """A date value as an aware datetime plus whether it had a time part."""
    if not isinstance(value, str):
        raise _should(path, "a string", value)
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise _invalid(f"body failed validation: {path} should be a valid ISO 8601 date string, "
                       f"instead was `{json.dumps(value)}`.") from None
    if len(value) <= 10:
        return parsed.replace(tzinfo=timezone.utc), False
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc), True


def _format_date(moment: datetime, has_time: bool) -> str:
    if not has_time:
        return moment.strftime("%Y-%m-%d")
    # Notion keeps milliseconds and answers with an explicit offset.
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+00:00"


class NotionFake:
    """The fake's state and request handling. Start it with :func:`running_notion_fake` or ``start()``."""

    def __init__(self, token: str = "secret_fake_token", accepted_versions: tuple[str, ...] = (API_VERSION,)) -> None:
        self.token = token
        self.accepted_versions = set(accepted_versions)
        self.databases: dict[str, dict[str, Any]] = {}
        self.data_sources: dict[str, dict[str, Any]] = {}
        self.pages: dict[str, dict[str, Any]] = {}
        self.parent_pages: dict[str, str] = {}
        self.requests: list[RecordedRequest] = []
        self.delays: dict[str, float] = {}
        self._faults: dict[str, list[_Fault]] = {}
        self._cursors: dict[str, tuple[str, int]] = {}
        self._lock = threading.RLock()
        self._request = threading.local()  # the Notion-Version of the request a handler thread is serving
        self._clock = itertools.count()
        self._server: LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The root to give notion-client (no ``/v1``)."""
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> NotionFake:
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = LoopbackHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="notion-fake", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # --- test knobs -------------------------------------------------------------------------------------

    def fail_next(self, route: str, status: int, *, body: Any = None, headers: dict[str, str] | None = None,
                  times: int = 1) -> None:
        """Answer the next ``times`` requests to ``route`` (``"POST /v1/pages"``, ``"PATCH /v1/pages/{id}"``,
        ``"*"``) with ``status``. ``body=None`` sends Notion's error shape for the status; a ``str`` body is
        sent as is (``text/html``), to imitate a proxy's non-JSON error page."""
        if body is None:
            code = DEFAULT_CODES.get(status, "internal_server_error")
            body = {"object": "error", "status": status, "code": code, "message": f"Injected {code}.",
                    "request_id": str(uuid.uuid4())}
        with self._lock:
            self._faults.setdefault(route, []).append(_Fault(status, body, dict(headers or {}), times))

    def delay(self, route: str, seconds: float) -> None:
        """Sleep ``seconds`` before answering requests to ``route`` (``"*"`` for all); 0 removes it."""
        self.delays[route] = seconds

    def add_parent_page(self, title: str = "Parent page") -> str:
        """A workspace page shared with the integration, under which databases can be created."""
        page_id = str(uuid.uuid4())
        self.parent_pages[page_id] = title
        return page_id

    def add_database(self, properties: dict[str, dict[str, Any]], *, title: str = "Memories",
                     data_sources: int = 1) -> str:
        """Create a database directly (schema as in a create request), returning its id."""
        with self._lock:
            return self._create_database(self.add_parent_page(), title, properties, data_sources)["id"]

    def add_page(self, data_source_id: str, properties: dict[str, Any]) -> dict[str, Any]:
        """Create a page directly (properties as in a create request, validated the same way), without HTTP:
        a fast way to seed many rows."""
        with self._lock:
            return dict(self._post_page("", {"parent": {"data_source_id": data_source_id}, "properties": properties}))

    def calls(self, route: str) -> list[RecordedRequest]:
        """The logged requests to ``route`` (``"POST /v1/data_sources/{id}/query"``)."""
        return [r for r in self.requests if r.route == route]

    # --- dispatch ---------------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any, dict[str, str]]:
        parts = urlsplit(target)
        record = RecordedRequest(method, parts.path, parse_qs(parts.query), headers, None)
        try:
            record.body = json.loads(raw) if raw else None
        except ValueError:
            record.body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(record)
        for key in (record.route, "*"):
            if self.delays.get(key):
                time.sleep(self.delays[key])
        fault = self._take_fault(record.route)
        if fault is not None:
            record.status = fault.status
            return fault.status, fault.body, fault.headers
        try:
            status, payload = self._dispatch(method, parts.path, headers, raw)
        except NotionError as err:
            record.status = err.status
            body = {"object": "error", "status": err.status, "code": err.code, "message": err.message,
                    "request_id": str(uuid.uuid4())}
            return err.status, body, err.headers
        except Exception as exc:  # a bug in the fake: answer 500 so the test sees it, not a dropped socket
            record.status = 500
            return 500, {"object": "error", "status": 500, "code": "internal_server_error",
                         "message": f"fake bug: {type(exc).__name__}: {exc}"}, {}
        record.status = status
        return status, payload, {}

    def _take_fault(self, route: str) -> _Fault | None:
        with self._lock:
            for key in (route, "*"):
                queue = self._faults.get(key)
                if queue:
                    fault = queue[0]
                    fault.times -= 1
                    if fault.times <= 0:
                        queue.pop(0)
                    return fault
        return None

    def _dispatch(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        version = headers.get("notion-version")
        if not version:
            raise NotionError(400, "missing_version", MISSING_VERSION)
        if version not in self.accepted_versions:
            raise _invalid(f"Notion-Version header failed validation: `{version}` is not a supported version.")
        self._request.version = version
        if headers.get("authorization") != f"Bearer {self.token}":
            raise NotionError(401, "unauthorized", "API token is invalid.")
        route = self._route(method, path)
        if route is None:
            raise NotionError(400, "invalid_request_url", "Invalid request URL.")
        handler, ident = route
        body: dict[str, Any] = {}
        if method in ("POST", "PATCH"):
            body = self._parse_body(headers, raw)
        with self._lock:
            return 200, handler(ident, body)

    def _route(self, method: str, path: str) -> tuple[Callable[[str, dict[str, Any]], Any], str] | None:
        table: list[tuple[str, str, Callable[[str, dict[str, Any]], Any]]] = [
            ("GET", r"/v1/databases/([^/]+)", self._get_database),
            ("POST", r"/v1/databases", self._post_database),
            ("GET", r"/v1/data_sources/([^/]+)", self._get_data_source),
            ("POST", r"/v1/data_sources/([^/]+)/query", self._query),
            ("POST", r"/v1/pages", self._post_page),
            ("GET", r"/v1/pages/([^/]+)", self._get_page),
            ("PATCH", r"/v1/pages/([^/]+)", self._patch_page),
            ("POST", r"/v1/search", self._search),
        ]
        for verb, pattern, handler in table:
            match = re.fullmatch(pattern, path)
            if verb == method and match:
                return handler, (match.group(1) if match.groups() else "")
        return None

    @staticmethod
    def _parse_body(headers: dict[str, str], raw: bytes) -> dict[str, Any]:
        if not headers.get("content-type", "").startswith("application/json"):
            raise NotionError(400, "invalid_json", "Error parsing JSON body.")
        try:
            body = json.loads(raw.decode("utf-8")) if raw else {}
        except (ValueError, UnicodeDecodeError):
            raise NotionError(400, "invalid_json", "Error parsing JSON body.") from None
        if not isinstance(body, dict):
            raise NotionError(400, "invalid_json", "Error parsing JSON body.")
        if len(raw) > PAYLOAD_LIMIT:
            raise _invalid(f"Request body too large: {len(raw)} bytes, the limit is {PAYLOAD_LIMIT} bytes.")
        return body

    # --- databases and data sources ---------------------------------------------------------------------

    def _get_database(self, ident: str, _body: dict[str, Any]) -> Any:
        db_id = _norm_id(ident, "database")
        if db_id not in self.databases:
            raise self._not_found("database", db_id)
        return self.databases[db_id]

    def _post_database(self, _ident: str, body: dict[str, Any]) -> Any:
        _unknown_keys(body, DB_CREATE_KEYS)
        parent = body.get("parent", _MISSING)
        if not isinstance(parent, dict) or "page_id" not in parent:
            raise _should("body.parent.page_id", "defined", _MISSING if parent is _MISSING else parent)
        page_id = _norm_id(str(parent["page_id"]), "page")
        if page_id not in self.parent_pages:
            raise self._not_found("page", page_id)
        title = _check_rich_text(body.get("title", []), "body.title")
        initial = body.get("initial_data_source", {})
        if not isinstance(initial, dict):
            raise _should("body.initial_data_source", "an object", initial)
        properties = initial.get("properties", {"Name": {"title": {}}})
        return self._create_database(page_id, "".join(i["text"]["content"] for i in title), properties, 1)

    def _create_database(self, page_id: str, title: str, properties: Any, count: int) -> dict[str, Any]:
        schema = _check_schema(properties)
        db_id = str(uuid.uuid4())
        sources = []
        for n in range(count):
            ds_id = str(uuid.uuid4())
            name = title if n == 0 else f"{title} {n + 1}"
            self.data_sources[ds_id] = {
                "object": "data_source", "id": ds_id, "title": [_rt_response(name)],
                "parent": {"type": "database_id", "database_id": db_id},
                "database_parent": {"type": "page_id", "page_id": page_id},
                "properties": json.loads(json.dumps(schema)), "in_trash": False, "archived": False,
                "created_time": _now_iso(), "last_edited_time": _now_iso(),
            }
            sources.append({"id": ds_id, "name": name})
        self.databases[db_id] = {
            "object": "database", "id": db_id, "title": [_rt_response(title)], "data_sources": sources,
            "parent": {"type": "page_id", "page_id": page_id}, "is_inline": False, "in_trash": False,
            "archived": False, "created_time": _now_iso(), "last_edited_time": _now_iso(),
            "url": f"https://www.notion.so/{db_id.replace('-', '')}",
        }
        return self.databases[db_id]

    def _get_data_source(self, ident: str, _body: dict[str, Any]) -> Any:
        ds_id = _norm_id(ident, "data_source")
        if ds_id not in self.data_sources:
            raise self._not_found("data_source", ds_id)
        return self.data_sources[ds_id]

    # --- pages ------------------------------------------------------------------------------------------

    def _post_page(self, _ident: str, body: dict[str, Any]) -> Any:
        _unknown_keys(body, PAGE_CREATE_KEYS)
        parent = body.get("parent", _MISSING)
        if not isinstance(parent, dict):
            raise _should("body.parent", "an object", parent)
        if "data_source_id" in parent:
            ds_id = _norm_id(str(parent["data_source_id"]), "data_source")
        elif "database_id" in parent:
            db = self.databases.get(_norm_id(str(parent["database_id"]), "database"))
            if db is None:
                raise self._not_found("database", str(parent["database_id"]))
            if len(db["data_sources"]) != 1:
                raise _invalid("Databases with multiple data sources are not supported in this API version.")
            ds_id = db["data_sources"][0]["id"]
        else:
            raise _should("body.parent.data_source_id", "defined", _MISSING)
        source = self.data_sources.get(ds_id)
        if source is None:
            raise self._not_found("data_source", ds_id)
        properties = body.get("properties", {})
        if not isinstance(properties, dict):
            raise _should("body.properties", "an object", properties)
        if "children" in body:
            _check_children(body["children"])
        values = self._property_values(source, properties)
        title_name = next(n for n, p in source["properties"].items() if p["type"] == "title")
        if title_name not in values:
            raise _should(f"body.properties.{title_name}.title", "defined", _MISSING)
        page_id = str(uuid.uuid4())
        stamp = _now_iso()
        page = {
            "object": "page", "id": page_id, "created_time": stamp, "last_edited_time": stamp,
            "in_trash": False, "archived": False, "is_archived": False, "is_locked": False,
            "url": f"https://www.notion.so/{page_id.replace('-', '')}", "public_url": None,
            "parent": {"type": "data_source_id", "data_source_id": ds_id,
                       "database_id": source["parent"]["database_id"]},
            "properties": self._empty_properties(source), "icon": None, "cover": None,
            "created_by": {"object": "user", "id": "fake-bot"}, "last_edited_by": {"object": "user", "id": "fake-bot"},
            "_order": next(self._clock),
        }
        page["properties"].update(values)
        self.pages[page_id] = page
        return _public(page)

    def _get_page(self, ident: str, _body: dict[str, Any]) -> Any:
        return _public(self._page(ident))

    def _patch_page(self, ident: str, body: dict[str, Any]) -> Any:
        _unknown_keys(body, PAGE_UPDATE_KEYS)
        page = self._page(ident)
        if "archived" in body and getattr(self._request, "version", API_VERSION) >= "2026-03-11":
            # `archived` was a deprecated alias of in_trash and is gone from 2026-03-11 on.
            raise _should("body.archived", "not present", body["archived"])
        trash = body.get("in_trash", body.get("archived"))
        if trash is not None and not isinstance(trash, bool):
            raise _should("body.in_trash", "a boolean", trash)
        properties = body.get("properties", {})
        if not isinstance(properties, dict):
            raise _should("body.properties", "an object", properties)
        if page["in_trash"] and trash is not False:
            raise _invalid(ARCHIVED_EDIT)
        values = self._property_values(self.data_sources[page["parent"]["data_source_id"]], properties)
        page["properties"].update(values)
        if trash is not None:
            page["in_trash"] = page["archived"] = page["is_archived"] = trash
        page["last_edited_time"] = _now_iso()
        return _public(page)

    def _page(self, ident: str) -> dict[str, Any]:
        page_id = _norm_id(ident, "page")
        if page_id not in self.pages:
            raise self._not_found("page", page_id)
        return self.pages[page_id]

    @staticmethod
    def _empty_properties(source: dict[str, Any]) -> dict[str, Any]:
        empty: dict[str, Any] = {"title": [], "rich_text": [], "select": None, "date": None, "number": None,
                                 "checkbox": False, "url": None, "email": None, "phone_number": None}
        return {name: {"id": p["id"], "type": p["type"], p["type"]: empty.get(p["type"])}
                for name, p in source["properties"].items()}

    def _property_values(self, source: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
        schema = source["properties"]
        by_id = {p["id"]: name for name, p in schema.items()}
        out = {}
        for key, value in given.items():
            name = key if key in schema else by_id.get(key)
            if name is None:
                raise _invalid(f"{key} is not a property that exists.")
            prop = schema[name]
            kind = prop["type"]
            if not isinstance(value, dict) or kind not in value:
                raise _invalid(f"{name} is expected to be {kind}.")
            converted = self._value(prop, value[kind], f"body.properties.{name}")
            out[name] = {"id": prop["id"], "type": kind, kind: converted}
        return out

    def _value(self, prop: dict[str, Any], raw: Any, path: str) -> Any:
        kind = prop["type"]
        if kind in ("title", "rich_text"):
            return [_rt_response(i["text"]["content"]) for i in _check_rich_text(raw, f"{path}.{kind}")]
        if raw is None:
            return None
        if kind == "number":
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise _should(f"{path}.number", "a number or `null`", raw)
            return raw
        if kind == "checkbox":
            if not isinstance(raw, bool):
                raise _should(f"{path}.checkbox", "a boolean", raw)
            return raw
        if kind == "select":
            if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
                raise _should(f"{path}.select.name", "a string", raw)
            options = prop["select"]["options"]
            option = next((o for o in options if o["name"] == raw["name"]), None)
            if option is None:
                option = {"id": uuid.uuid4().hex[:4], "name": raw["name"], "color": "default"}
                options.append(option)
            return dict(option)
        if kind == "date":
            if not isinstance(raw, dict) or "start" not in raw:
                raise _should(f"{path}.date.start", "defined", _MISSING)
            start, has_time = _parse_date(raw["start"], f"{path}.date.start")
            end = raw.get("end")
            end_text = None if end is None else _format_date(*_parse_date(end, f"{path}.date.end"))
            return {"start": _format_date(start, has_time), "end": end_text, "time_zone": None}
        raise _invalid(f"{prop['name']} of type {kind} cannot be set through this fake.")

    # --- query ------------------------------------------------------------------------------------------

    def _query(self, ident: str, body: dict[str, Any]) -> Any:
        ds_id = _norm_id(ident, "data_source")
        source = self.data_sources.get(ds_id)
        if source is None:
            raise self._not_found("data_source", ds_id)
        _unknown_keys(body, QUERY_KEYS)
        for key in ("filter", "sorts", "start_cursor", "page_size"):
            if key in body and body[key] is None:
                raise _should(f"body.{key}", "defined when given", None)
        page_size = body.get("page_size", 100)
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise _should("body.page_size", "a number ≥ `1`", page_size)
        if page_size > 100:
            raise _should("body.page_size", "≤ `100`", page_size)
        flt = body.get("filter")
        sorts = body.get("sorts", [])
        include_trash = bool(body.get("in_trash") or body.get("archived"))
        fingerprint = hashlib.sha256(
            json.dumps([ds_id, flt, sorts, include_trash], sort_keys=True).encode()
        ).hexdigest()
        offset = 0
        if "start_cursor" in body:
            issued = self._cursors.get(str(body["start_cursor"]))
            if issued is None or issued[0] != fingerprint:
                raise _should("body.start_cursor", "a cursor returned by this query", body["start_cursor"])
            offset = issued[1]
        schema = source["properties"]
        rows = [p for p in self.pages.values()
                if p["parent"]["data_source_id"] == ds_id and (include_trash or not p["in_trash"])]
        if flt is not None:
            _check_filter(flt, schema, "body.filter", 0)
            rows = [p for p in rows if _matches(p, flt, schema)]
        rows = _sorted(rows, sorts, schema)
        chunk = rows[offset:offset + page_size]
        more = offset + page_size < len(rows)
        cursor = None
        if more:
            cursor = str(uuid.uuid4())
            self._cursors[cursor] = (fingerprint, offset + page_size)
        return {"object": "list", "type": "page_or_data_source", "page_or_data_source": {},
                "results": [_public(p) for p in chunk], "next_cursor": cursor, "has_more": more}

    def _search(self, _ident: str, body: dict[str, Any]) -> Any:
        flt = body.get("filter")
        if flt is not None and (not isinstance(flt, dict) or flt.get("value") not in ("page", "data_source")):
            raise _should("body.filter.value", '`"page"` or `"data_source"`', (flt or {}).get("value"))
        needle = str(body.get("query", "")).lower()
        hits = []
        for page in self.pages.values():
            title = next((_plain(v["title"]) for v in page["properties"].values() if v["type"] == "title"), "")
            if not page["in_trash"] and needle in title.lower():
                hits.append(_public(page))
        return {"object": "list", "type": "page_or_data_source", "page_or_data_source": {},
                "results": hits[:100], "next_cursor": None, "has_more": False}

    @staticmethod
    def _not_found(kind: str, ident: str) -> NotionError:
        return NotionError(404, "object_not_found", f"Could not find {kind} with ID: {ident}. Make sure the relevant "
                                                    "pages and databases are shared with your integration.")


# --- validation helpers ----------------------------------------------------------------------------------

def _unknown_keys(body: dict[str, Any], allowed: set[str]) -> None:
    for key in body:
        if key not in allowed:
            raise _invalid(f"body failed validation: body.{key} should be not present, instead was "
                           f"`{json.dumps(body[key])[:40]}`.")


def _check_rich_text(items: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        raise _should(path, "an array", items)
    if len(items) > ARRAY_LIMIT:
        raise _should(f"{path}.length", f"≤ `{ARRAY_LIMIT}`", len(items))
    for n, item in enumerate(items):
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, dict) or not isinstance(text.get("content"), str):
            raise _should(f"{path}[{n}].text.content", "a string", _MISSING)
        size = utf16_len(text["content"])
        if size > TEXT_LIMIT:
            raise _should(f"{path}[{n}].text.content.length", f"≤ `{TEXT_LIMIT}`", size)
    return items


def _check_children(children: Any) -> None:
    if not isinstance(children, list):
        raise _should("body.children", "an array", children)
    if len(children) > ARRAY_LIMIT:
        raise _should("body.children.length", f"≤ `{ARRAY_LIMIT}`", len(children))
    raise _invalid("This fake does not store page content blocks; memroute keeps content in properties.")


def _check_schema(properties: Any) -> dict[str, Any]:
    if not isinstance(properties, dict):
        raise _should("body.initial_data_source.properties", "an object", properties)
    schema = {}
    for name, config in properties.items():
        kinds = [k for k in (config or {}) if k not in ("name", "type", "description")]
        if not isinstance(config, dict) or len(kinds) != 1:
            raise _invalid(f"body failed validation: body.initial_data_source.properties.{name} should be a "
                           "property schema object.")
        kind = kinds[0]
        prop: dict[str, Any] = {"id": "title" if kind == "title" else uuid.uuid4().hex[:4], "name": name,
                                "type": kind, kind: {}}
        if kind == "select":
            options = (config[kind] or {}).get("options", [])
            prop[kind] = {"options": [{"id": uuid.uuid4().hex[:4], "name": o["name"],
                                       "color": o.get("color", "default")} for o in options]}
        schema[name] = prop
    if sum(1 for p in schema.values() if p["type"] == "title") != 1:
        raise _invalid("body failed validation: a data source must have exactly one title property.")
    return schema


def _check_filter(flt: Any, schema: dict[str, Any], path: str, depth: int) -> None:
    if not isinstance(flt, dict):
        raise _should(path, "an object", flt)
    for group in ("and", "or"):
        if group in flt:
            if depth >= 2:
                raise _invalid(f"body failed validation: {path}.{group} exceeds the maximum filter nesting depth "
                               "of 2.")
            if not isinstance(flt[group], list):
                raise _should(f"{path}.{group}", "an array", flt[group])
            for n, sub in enumerate(flt[group]):
                _check_filter(sub, schema, f"{path}.{group}[{n}]", depth + 1)
            return
    if "timestamp" in flt:
        return
    name = flt.get("property")
    prop = schema.get(name) or next((p for p in schema.values() if p["id"] == name), None)
    if prop is None:
        raise _invalid(f"Could not find property with name or id: {name}")
    kind = prop["type"]
    accepted = {kind, "rich_text"} if kind == "title" else {kind}
    if not any(k in flt for k in accepted):
        raise _invalid(f"body failed validation: {path}.{kind} should be defined, instead was `undefined`.")


def _prop_value(page: dict[str, Any], schema: dict[str, Any], name: str) -> tuple[str, Any]:
    prop = schema.get(name) or next(p for p in schema.values() if p["id"] == name)
    cell = page["properties"][prop["name"]]
    return prop["type"], cell[prop["type"]]


def _matches(page: dict[str, Any], flt: dict[str, Any], schema: dict[str, Any]) -> bool:
    if "and" in flt:
        return all(_matches(page, sub, schema) for sub in flt["and"])
    if "or" in flt:
        return any(_matches(page, sub, schema) for sub in flt["or"])
    if "timestamp" in flt:
        field = flt["timestamp"]
        return _date_matches(page[field], flt[field])
    kind, value = _prop_value(page, schema, flt["property"])
    condition = next(flt[k] for k in flt if k != "property")
    if kind in TEXT_TYPES:
        return _text_matches(_plain(value) if isinstance(value, list) else (value or ""), condition)
    if kind == "select":
        name = value["name"] if value else None
        return _simple_matches(name, condition)
    if kind == "date":
        return _date_matches(value["start"] if value else None, condition)
    return _simple_matches(value, condition)


def _text_matches(text: str, condition: dict[str, Any]) -> bool:
    (op, arg), = condition.items()
    folded, needle = text.lower(), str(arg).lower()
    checks = {
        "equals": lambda: text == arg, "does_not_equal": lambda: text != arg,
        "contains": lambda: needle in folded, "does_not_contain": lambda: needle not in folded,
        "starts_with": lambda: folded.startswith(needle), "ends_with": lambda: folded.endswith(needle),
        "is_empty": lambda: text == "", "is_not_empty": lambda: text != "",
    }
    if op not in checks:
        raise _invalid(f"body failed validation: unknown text filter condition `{op}`.")
    return checks[op]()


def _simple_matches(value: Any, condition: dict[str, Any]) -> bool:
    (op, arg), = condition.items()
    if op == "is_empty":
        return value is None
    if op == "is_not_empty":
        return value is not None
    if value is None:
        return op == "does_not_equal"
    ops: dict[str, Callable[[], bool]] = {
        "equals": lambda: value == arg, "does_not_equal": lambda: value != arg,
        "greater_than": lambda: value > arg, "less_than": lambda: value < arg,
        "greater_than_or_equal_to": lambda: value >= arg, "less_than_or_equal_to": lambda: value <= arg,
    }
    if op not in ops:
        raise _invalid(f"body failed validation: unknown filter condition `{op}`.")
    return ops[op]()


def _date_matches(value: str | None, condition: dict[str, Any]) -> bool:
    (op, arg), = condition.items()
    if op == "is_empty":
        return value is None
    if op == "is_not_empty":
        return value is not None
    if value is None:
        return False
    moment = _parse_date(value, "date")[0]
    other = _parse_date(arg, "body.filter.date")[0]
    ops = {"equals": moment == other, "before": moment < other, "after": moment > other,
           "on_or_before": moment <= other, "on_or_after": moment >= other}
    if op not in ops:
        raise _invalid(f"body failed validation: unknown date filter condition `{op}`.")
    return ops[op]


def _sort_key(page: dict[str, Any], spec: dict[str, Any], schema: dict[str, Any]) -> Any:
    if "timestamp" in spec:
        return page[spec["timestamp"]]
    kind, value = _prop_value(page, schema, spec["property"])
    if kind in ("title", "rich_text"):
        return _plain(value) or None
    if kind == "select":
        return value["name"] if value else None
    if kind == "date":
        return _parse_date(value["start"], "date")[0] if value else None
    return value


def _sorted(rows: list[dict[str, Any]], sorts: Any, schema: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(sorts, list):
        raise _should("body.sorts", "an array", sorts)
    # Deterministic default: newest first, then the stable sort applies each key from last to first.
    rows = sorted(rows, key=lambda p: p["_order"], reverse=True)
    for spec in reversed(sorts):
        if not isinstance(spec, dict) or spec.get("direction") not in ("ascending", "descending"):
            raise _should("body.sorts[].direction", '`"ascending"` or `"descending"`', spec)
        if "property" in spec and spec["property"] not in schema:
            raise _invalid(f"Could not find sort property with name or id: {spec['property']}")
        present = [p for p in rows if _sort_key(p, spec, schema) is not None]
        empty = [p for p in rows if _sort_key(p, spec, schema) is None]
        present.sort(key=lambda p, s=spec: _sort_key(p, s, schema), reverse=spec["direction"] == "descending")
        rows = present + empty  # empty values sort last in both directions
    return rows


def _public(page: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in page.items() if not k.startswith("_")}


class _Handler(BaseHTTPRequestHandler):
    owner: NotionFake
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, body, extra = self.owner.handle(self.command, self.path, headers, raw)
        if isinstance(body, str):
            data, ctype = body.encode("utf-8"), "text/html; charset=utf-8"
        else:
            data, ctype = json.dumps(body).encode("utf-8"), "application/json; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _serve


@contextmanager
def running_notion_fake(**kwargs: Any) -> Iterator[NotionFake]:
    """A started fake, stopped on exit."""
    fake = NotionFake(**kwargs).start()
    try:
        yield fake
    finally:
        fake.stop()
