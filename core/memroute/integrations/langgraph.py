"""LangGraph's long-term memory store backed by memroute: ``create_react_agent(..., store=MemrouteStore(...))``.

``pip install 'memroute[langgraph]'``. A LangGraph item ``(namespace, key) → value`` is one memroute memory, so it
gets memroute's keyword + vector search, fallbacks and replication, and shows up on every other surface.

How a namespace maps onto memroute (docs/integrations/langgraph.md):

- the store is bound to one **tenant**; with ``end_users=True`` (the default for an app) the namespace's first
  label is the **end user** and the item belongs to the composite tenant ``tenant/end user``
  (:mod:`memroute.tenancy`), so one end user's items are isolated from another's exactly as tenants are;
- the remaining labels are the **kind**: when the first of them is a memroute memory type (``factual``,
  ``episodic``, ``procedural``, ``semantic``) the memory has that type, else ``factual``;
- the memory's upsert key is derived from (kind, key); the namespace, key and value are kept in its metadata
  (``langgraph``), and its content is the text search matches: the ``index`` fields of the value when given,
  else its ``content`` / ``text`` / ``memory`` / ``data`` string, else the value as JSON.

``search(prefix, query=...)`` runs memroute's hybrid search in the end user's tenant, then keeps the items under
``prefix`` that pass ``filter``; without a query it lists them, most recently updated first. TTLs are not
supported (memroute's ``expires_at`` is not exposed through LangGraph's refresh-on-read TTL).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from memroute.errors import MissingDependencyError, ValidationError
from memroute.models import Memory, MemoryType
from memroute.tenancy import end_user_tenant, require_end_user, require_key_tenant

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError("memroute.integrations.langgraph needs langgraph: "
                                 "pip install 'memroute[langgraph]'") from exc

if TYPE_CHECKING:
    from memroute.service import Memroute

__all__ = ["MemrouteStore"]

META = "langgraph"
"""The metadata entry holding an item's namespace, key and value."""
_KEY_PREFIX = "langgraph:"
_TEXT_FIELDS = ("content", "text", "memory", "data")
_PAGE = 1000
_TYPES = {t.value: t for t in MemoryType}


class MemrouteStore(BaseStore):
    """A LangGraph ``BaseStore`` over a memroute service (``memroute.open(...)``), bound to ``tenant``."""

    __slots__ = ("end_users", "mem", "tenant")

    def __init__(self, mem: Memroute, *, tenant: str, end_users: bool = True) -> None:
        self.mem = mem
        self.tenant = require_key_tenant(tenant, end_users=end_users)
        self.end_users = end_users

    # --- namespace ↔ memroute ------------------------------------------------------------------------
    def _owner(self, namespace: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """The ``api_key_id`` a namespace's items belong to, and the namespace's kind labels."""
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if not self.end_users:
            return self.tenant, namespace
        try:
            return end_user_tenant(self.tenant, require_end_user(namespace[0], "namespace[0]")), namespace[1:]
        except ValidationError as exc:
            raise InvalidNamespaceError(f"the first label of a namespace is the end user: {exc}") from None

    def _namespace(self, owner: str, kind: Iterable[str]) -> tuple[str, ...]:
        prefix = (owner.rpartition("/")[2],) if self.end_users else ()
        return (*prefix, *kind)

    @staticmethod
    def _key(kind: tuple[str, ...], key: str) -> str:
        digest = hashlib.sha256(json.dumps([list(kind), key]).encode("utf-8")).hexdigest()[:40]
        return f"{_KEY_PREFIX}{digest}"

    def _item(self, memory: Memory, score: float | None = None) -> Item | None:
        stored = memory.metadata.get(META)
        if not isinstance(stored, dict) or not memory.key.startswith(_KEY_PREFIX):
            return None  # a memory made elsewhere (the proxy, MCP): not a LangGraph item
        namespace = self._namespace(memory.api_key_id, stored.get("kind", ()))
        key, value = str(stored.get("key")), dict(stored.get("value") or {})
        if score is not None:
            return SearchItem(namespace=namespace, key=key, value=value, created_at=memory.created_at,
                              updated_at=memory.updated_at, score=score)
        return Item(namespace=namespace, key=key, value=value, created_at=memory.created_at,
                    updated_at=memory.updated_at)

    def _owners(self, prefix: tuple[str, ...]) -> list[str]:
        """The tenants a namespace prefix can reach: one end user's, or every end user's of the tenant."""
        if prefix and prefix[0] != "*":
            return [self._owner(prefix)[0]]
        if not self.end_users:
            return [self.tenant]
        return [end_user_tenant(self.tenant, user) for user in self.mem.end_users(self.tenant)]

    def _items(self, owner: str) -> Iterator[Item]:
        offset = 0
        while True:
            page = self.mem.list(api_key_id=owner, query=_KEY_PREFIX, limit=_PAGE, offset=offset,
                                 order_by="updated_at", order_dir="desc")
            for memory in page.data:
                item = self._item(memory)
                if item is not None:
                    yield item
            offset += len(page.data)
            if not page.data or offset >= page.total:
                return

    # --- the operations --------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run each operation in order (a put then a get of the same item sees the put)."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise ValidationError(f"unknown store operation {type(op).__name__}", [("op", "unknown")])
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread: the event loop never waits on storage."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _get(self, op: GetOp) -> Item | None:
        owner, kind = self._owner(op.namespace)
        memory = self.mem.get_by_key(self._key(kind, op.key), api_key_id=owner)
        return None if memory is None else self._item(memory)

    def _put(self, op: PutOp) -> None:
        owner, kind = self._owner(op.namespace)
        key = self._key(kind, op.key)
        if op.value is None:
            memory = self.mem.get_by_key(key, api_key_id=owner)
            if memory is not None:
                self.mem.delete(memory.id, api_key_id=owner)
            return
        value = dict(op.value)
        memory_type = _TYPES.get(kind[0], MemoryType.FACTUAL) if kind else MemoryType.FACTUAL
        self.mem.add(api_key_id=owner, key=key, content=_text(value, op.index), type=memory_type,
                     metadata={META: {"kind": list(kind), "key": op.key, "value": value}})

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = op.namespace_prefix
        wanted = op.offset + op.limit
        found: list[SearchItem] = []
        for owner in self._owners(prefix):
            if op.query:
                result = self.mem.search(op.query, api_key_id=owner, limit=min(1000, max(wanted * 4, 20)))
                items = (self._item(hit.memory, score=hit.score) for hit in result.hits)
            else:
                items = (SearchItem(namespace=i.namespace, key=i.key, value=i.value, created_at=i.created_at,
                                    updated_at=i.updated_at) for i in self._items(owner))
            for item in items:
                if isinstance(item, SearchItem) and _under(item.namespace, prefix) and _passes(item.value, op.filter):
                    found.append(item)
        if op.query:
            found.sort(key=lambda item: -(item.score or 0.0))
        else:
            found.sort(key=lambda item: item.updated_at, reverse=True)
        return found[op.offset:wanted]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = set()
        for owner in self._owners(()):
            for item in self._items(owner):
                namespace = item.namespace
                if all(_matches(condition, namespace) for condition in op.match_conditions or ()):
                    namespaces.add(namespace[:op.max_depth] if op.max_depth is not None else namespace)
        return sorted(namespaces)[op.offset:op.offset + op.limit]


def _text(value: dict[str, Any], index: Any) -> str:
    """What memroute indexes for a value: its ``index`` fields, else its main text field, else its JSON."""
    if isinstance(index, list) and index:
        parts = [value.get(field) for field in index]
        text = " ".join(str(part) if not isinstance(part, (dict, list)) else json.dumps(part, ensure_ascii=False)
                        for part in parts if part not in (None, ""))
        if text.strip():
            return text
    for field in _TEXT_FIELDS:
        if isinstance(value.get(field), str) and value[field].strip():
            return str(value[field])
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _under(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return len(namespace) >= len(prefix) and all(p in ("*", n) for n, p in zip(namespace, prefix, strict=False))


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if condition.match_type == "prefix":
        return _under(namespace, path)
    if condition.match_type == "suffix":
        return _under(tuple(reversed(namespace)), tuple(reversed(path)))
    raise ValidationError(f"match_type: {condition.match_type!r} is not prefix or suffix", [("match_type", "invalid")])


_OPERATORS = {"$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b, "$gt": lambda a, b: a > b,
              "$gte": lambda a, b: a >= b, "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b}


def _passes(value: dict[str, Any], conditions: dict[str, Any] | None) -> bool:
    """LangGraph's filter: each field equal to the given value, or passing ``{"$gt": …}``-style operators."""
    for field, expected in (conditions or {}).items():
        actual = value.get(field)
        if isinstance(expected, dict) and expected and all(k in _OPERATORS for k in expected):
            try:
                if not all(_OPERATORS[name](actual, operand) for name, operand in expected.items()):
                    return False
            except TypeError:
                return False
        elif actual != expected:
            return False
    return True
