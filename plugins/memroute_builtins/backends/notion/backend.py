"""Notion storage backend (``type = "notion"``): one page per memory in a Notion data source, through
notion-client 3.x (``pip install 'memroute[notion]'``).

The page layout is in :mod:`memroute_builtins.backends.notion.schema`; ``docs/backends/notion.md`` is the user's
guide. Facts about the API this relies on (``shared/reference/apis.md`` §2): Notion-Version 2025-09-03,
queries go to ``data_sources/{id}/query`` (there is no ``databases.query`` in 3.x), pages are created under a
``data_source_id`` parent, delete is ``in_trash: true``, ``None`` keyword arguments are never passed (the
client would forward them as ``null``), and ``base_url`` is the API root without ``/v1``.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs

import memroute
from memroute.errors import (
    ConfigError,
    ConflictError,
    ValidationError,
)
from memroute.interfaces import BackendCapabilities, ComponentContext, MemoryBackend
from memroute.models import (
    BackendHit,
    HealthResult,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
    require_id,
)
from memroute.specs import BackendSpec
from memroute_builtins.backends.notion import schema as ns
from memroute_builtins.backends.notion.search import keyword_score, query_terms
from memroute_builtins.backends.notion.transport import NotionCaller, make_client

__all__ = ["NotionBackend", "NotionSettings", "check_database", "create_database", "memroute_backends"]

log = logging.getLogger("memroute.notion")

PAYLOAD_LIMIT = 500 * 1024
"""Notion's request payload limit (500 KB)."""
ID_BATCH = 50
"""Ids looked up per query in ``get_many`` (one ``or`` filter)."""
SEARCH_CANDIDATES = 1000
"""The most pages a keyword search reads (10 queries) before scoring."""
_HEX32 = re.compile(r"[0-9a-fA-F]{32}")


# --- settings --------------------------------------------------------------------------------------------

def _notion_id(value: str | None, field: str) -> str | None:
    """A canonical dashed id from an id with or without dashes, or from a Notion URL."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a string")
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        found = _HEX32.findall(value.replace("-", ""))
        if not found:
            raise ValueError(
                f"{field}: expected a Notion id (32 hex digits, with or without dashes) or its URL, got {value!r}"
            ) from None
        return str(uuid.UUID(found[-1]))


def _root_url(value: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"base_url: expected an http(s) URL, got {value!r}")
    value = value.rstrip("/")
    # notion-client appends /v1 itself; a root given with /v1 would become /v1/v1.
    return value[: -len("/v1")] if value.endswith("/v1") else value


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name}: must be greater than 0, got {value!r}")


def _not_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name}: must not be negative, got {value!r}")


def _retries(_inst: object, _attribute: attrs.Attribute[Any], value: int) -> None:
    if not 0 <= value <= 10:
        raise ValueError(f"max_retries: must be between 0 and 10, got {value!r}")


def _token(_inst: object, _attribute: attrs.Attribute[Any], value: str) -> None:
    if not value.strip():
        raise ValueError("token: must not be empty (the integration's secret from https://www.notion.so/my-integrations)")


@attrs.frozen(kw_only=True)
class NotionSettings:
    """Options of ``[backends.NAME]`` with ``type = "notion"``."""

    token: str = attrs.field(validator=_token, repr=False)
    """The integration secret (``ntn_...`` / ``secret_...``). Use ``"${NOTION_TOKEN}"`` in the file."""
    database_id: str = attrs.field(converter=lambda v: _notion_id(v, "database_id"))
    """The database ``memroute notion init`` created (id or URL)."""
    data_source_id: str | None = attrs.field(default=None, converter=lambda v: _notion_id(v, "data_source_id"))
    """Which data source to use when the database has more than one."""
    base_url: str = attrs.field(default="https://api.notion.com", converter=_root_url)
    """The API root **without** ``/v1`` (a proxy or a test server); a trailing ``/v1`` is removed."""
    timeout: float = attrs.field(default=30.0, validator=_positive)
    """Seconds per request."""
    max_retries: int = attrs.field(default=3, validator=_retries)
    """Retries of a failed request (429 by notion-client; 5xx, 529, timeouts and non-JSON errors by memroute)."""
    max_retry_delay: float = attrs.field(default=60.0, validator=_positive)
    """Longest wait between retries, in seconds (a longer ``Retry-After`` is capped to it)."""
    requests_per_second: float = attrs.field(default=3.0, validator=_not_negative)
    """Client-side pacing (average, bursts of 10 allowed) per backend instance; 0 turns it off."""
    allow_private: bool = False
    """Let the SSRF guard admit loopback and private addresses in ``base_url`` (a proxy or test server on
    the LAN). Cloud metadata and link-local addresses are refused either way."""


# --- the backend -----------------------------------------------------------------------------------------

def _text_eq(prop: str, value: str) -> dict[str, Any]:
    return {"property": prop, "rich_text": {"equals": value}}


def _ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _ms_floor(moment: datetime) -> str:
    moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class NotionBackend(MemoryBackend):
    """Memories as pages of a Notion data source. Thread-safe (the HTTP client is; writes that could race on
    one key take a lock). Every call for a tenant filters on the ``API Key`` property server-side **and**
    checks the owner again on each returned page."""

    in_process = False  # the Notion API

    type_name = "notion"
    capabilities = BackendCapabilities(
        keyword_ranking=True, sessions=True, expiry=True, ordering=True, large_content=True, persistent=True,
    )
    max_content_units = ns.MAX_TEXT_UNITS
    """Longest content stored, in UTF-16 code units (about 200,000 characters); longer is a ValidationError."""

    def __init__(self, name: str, settings: NotionSettings, *, client: Any = None) -> None:
        super().__init__(name)
        self.settings = settings
        self._client = client if client is not None else make_client(settings)
        self._caller = NotionCaller(name, settings)
        self._call = self._caller.call
        self._data_source_id: str | None = None
        self._init_lock = threading.Lock()
        self._write_locks = [threading.Lock() for _ in range(16)]

    # lifecycle ---------------------------------------------------------------------------------------------

    def initialize(self) -> None:
        """Resolve the data source and check its schema (raises with what to fix)."""
        self._source()

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # closing twice or a broken pool is not the caller's problem
            pass

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_name, "database_id": self.settings.database_id,
                "data_source_id": self._data_source_id, "base_url": self.settings.base_url,
                "max_content_units": self.max_content_units}

    def health(self) -> HealthResult:
        def probe() -> dict[str, Any]:
            source = self._source()
            self._call("reading the data source", lambda: self._client.data_sources.retrieve(data_source_id=source),
                       get=True)
            return {"data_source_id": source}

        return HealthResult.timed(probe)

    def _source(self) -> str:
        if self._data_source_id is None:
            with self._init_lock:
                if self._data_source_id is None:
                    self._data_source_id = self._resolve_source()
        return self._data_source_id

    def _resolve_source(self) -> str:
        db_id = self.settings.database_id
        database = self._call("reading the database", lambda: self._client.databases.retrieve(database_id=db_id),
                              get=True)
        sources = [s for s in database.get("data_sources") or [] if isinstance(s, dict) and "id" in s]
        listing = ", ".join(f"{s.get('name')!r} ({s['id']})" for s in sources)
        wanted = self.settings.data_source_id
        if wanted is not None:
            if wanted not in {_notion_id(s["id"], "id") for s in sources}:
                raise ConfigError(f"backends.{self.name}.data_source_id: {wanted} is not a data source of database "
                                  f"{db_id} (it has: {listing or 'none'})")
            source = wanted
        elif len(sources) == 1:
            source = str(sources[0]["id"])
        elif not sources:
            raise ConflictError(f"Notion database {db_id} has no data source; create one with "
                                "`memroute notion init --parent PAGE_ID`", backend=self.name)
        else:
            raise ConfigError(f"backends.{self.name}: Notion database {db_id} has {len(sources)} data sources "
                              f"({listing}); set data_source_id to the one memroute should use")
        schema = self._call("reading the data source schema",
                            lambda: self._client.data_sources.retrieve(data_source_id=source), get=True)
        problems = ns.schema_problems(schema.get("properties") or {})
        if problems:
            raise ConflictError(
                f"Notion data source {source} does not have memroute's schema: " + "; ".join(problems)
                + ". Fix the properties in Notion, or create a fresh database with "
                "`memroute notion init --parent PAGE_ID` and point database_id at it.",
                backend=self.name,
            )
        return source

    # queries ------------------------------------------------------------------------------------------------

    def _query(self, flt: dict[str, Any] | None, sorts: builtins.list[dict[str, Any]] | None = None,
               cursor: str | None = None, page_size: int = 100) -> dict[str, Any]:
        source = self._source()
        kwargs: dict[str, Any] = {"data_source_id": source, "page_size": page_size}
        # notion-client forwards None values as JSON null: only set what has a value.
        if flt is not None:
            kwargs["filter"] = flt
        if sorts:
            kwargs["sorts"] = sorts
        if cursor:
            kwargs["start_cursor"] = cursor
        result: dict[str, Any] = self._call("querying the data source",
                                            lambda: self._client.data_sources.query(**kwargs))
        return result

    def _walk(self, flt: dict[str, Any] | None, sorts: builtins.list[dict[str, Any]] | None = None,
              cap: int | None = None) -> Iterator[tuple[dict[str, Any], Memory]]:
        """Every page matching ``flt`` (cursor pagination, 100 per request) with its memory; pages that do
        not hold a valid memory (rows edited by hand) are skipped with a warning."""
        cursor: str | None = None
        seen = 0
        while True:
            response = self._query(flt, sorts, cursor)
            for page in response.get("results") or []:
                if page.get("object", "page") != "page" or page.get("in_trash"):
                    continue
                try:
                    memory = ns.page_to_memory(page)
                except ValidationError as exc:
                    log.warning("Notion backend %r: skipping page %s: %s", self.name, page.get("id"), exc)
                    continue
                yield page, memory
                seen += 1
                if cap is not None and seen >= cap:
                    return
            cursor = response.get("next_cursor")
            if not response.get("has_more") or not cursor:
                return

    def _by_id(self, memory_id: str) -> builtins.list[tuple[dict[str, Any], Memory]]:
        rows = [r for r in self._walk(_text_eq(ns.MEMORY_ID, memory_id)) if r[1].id == memory_id]
        return _newest_first(rows)

    @staticmethod
    def _key_filter(api_key_id: str, key: str) -> dict[str, Any]:
        return {"and": [_text_eq(ns.API_KEY, api_key_id), {"property": ns.KEY, "title": {"equals": key}}]}

    def _by_key(self, api_key_id: str, key: str) -> builtins.list[tuple[dict[str, Any], Memory]]:
        rows = [r for r in self._walk(self._key_filter(api_key_id, key))
                if r[1].api_key_id == api_key_id and r[1].key == key]
        return _newest_first(rows)

    # writes -------------------------------------------------------------------------------------------------

    def _write_lock(self, api_key_id: str, key: str) -> threading.Lock:
        return self._write_locks[hash((api_key_id, key)) % len(self._write_locks)]

    @staticmethod
    def _checked(properties: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(properties, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        if size > PAYLOAD_LIMIT - 2048:
            raise ValidationError(f"memory: {size:,} bytes as a Notion request, over Notion's 500 KB request "
                                  "limit; shorten the content or metadata", [("content", "too large for Notion")])
        return properties

    def _create_page(self, memory: Memory) -> None:
        properties = self._checked(ns.memory_to_properties(memory))
        parent = {"type": "data_source_id", "data_source_id": self._source()}

        def landed() -> dict[str, Any] | None:
            rows = self._by_id(memory.id)
            return rows[0][0] if rows else None

        self._call("creating a page", lambda: self._client.pages.create(parent=parent, properties=properties),
                   replay_safe=False, landed=landed)

    def _write_page(self, page_id: str, memory: Memory) -> None:
        properties = self._checked(ns.memory_to_properties(memory))
        # A PATCH that sets every property is idempotent, so it is safe to retry.
        self._call("updating a page", lambda: self._client.pages.update(page_id=page_id, properties=properties))

    def _trash(self, page_id: str) -> None:
        self._call("trashing a page", lambda: self._client.pages.update(page_id=page_id, in_trash=True))

    def create(self, new: NewMemory) -> Memory:
        self._checked(ns.memory_to_properties(new.as_memory()))  # reject what cannot fit before any request
        with self._write_lock(new.api_key_id, new.key):
            rows = self._by_key(new.api_key_id, new.key)
            if not rows:
                memory = new.as_memory()
                self._create_page(memory)
                return memory
            (page, existing), duplicates = rows[0], rows[1:]
            memory = new.merged_into(existing)
            self._write_page(page["id"], memory)
            for other, _ in duplicates:  # left by a concurrent writer elsewhere: one memory per key
                self._trash(other["id"])
            return memory

    def put(self, memory: Memory) -> None:
        self._checked(ns.memory_to_properties(memory))
        with self._write_lock(memory.api_key_id, memory.key):
            # One query for both: the page holding this id, and any page holding this owner's key.
            flt = {"or": [_text_eq(ns.MEMORY_ID, memory.id), self._key_filter(memory.api_key_id, memory.key)]}
            found = [r for r in self._walk(flt) if r[1].id == memory.id
                     or (r[1].api_key_id == memory.api_key_id and r[1].key == memory.key)]
            rows = _newest_first([r for r in found if r[1].id == memory.id]) + _newest_first(
                [r for r in found if r[1].id != memory.id])
            if not rows:
                self._create_page(memory)
                return
            self._write_page(rows[0][0]["id"], memory)
            for page, _ in rows[1:]:
                self._trash(page["id"])

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        if not _plausible_id(memory_id):
            return None
        rows = self._by_id(memory_id)
        if not rows:
            return None
        page, existing = rows[0]
        updated = patch.applied_to(existing)
        self._checked(ns.memory_to_properties(updated))
        with self._write_lock(updated.api_key_id, updated.key):
            if updated.key != existing.key and any(m.id != memory_id
                                                    for _, m in self._by_key(updated.api_key_id, updated.key)):
                raise ConflictError(f"key {updated.key!r} is already used by another memory of this API key",
                                    backend=self.name)
            self._write_page(page["id"], updated)
        return updated

    def delete(self, memory_id: str) -> bool:
        if not _plausible_id(memory_id):
            return False
        rows = self._by_id(memory_id)
        for page, _ in rows:
            self._trash(page["id"])
        return bool(rows)

    # reads --------------------------------------------------------------------------------------------------

    def get(self, memory_id: str) -> Memory | None:
        if not _plausible_id(memory_id):
            return None
        rows = self._by_id(memory_id)
        return rows[0][1] if rows else None

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        wanted = list(dict.fromkeys(i for i in memory_ids if _plausible_id(i)))
        found: dict[str, Memory] = {}
        for start in range(0, len(wanted), ID_BATCH):
            batch = wanted[start:start + ID_BATCH]
            rows = _newest_first(list(self._walk({"or": [_text_eq(ns.MEMORY_ID, i) for i in batch]})))
            for _, memory in reversed(rows):  # newest written last, so it wins
                if memory.id in batch:
                    found[memory.id] = memory
        return found

    def list(self, filter: ListFilter) -> ListPage:
        conditions: builtins.list[dict[str, Any]] = []
        if filter.api_key_id is not None:
            conditions.append(_text_eq(ns.API_KEY, filter.api_key_id))
        if filter.type is not None:
            conditions.append({"property": ns.TYPE, "select": {"equals": filter.type.value}})
        if filter.session_id is not None:
            conditions.append(_text_eq(ns.SESSION, filter.session_id))
        needle = (filter.query or "").strip()
        if needle:
            conditions.append({"or": [{"property": ns.CONTENT, "rich_text": {"contains": needle}},
                                      {"property": ns.KEY, "title": {"contains": needle}}]})
        field = ns.CREATED if filter.order_by == "created_at" else ns.UPDATED
        direction = "ascending" if filter.order_dir == "asc" else "descending"
        sorts = [{"property": field, "direction": direction}]
        # total and by_type need every match: the filter runs server-side, the walk reads 100 per request.
        folded = needle.casefold()
        matches = [
            m for _, m in self._walk({"and": conditions} if conditions else None, sorts)
            if (filter.api_key_id is None or m.api_key_id == filter.api_key_id)
            and (filter.type is None or m.type == filter.type)
            and (filter.session_id is None or m.session_id == filter.session_id)
            and (not folded or folded in m.content.casefold() or folded in m.key.casefold())
        ]
        # Notion sorts at millisecond precision; sort again on the exact timestamps (id breaks ties).
        matches.sort(key=filter.sort_key, reverse=filter.order_dir == "desc")
        by_type: dict[str, int] = {}
        for memory in matches:
            by_type[memory.type.value] = by_type.get(memory.type.value, 0) + 1
        page = matches[filter.offset:filter.offset + filter.limit]
        return ListPage(data=tuple(page), total=len(matches), by_type=by_type)

    def iter_all(self, api_key_id: str | None = None, batch: int = 500) -> Iterable[Memory]:
        """One cursor walk, oldest first (the default would re-walk the data source for every batch)."""
        flt = _text_eq(ns.API_KEY, api_key_id) if api_key_id is not None else None
        sorts = [{"property": ns.CREATED, "direction": "ascending"}]
        for _, memory in self._walk(flt, sorts):
            if api_key_id is None or memory.api_key_id == api_key_id:
                yield memory

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        conditions = self._search_conditions(query)
        terms = query_terms(query.text)
        newest_first = [{"property": ns.CREATED, "direction": "descending"}]
        if query.strategy == "exact" or not terms:
            recent: builtins.list[Memory] = []
            boundary: datetime | None = None
            for _, memory in self._walk({"and": conditions}, newest_first):
                if not query.admits(memory):
                    continue
                # Notion sorts at millisecond precision: read on through ties with the limit-th memory, then
                # stop, instead of walking every match.
                if boundary is not None and _ms(memory.created_at) < boundary:
                    break
                recent.append(memory)
                if len(recent) == query.limit:
                    boundary = _ms(memory.created_at)
            recent.sort(key=lambda m: (m.created_at, m.id), reverse=True)
            recent = recent[:query.limit]
            return [BackendHit(memory=m, score=1.0 / (rank + 1)) for rank, m in enumerate(recent)]
        text_filter = [{"property": prop, kind: {"contains": term}}
                       for term in terms for prop, kind in ((ns.CONTENT, "rich_text"), (ns.KEY, "title"))]
        conditions.append({"or": text_filter})
        scored = []
        # Newest first, so a capped candidate set is the most recent one.
        for _, memory in self._walk({"and": conditions}, newest_first, cap=SEARCH_CANDIDATES):
            if not query.admits(memory):
                continue
            score = keyword_score(memory, query.text)
            if score > 0:
                scored.append((score, memory))
        scored.sort(key=lambda sm: (sm[0], sm[1].created_at, sm[1].id), reverse=True)
        return [BackendHit(memory=m, score=float(s)) for s, m in scored[:query.limit]]

    @staticmethod
    def _search_conditions(query: SearchQuery) -> builtins.list[dict[str, Any]]:
        """The query's filters as Notion filters: a superset of what ``query.admits`` accepts (Notion compares
        at millisecond precision), so the exact check runs on every returned page as well."""
        now_floor = _ms_floor(query.now - timedelta(milliseconds=1))
        conditions: builtins.list[dict[str, Any]] = [
            _text_eq(ns.API_KEY, query.api_key_id),
            {"or": [{"property": ns.EXPIRES, "date": {"is_empty": True}},
                    {"property": ns.EXPIRES, "date": {"after": now_floor}}]},
        ]
        if query.session_id is not None:
            conditions.append(_text_eq(ns.SESSION, query.session_id))
        cutoff = query.created_after
        if cutoff is not None:
            conditions.append({"property": ns.CREATED, "date": {"on_or_after": _ms_floor(cutoff)}})
        return conditions


# --- set-up (``memroute notion init`` / ``check``) --------------------------------------------------------

def create_database(settings: NotionSettings, parent_page_id: str, title: str = "memroute memories") -> dict[str, str]:
    """Create a database with memroute's schema under the page ``parent_page_id`` (``settings.database_id``
    is ignored) and check it the way the backend will. Returns ``database_id``, ``data_source_id``, ``url``."""
    parent = _notion_id(parent_page_id, "parent")
    assert parent is not None
    backend = NotionBackend("notion-init", settings)
    try:
        database = backend._call(
            "creating the database",
            lambda: backend._client.databases.create(
                parent={"type": "page_id", "page_id": parent},
                title=[{"type": "text", "text": {"content": title}}],
                initial_data_source={"properties": ns.database_properties()},
            ),
            replay_safe=False,
            not_found_hint="share the parent page with the integration (page → ••• → Connections → add it) and "
                           "check --parent",
        )
        sources = database.get("data_sources") or []
        checker = NotionBackend("notion-init", attrs.evolve(settings, database_id=database["id"]),
                                client=backend._client)
        checker.initialize()
    finally:
        backend.close()
    return {"database_id": str(database["id"]), "data_source_id": str(sources[0]["id"]) if sources else "",
            "url": str(database.get("url") or "")}


def check_database(settings: NotionSettings) -> dict[str, Any]:
    """Resolve the data source and check its schema (raises :class:`ConflictError` saying what to fix)."""
    backend = NotionBackend("notion-check", settings)
    try:
        backend.initialize()
        return backend.describe()
    finally:
        backend.close()


# --- helpers ---------------------------------------------------------------------------------------------

def _plausible_id(memory_id: object) -> bool:
    """Whether an id could name a stored memory: a string that every stored id's rules admit (no NUL, no lone
    surrogate: those cannot even be sent as JSON). Anything else is simply not found."""
    try:
        require_id(memory_id)
    except ValidationError:
        return False
    return True


def _newest_first(rows: builtins.list[tuple[dict[str, Any], Memory]]) -> builtins.list[tuple[dict[str, Any], Memory]]:
    return sorted(rows, key=lambda r: (r[1].updated_at, r[0].get("created_time", "")), reverse=True)


def _factory(settings: NotionSettings, context: ComponentContext) -> NotionBackend:
    return NotionBackend(context.instance_name, settings)


@memroute.hookimpl
def memroute_backends() -> Iterator[BackendSpec]:
    yield BackendSpec(name="notion", factory=_factory, settings_class=NotionSettings,
                      description="Memories as pages of a Notion database (notion-client 3.x; memroute[notion])")


@memroute.hookimpl
def memroute_register_commands(cli: Any) -> None:
    """``memroute notion init`` / ``check`` (see :mod:`memroute_builtins.backends.notion.commands`)."""
    from memroute_builtins.backends.notion.commands import notion_group

    cli.add_command(notion_group)
