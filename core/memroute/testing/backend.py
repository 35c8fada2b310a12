"""The storage backend conformance suite: an abstract pytest class every backend's tests subclass.

Usage (in your plugin's tests)::

    import pytest
    from memroute.testing import BackendContract

    class TestMyBackend(BackendContract):
        @pytest.fixture
        def backend(self, tmp_path):
            backend = MyBackend(name="test", root=tmp_path)
            backend.initialize()
            yield backend          # the contract closes it after each test (close must be idempotent)

        # Optional: enables the persistence test (capability ``persistent``).
        @pytest.fixture
        def reopen(self, tmp_path):
            def reopen(old):
                old.close()
                fresh = MyBackend(name="test", root=tmp_path)
                fresh.initialize()
                return fresh
            return reopen

The ``backend`` fixture must yield a **fresh, empty, initialized** backend for every test. Everything else
comes from the contract: CRUD, upsert on ``(api_key_id, key)``, ``put`` replication, ``get_many``, list
filters / pagination / totals / ordering, search (recency and keyword), expiry, retention and session
filters, tenant isolation on every operation, unicode and large content, bad input, health, thread
safety and persistence.

A backend that cannot do something declares it in its ``capabilities``
(:class:`~memroute.interfaces.BackendCapabilities`) and the matching tests are skipped with a reason:
``keyword_ranking``, ``sessions``, ``expiry``, ``ordering``, ``large_content``, ``persistent``,
``access_tracking`` (those tests live in :mod:`memroute.testing.access`).

The base class is not collected by pytest (``__test__ = False``); a subclass is collected automatically
(``__init_subclass__`` sets ``__test__ = True`` unless the subclass sets it itself, which lets you build an
intermediate abstract base).

Timestamps: tests that compare timestamps a backend was *given* (``put``, ``NewMemory.now``) use whole
seconds, so a backend must keep at least second precision; timestamps it *made* must read back exactly as
``create``/``update`` returned them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest

from memroute.errors import ConflictError, ValidationError
from memroute.interfaces import MemoryBackend
from memroute.models import (
    ListFilter,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
    new_memory_id,
    utcnow,
)
from memroute.testing.access import AccessTrackingTests
from memroute.testing.batches import BatchCreateTests
from memroute.testing.history import HistoryTests
from memroute.testing.routing import TenantRoutingTests

__all__ = ["FTS_SYNTAX_QUERIES", "BackendContract", "ROUND_TRIP_CONTENTS"]

TENANT_A = "tenant-a"
TENANT_B = "tenant-b"

ROUND_TRIP_CONTENTS: dict[str, str] = {
    "ascii": "I prefer TypeScript over JavaScript",
    "accents": "Ich heiße Zoë; café crème à la française",
    "emoji": "I love 🐍 and 🦀 (and 👩‍💻 with ZWJ sequences)",
    "cjk": "我喜欢用 Python 写代码。日本語のテキスト。한국어 텍스트",
    "rtl": "مرحبا بالعالم — שלום עולם",
    "newlines": "line one\nline two\n\nline four",
    "crlf": "windows line\r\nsecond line\r\n",
    "frontmatter": "---\ntitle: not yaml\n---\nbody with --- inside",
    "quotes": "she said \"hi\" and 'bye' `code` \\ backslash {\"json\": [1, 2]}",
    "markup": "<b>bold</b> & **md** | pipes | # heading %s %d {0} $HOME",
    "whitespace": "  leading and trailing spaces kept  \t",
}

FTS_SYNTAX_QUERIES: tuple[str, ...] = (
    '"',
    '"unbalanced quote',
    "*",
    "Type*",
    "NEAR(",
    "NEAR(TypeScript prefer, 2)",
    "AND OR",
    "TypeScript AND OR NOT",
    "-TypeScript",
    "prefer -",
    "content:TypeScript",
    ":",
    "^TypeScript",
    "(TypeScript",
    "TypeScript)",
    "((()",
    "{content key}: TypeScript",
    "'; DROP TABLE memories; --",
    "%_\\",
    "   ",
    "🐍",
)


class BackendContract(AccessTrackingTests, BatchCreateTests, HistoryTests, TenantRoutingTests):
    """Abstract conformance tests for a :class:`~memroute.interfaces.MemoryBackend`.

    Override the ``backend`` fixture (required) and the ``reopen`` fixture (optional, for persistence).
    """

    __test__: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__test__" not in cls.__dict__:
            cls.__test__ = True

    # --- fixtures a subclass provides -------------------------------------------------------------------

    @pytest.fixture
    def backend(self) -> Iterator[MemoryBackend]:
        """Yield a fresh, empty, initialized backend. Subclasses must override this fixture."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `backend` fixture to yield a fresh, initialized backend"
        )
        yield  # pragma: no cover

    @pytest.fixture
    def reopen(self) -> Callable[[MemoryBackend], MemoryBackend] | None:
        """Return ``reopen(old) -> new``: close ``old`` and return a new, initialized backend over the same
        storage. ``None`` (the default) skips the persistence test."""
        return None

    @pytest.fixture(autouse=True)
    def _close_backend_after_test(self, backend: MemoryBackend) -> Iterator[None]:
        yield
        backend.close()

    # --- helpers ----------------------------------------------------------------------------------------

    @staticmethod
    def require(backend: MemoryBackend, capability: str) -> None:
        """Skip the running test unless ``backend`` declares ``capability``."""
        if not getattr(backend.capabilities, capability):
            pytest.skip(f"{type(backend).__name__} declares capability {capability}=False")

    @staticmethod
    def base_time() -> datetime:
        """A whole-second timestamp an hour ago: timestamps built from it survive any backend precision."""
        return utcnow().replace(microsecond=0) - timedelta(hours=1)

    @staticmethod
    def new(api_key_id: str = TENANT_A, key: str = "k", content: str = "some content", **fields: Any) -> NewMemory:
        return NewMemory(api_key_id=api_key_id, key=key, content=content, **fields)

    @staticmethod
    def stored(api_key_id: str = TENANT_A, key: str = "k", content: str = "some content", *,
               at: datetime, **fields: Any) -> Memory:
        return Memory(id=fields.pop("id", new_memory_id()), api_key_id=api_key_id, key=key, content=content,
                      created_at=at, updated_at=fields.pop("updated_at", at), **fields)

    @staticmethod
    def assert_same(got: Memory | None, expected: Memory, what: str) -> None:
        assert got is not None, f"{what}: backend returned None for id {expected.id}"
        mismatched = [
            f"{name}: expected {getattr(expected, name)!r}, backend gave {getattr(got, name)!r}"
            for name in ("id", "api_key_id", "session_id", "type", "key", "content", "metadata",
                         "created_at", "updated_at", "expires_at")
            if getattr(got, name) != getattr(expected, name)
        ]
        assert not mismatched, f"{what}: " + "; ".join(mismatched)

    @staticmethod
    def ids(items: Any) -> list[str]:
        return [getattr(item, "memory", item).id for item in items]

    # --- create / get -----------------------------------------------------------------------------------

    def test_create_returns_the_stored_memory(self, backend: MemoryBackend) -> None:
        at = self.base_time()
        new = self.new(key="lang", content="I prefer TypeScript", type="semantic", session_id="s1",
                       metadata={"source": "test", "n": 1}, expires_at=at + timedelta(days=3), now=at)
        created = backend.create(new)
        self.assert_same(created, new.as_memory(), "create() result")
        self.assert_same(backend.get(new.id), created, "get() after create()")

    @pytest.mark.parametrize("label", list(ROUND_TRIP_CONTENTS))
    def test_content_round_trips_exactly(self, backend: MemoryBackend, label: str) -> None:
        content = ROUND_TRIP_CONTENTS[label]
        created = backend.create(self.new(key=f"key-{label}-é🐍", content=content))
        got = backend.get(created.id)
        assert got is not None, f"get() lost the memory with {label} content"
        assert got.content == content, f"{label} content was altered: stored {content!r}, got {got.content!r}"
        assert got.key == f"key-{label}-é🐍", f"key with unicode was altered: got {got.key!r}"

    def test_metadata_round_trips(self, backend: MemoryBackend) -> None:
        metadata = {"nested": {"list": [1, 2.5, "three", None, True]}, "ünï": "😀", "empty": {}, "zero": 0}
        created = backend.create(self.new(metadata=metadata))
        got = backend.get(created.id)
        assert got is not None and got.metadata == metadata, f"metadata altered: {got and got.metadata!r}"

    def test_large_content_round_trips(self, backend: MemoryBackend) -> None:
        self.require(backend, "large_content")
        content = ("0123456789abcdef-ü-🐍\n" * 5000)[:100_000]
        created = backend.create(self.new(content=content))
        got = backend.get(created.id)
        assert got is not None, "a 100 KB memory was not stored"
        assert got.content == content, f"100 KB content altered (len {len(got.content)} vs {len(content)})"

    def test_get_unknown_id_returns_none(self, backend: MemoryBackend) -> None:
        backend.create(self.new())
        assert backend.get(new_memory_id()) is None, "get() of an unknown id must return None"
        assert backend.get("not-a-uuid") is None, "get() of a malformed id must return None, not raise"

    # --- upsert -----------------------------------------------------------------------------------------

    def test_create_with_existing_key_upserts(self, backend: MemoryBackend) -> None:
        at = self.base_time()
        first = backend.create(self.new(key="pref", content="old", type="factual",
                                        metadata={"a": 1, "b": 1}, now=at))
        second_new = self.new(key="pref", content="new", type="procedural", metadata={"b": 2, "c": 3},
                              now=at + timedelta(seconds=30))
        second = backend.create(second_new)
        assert second.id == first.id, "upsert on (api_key_id, key) must keep the existing id"
        assert second.created_at == first.created_at, "upsert must keep created_at"
        assert second.updated_at == at + timedelta(seconds=30), "upsert must set updated_at to the write time"
        assert second.content == "new" and second.type == MemoryType.PROCEDURAL, "upsert must update content/type"
        assert second.metadata == {"a": 1, "b": 2, "c": 3}, f"metadata must be shallow-merged, got {second.metadata}"
        self.assert_same(backend.get(first.id), second, "get() after upsert")
        assert backend.get(second_new.id) is None, "upsert must not store a second memory under the new id"
        page = backend.list(ListFilter(api_key_id=TENANT_A))
        assert page.total == 1, f"upsert created a duplicate: list total is {page.total}"

    def test_upsert_updates_session(self, backend: MemoryBackend) -> None:
        self.require(backend, "sessions")
        first = backend.create(self.new(key="pref", session_id="s1"))
        second = backend.create(self.new(key="pref", session_id="s2"))
        assert second.id == first.id and second.session_id == "s2", "upsert must replace session_id"
        third = backend.create(self.new(key="pref", session_id=None))
        assert third.session_id is None, "upsert without a session must clear session_id"
        got = backend.get(first.id)
        assert got is not None and got.session_id is None, "cleared session_id did not persist"

    def test_upsert_sets_and_clears_expiry(self, backend: MemoryBackend) -> None:
        self.require(backend, "expiry")
        at = self.base_time()
        expiry = at + timedelta(days=7)
        first = backend.create(self.new(key="temp", now=at))
        second = backend.create(self.new(key="temp", expires_at=expiry, now=at + timedelta(seconds=1)))
        assert second.id == first.id
        assert second.expires_at == expiry, f"upsert must set expires_at, got {second.expires_at}"
        got = backend.get(first.id)
        assert got is not None and got.expires_at == expiry, "expiry set by upsert did not persist"
        third = backend.create(self.new(key="temp", expires_at=None, now=at + timedelta(seconds=2)))
        assert third.expires_at is None, "upsert without expires_at must clear the expiry"
        got = backend.get(first.id)
        assert got is not None and got.expires_at is None, "expiry cleared by upsert did not persist"

    def test_same_key_in_two_tenants_is_two_memories(self, backend: MemoryBackend) -> None:
        a = backend.create(self.new(api_key_id=TENANT_A, key="shared", content="alpha"))
        b = backend.create(self.new(api_key_id=TENANT_B, key="shared", content="beta"))
        assert a.id != b.id, "the same key under two api keys must be two memories"
        got_a, got_b = backend.get(a.id), backend.get(b.id)
        assert got_a is not None and got_a.content == "alpha", "tenant B's upsert overwrote tenant A's memory"
        assert got_b is not None and got_b.content == "beta"

    def test_upsert_never_touches_another_tenants_key(self, backend: MemoryBackend) -> None:
        """Tenant B holds the key first; tenant A then upserts the same key twice. A backend whose upsert
        lookup matches on ``key`` alone passes every single-tenant test and overwrites B's memory here."""
        b = backend.create(self.new(api_key_id=TENANT_B, key="shared", content="B's original",
                                    metadata={"owner": "b"}))
        first = backend.create(self.new(api_key_id=TENANT_A, key="shared", content="A's first"))
        second = backend.create(self.new(api_key_id=TENANT_A, key="shared", content="A's second",
                                         metadata={"v": 2}))
        assert first.id != b.id and first.api_key_id == TENANT_A, "A's upsert returned tenant B's memory"
        assert second.id == first.id, "A's second upsert of its own key must keep A's id"
        assert second.metadata == {"v": 2}, f"A's upsert merged another tenant's metadata: {second.metadata}"
        self.assert_same(backend.get(b.id), b, "tenant B's memory after tenant A upserted the same key twice")
        assert backend.list(ListFilter(api_key_id=TENANT_B)).total == 1
        assert self.ids(backend.list(ListFilter(api_key_id=TENANT_A)).data) == [first.id]

    def test_same_key_in_two_tenants_update_delete_and_put(self, backend: MemoryBackend) -> None:
        at = self.base_time()
        a = backend.create(self.new(api_key_id=TENANT_A, key="shared", content="alpha", now=at))
        b = backend.create(self.new(api_key_id=TENANT_B, key="shared", content="beta", now=at))
        updated = backend.update(a.id, MemoryPatch(content="alpha 2", metadata={"x": 1}))
        assert updated is not None and updated.id == a.id and updated.api_key_id == TENANT_A
        self.assert_same(backend.get(b.id), b, "tenant B's memory after A updated its memory with the same key")
        # A renames its memory away and back: the key is free under A whatever B holds
        assert backend.update(a.id, MemoryPatch(key="renamed")) is not None
        assert backend.update(a.id, MemoryPatch(key="shared")) is not None
        self.assert_same(backend.get(b.id), b, "tenant B's memory after A renamed a memory to B's key")
        # a replicated put of A's memory under the shared key evicts only A's own holder of that key
        replica = self.stored(api_key_id=TENANT_A, key="shared", content="alpha replica", at=at)
        backend.put(replica)
        self.assert_same(backend.get(b.id), b, "tenant B's memory after a put of A's memory with the same key")
        assert backend.delete(replica.id) is True
        self.assert_same(backend.get(b.id), b, "tenant B's memory after A deleted its memory with the same key")
        again = backend.create(self.new(api_key_id=TENANT_A, key="shared", content="alpha anew"))
        assert again.id != b.id and backend.get(b.id) is not None
        assert backend.list(ListFilter(api_key_id=TENANT_B)).total == 1

    # --- put --------------------------------------------------------------------------------------------

    def test_put_stores_exactly(self, backend: MemoryBackend) -> None:
        at = self.base_time()
        memory = self.stored(key="replica", content="replicated", at=at, updated_at=at + timedelta(minutes=5),
                             type="episodic", session_id="s9", metadata={"x": [1]}, expires_at=at + timedelta(days=1))
        backend.put(memory)
        self.assert_same(backend.get(memory.id), memory, "get() after put()")
        backend.put(memory)  # idempotent
        assert backend.list(ListFilter(api_key_id=TENANT_A)).total == 1, "put() twice must not duplicate"

    def test_put_replaces_same_id(self, backend: MemoryBackend) -> None:
        at = self.base_time()
        memory = self.stored(key="k1", content="v1", at=at)
        backend.put(memory)
        changed = self.stored(id=memory.id, key="k2", content="v2", at=at, updated_at=at + timedelta(seconds=9),
                              metadata={"replaced": True})
        backend.put(changed)
        self.assert_same(backend.get(memory.id), changed, "put() over the same id")
        assert backend.list(ListFilter(api_key_id=TENANT_A)).total == 1

    def test_put_replaces_other_id_with_same_key(self, backend: MemoryBackend) -> None:
        at = self.base_time()
        local = backend.create(self.new(key="dup", content="local copy", now=at))
        other = backend.create(self.new(api_key_id=TENANT_B, key="dup", content="other tenant", now=at))
        incoming = self.stored(key="dup", content="primary's copy", at=at - timedelta(minutes=1))
        backend.put(incoming)
        assert backend.get(local.id) is None, "put() must replace the memory holding the same (api_key_id, key)"
        self.assert_same(backend.get(incoming.id), incoming, "put() replacing a same-key memory")
        page = backend.list(ListFilter(api_key_id=TENANT_A))
        assert page.total == 1, f"put() left {page.total} memories with the same key"
        assert backend.get(other.id) is not None, "put() for tenant A replaced tenant B's memory with that key"

    # --- get_many ---------------------------------------------------------------------------------------

    def test_get_many(self, backend: MemoryBackend) -> None:
        made = [backend.create(self.new(key=f"k{i}", content=f"c{i}")) for i in range(5)]
        missing = new_memory_id()
        wanted = [made[0].id, made[3].id, missing, made[4].id]
        found = backend.get_many(wanted)
        assert set(found) == {made[0].id, made[3].id, made[4].id}, f"get_many returned ids {sorted(found)}"
        for memory in (made[0], made[3], made[4]):
            self.assert_same(found[memory.id], memory, "get_many()")
        assert backend.get_many([]) == {}, "get_many([]) must return {}"

    def test_get_by_key_is_exact_and_tenant_scoped(self, backend: MemoryBackend) -> None:
        wanted = backend.create(self.new(key="preference:python", content="likes Python"))
        backend.create(self.new(key="preference:python_packaging", content="likes packaging"))
        backend.create(self.new(key="aversion:python", content="preference:python is mentioned here"))
        theirs = backend.create(self.new(api_key_id=TENANT_B, key="preference:go", content="likes Go"))
        self.assert_same(backend.get_by_key(TENANT_A, "preference:python"), wanted, "get_by_key()")
        assert backend.get_by_key(TENANT_A, "preference:py") is None, "get_by_key() matched a key prefix"
        assert backend.get_by_key(TENANT_A, "preference:go") is None, "get_by_key() returned another tenant's"
        found = backend.get_by_key(TENANT_B, "preference:go")
        assert found is not None and found.id == theirs.id, "get_by_key() missed tenant B's key"

    # --- update -----------------------------------------------------------------------------------------

    def test_update_each_field(self, backend: MemoryBackend) -> None:
        at = self.base_time()
        created = backend.create(self.new(key="k", content="before", metadata={"a": 1}, now=at))
        patches: list[tuple[str, Any]] = [
            ("content", "after"),
            ("key", "k-renamed"),
            ("type", MemoryType.EPISODIC),
            ("metadata", {"b": 2}),
        ]
        if backend.capabilities.sessions:
            patches += [("session_id", "s-new"), ("session_id", None)]
        if backend.capabilities.expiry:
            patches += [("expires_at", at + timedelta(days=2)), ("expires_at", None)]
        for step, (field, value) in enumerate(patches, start=1):
            when = at + timedelta(seconds=step)
            updated = backend.update(created.id, MemoryPatch(**{field: value}, now=when))
            assert updated is not None, f"update({field}) returned None for an existing id"
            assert getattr(updated, field) == value, f"update({field}={value!r}) gave {getattr(updated, field)!r}"
            assert updated.updated_at == when, f"update({field}) must set updated_at to the patch time"
            assert updated.created_at == created.created_at, f"update({field}) changed created_at"
            assert updated.id == created.id
            self.assert_same(backend.get(created.id), updated, f"get() after update({field})")
        final = backend.get(created.id)
        assert final is not None and final.metadata == {"b": 2}, "update(metadata) must replace, not merge"

    def test_update_unknown_id_returns_none(self, backend: MemoryBackend) -> None:
        assert backend.update(new_memory_id(), MemoryPatch(content="x")) is None, "update of unknown id must be None"

    def test_update_key_collision_is_a_conflict(self, backend: MemoryBackend) -> None:
        first = backend.create(self.new(key="one", content="first"))
        second = backend.create(self.new(key="two", content="second"))
        with pytest.raises(ConflictError):
            backend.update(second.id, MemoryPatch(key="one"))
        got = backend.get(second.id)
        assert got is not None and got.key == "two", "a rejected key change must leave the memory unchanged"
        got_first = backend.get(first.id)
        assert got_first is not None and got_first.content == "first"
        # the same key as its own, and a key another tenant holds, are fine
        assert backend.update(second.id, MemoryPatch(key="two", content="second!")) is not None
        backend.create(self.new(api_key_id=TENANT_B, key="three"))
        renamed = backend.update(second.id, MemoryPatch(key="three"))
        assert renamed is not None and renamed.key == "three", "a key held only by another tenant must be allowed"

    def test_empty_patch_keeps_the_memory(self, backend: MemoryBackend) -> None:
        created = backend.create(self.new(content="unchanged", metadata={"m": 1}))
        updated = backend.update(created.id, MemoryPatch())
        assert updated is not None, "an empty patch on an existing id must return the memory"
        for field in ("id", "key", "content", "type", "session_id", "metadata", "created_at", "expires_at"):
            assert getattr(updated, field) == getattr(created, field), f"an empty patch changed {field}"

    # --- delete -----------------------------------------------------------------------------------------

    def test_delete(self, backend: MemoryBackend) -> None:
        keep = backend.create(self.new(key="keep"))
        gone = backend.create(self.new(key="gone", content="delete me please"))
        assert backend.delete(gone.id) is True, "delete of an existing id must return True"
        assert backend.get(gone.id) is None, "deleted memory is still returned by get()"
        assert backend.delete(gone.id) is False, "delete of a deleted id must return False"
        assert backend.delete(new_memory_id()) is False
        assert backend.get(keep.id) is not None, "delete removed another memory"
        hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="delete please", strategy="hybrid"))
        assert gone.id not in self.ids(hits), "deleted memory still found by search"
        recreated = backend.create(self.new(key="gone", content="back again"))
        assert recreated.id != gone.id, "re-creating a deleted key must make a new memory"

    # --- list -------------------------------------------------------------------------------------------

    def _seed_list(self, backend: MemoryBackend) -> list[Memory]:
        at = self.base_time()
        specs = [
            ("f1", "Alpha fact about Python", "factual", "s1"),
            ("f2", "beta fact about rust", "factual", "s2"),
            ("e1", "An EPISODE with python", "episodic", "s1"),
            ("p1", "procedure: run tests", "procedural", None),
            ("s1", "semantic note 100% done_ok", "semantic", "s2"),
        ]
        made = []
        for i, (key, content, mtype, session) in enumerate(specs):
            made.append(backend.create(self.new(key=key, content=content, type=mtype, session_id=session,
                                                now=at + timedelta(seconds=i))))
        backend.create(self.new(api_key_id=TENANT_B, key="f1", content="tenant b python", now=at))
        return made

    def test_list_tenant_total_and_by_type(self, backend: MemoryBackend) -> None:
        made = self._seed_list(backend)
        page = backend.list(ListFilter(api_key_id=TENANT_A, limit=2))
        assert page.total == 5, f"total must count every match, not the page: got {page.total}"
        assert len(page.data) == 2, f"limit=2 returned {len(page.data)} memories"
        assert page.by_type == {"factual": 2, "episodic": 1, "procedural": 1, "semantic": 1}, (
            f"by_type must count all matches by type, got {page.by_type}"
        )
        everything = backend.list(ListFilter(api_key_id=TENANT_A, limit=100))
        assert {m.id for m in everything.data} == {m.id for m in made}, "list returned the wrong memories"
        assert all(m.api_key_id == TENANT_A for m in everything.data), "list leaked another tenant's memory"

    def test_list_filters(self, backend: MemoryBackend) -> None:
        self._seed_list(backend)
        by_type = backend.list(ListFilter(api_key_id=TENANT_A, type="factual"))
        assert sorted(m.key for m in by_type.data) == ["f1", "f2"] and by_type.total == 2, "type filter wrong"
        assert by_type.by_type == {"factual": 2}, f"by_type must follow the filters, got {by_type.by_type}"
        query = backend.list(ListFilter(api_key_id=TENANT_A, query="PYTHON"))
        assert sorted(m.key for m in query.data) == ["e1", "f1"], (
            f"query must be a case-insensitive substring over content and key, got {[m.key for m in query.data]}"
        )
        by_key = backend.list(ListFilter(api_key_id=TENANT_A, query="p1"))
        assert [m.key for m in by_key.data] == ["p1"], "query must also match the key"
        literal = backend.list(ListFilter(api_key_id=TENANT_A, query="100%"))
        assert [m.key for m in literal.data] == ["s1"], "'%' in a list query must match literally"
        underscore = backend.list(ListFilter(api_key_id=TENANT_A, query="t_st"))
        assert underscore.total == 0, "'_' in a list query must match literally, not as a wildcard"
        if backend.capabilities.sessions:
            session = backend.list(ListFilter(api_key_id=TENANT_A, session_id="s1"))
            assert sorted(m.key for m in session.data) == ["e1", "f1"], "session filter wrong"
            combined = backend.list(ListFilter(api_key_id=TENANT_A, session_id="s2", type="semantic"))
            assert [m.key for m in combined.data] == ["s1"] and combined.total == 1, "combined filters wrong"

    def test_list_pagination(self, backend: MemoryBackend) -> None:
        self._seed_list(backend)
        seen: list[str] = []
        for offset in range(0, 6, 2):
            page = backend.list(ListFilter(api_key_id=TENANT_A, limit=2, offset=offset))
            assert page.total == 5, f"total changed with offset {offset}: {page.total}"
            seen += [m.id for m in page.data]
        assert len(seen) == 5 and len(set(seen)) == 5, f"pages overlapped or lost rows: {seen}"
        beyond = backend.list(ListFilter(api_key_id=TENANT_A, limit=2, offset=50))
        assert beyond.data == () and beyond.total == 5, "an offset past the end must give no rows, same total"

    @pytest.mark.parametrize("order_by", ["created_at", "updated_at"])
    @pytest.mark.parametrize("order_dir", ["asc", "desc"])
    def test_list_ordering(self, backend: MemoryBackend, order_by: str, order_dir: str) -> None:
        self.require(backend, "ordering")
        made = self._seed_list(backend)
        # make updated_at order differ from created_at order: touch the oldest last
        backend.update(made[0].id, MemoryPatch(content="touched", now=self.base_time() + timedelta(minutes=5)))
        page = backend.list(ListFilter(api_key_id=TENANT_A, order_by=order_by, order_dir=order_dir))
        stamps = [getattr(m, order_by) for m in page.data]
        expected = sorted(stamps, reverse=order_dir == "desc")
        assert stamps == expected, f"list(order_by={order_by}, order_dir={order_dir}) returned {stamps}"

    def test_list_default_order_is_newest_first(self, backend: MemoryBackend) -> None:
        self.require(backend, "ordering")
        made = self._seed_list(backend)
        page = backend.list(ListFilter(api_key_id=TENANT_A))
        assert [m.id for m in page.data] == [m.id for m in reversed(made)], "default order must be created_at desc"

    def test_list_all_tenants_and_iter_all(self, backend: MemoryBackend) -> None:
        self._seed_list(backend)
        everyone = backend.list(ListFilter(api_key_id=None, limit=100))
        assert everyone.total == 6, f"list(api_key_id=None) must list every tenant, got total {everyone.total}"
        only_a = list(backend.iter_all(TENANT_A, batch=2))
        assert len(only_a) == 5 and all(m.api_key_id == TENANT_A for m in only_a), "iter_all(tenant) wrong"
        assert len(list(backend.iter_all(batch=4))) == 6, "iter_all() must yield every memory once"

    # --- search -----------------------------------------------------------------------------------------

    def _seed_search(self, backend: MemoryBackend) -> dict[str, Memory]:
        at = self.base_time()
        docs = {
            "lang": "I prefer TypeScript for frontend work and TypeScript tooling",
            "weather": "The weather in Paris is rainy in November",
            "pet": "My cat is named Miso and sleeps all day",
            "food": "Favourite food: ramen with extra garlic",
            "editor": "I use Neovim as my editor, configured in Lua",
        }
        made = {}
        for i, (key, content) in enumerate(docs.items()):
            made[key] = backend.create(self.new(key=key, content=content, now=at + timedelta(seconds=i)))
        backend.create(self.new(api_key_id=TENANT_B, key="lang", content="Tenant B prefers TypeScript too",
                                now=at + timedelta(seconds=10)))
        return made

    def test_search_exact_is_newest_first(self, backend: MemoryBackend) -> None:
        made = self._seed_search(backend)
        hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="", strategy="exact", limit=3))
        expected = [m.id for m in sorted(made.values(), key=lambda m: m.created_at, reverse=True)][:3]
        assert self.ids(hits) == expected, f"exact search must return the newest first, got {self.ids(hits)}"
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True), f"hits must be best first by score: {scores}"

    def test_search_keyword_finds_and_ranks(self, backend: MemoryBackend) -> None:
        self.require(backend, "keyword_ranking")
        made = self._seed_search(backend)
        hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="TypeScript frontend", strategy="hybrid"))
        assert hits, "keyword search for words a memory contains returned nothing"
        assert hits[0].memory.id == made["lang"].id, f"the matching memory must rank first, got {self.ids(hits)}"
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True), f"hits must be best first by score: {scores}"
        pet = backend.search(SearchQuery(api_key_id=TENANT_A, text="what is my cat called", strategy="semantic"))
        assert pet and pet[0].memory.id == made["pet"].id, f"query sharing one word ranked wrong: {self.ids(pet)}"

    def test_search_respects_limit(self, backend: MemoryBackend) -> None:
        self._seed_search(backend)
        for strategy in ("exact", "hybrid"):
            hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="in", strategy=strategy, limit=2))
            assert len(hits) <= 2, f"search(limit=2, {strategy}) returned {len(hits)} hits"

    @pytest.mark.parametrize("text", FTS_SYNTAX_QUERIES)
    def test_search_never_raises_on_query_syntax(self, backend: MemoryBackend, text: str) -> None:
        self._seed_search(backend)
        query = SearchQuery(api_key_id=TENANT_A, text=text, strategy="hybrid")
        hits = backend.search(query)  # must not raise
        assert all(query.admits(h.memory) for h in hits), f"search({text!r}) returned memories its filters reject"

    def test_search_finds_words_inside_syntax_characters(self, backend: MemoryBackend) -> None:
        self.require(backend, "keyword_ranking")
        made = self._seed_search(backend)
        for text in ('"TypeScript', "TypeScript*", "NEAR(TypeScript", "TypeScript AND OR", "(TypeScript"):
            hits = backend.search(SearchQuery(api_key_id=TENANT_A, text=text, strategy="hybrid"))
            assert made["lang"].id in self.ids(hits), f"search({text!r}) did not find the TypeScript memory"

    def test_search_excludes_expired(self, backend: MemoryBackend) -> None:
        self.require(backend, "expiry")
        now = utcnow()
        live = backend.create(self.new(key="live", content="ramen is great", expires_at=now + timedelta(days=1)))
        dead = backend.create(self.new(key="dead", content="ramen was great", expires_at=now - timedelta(minutes=1)))
        for strategy in ("exact", "hybrid"):
            hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="ramen", strategy=strategy, now=now))
            assert dead.id not in self.ids(hits), f"{strategy} search returned an expired memory"
            assert live.id in self.ids(hits), f"{strategy} search lost a memory that has not expired yet"
        assert backend.get(dead.id) is not None, "get() by id still returns an expired memory (no purge on read)"

    def test_search_applies_retention(self, backend: MemoryBackend) -> None:
        now = utcnow()
        old = backend.create(self.new(key="old", content="ramen long ago", now=now - timedelta(days=40)))
        recent = backend.create(self.new(key="recent", content="ramen lately", now=now - timedelta(days=2)))
        for strategy in ("exact", "hybrid"):
            q = SearchQuery(api_key_id=TENANT_A, text="ramen", strategy=strategy, retention_days=30, now=now)
            hits = backend.search(q)
            assert old.id not in self.ids(hits), f"{strategy} search ignored the retention window"
            assert recent.id in self.ids(hits), f"{strategy} search lost a memory inside the retention window"
            unbounded = backend.search(SearchQuery(api_key_id=TENANT_A, text="ramen", strategy=strategy, now=now))
            assert old.id in self.ids(unbounded), f"{strategy} search without retention lost an old memory"

    def test_search_session_scope(self, backend: MemoryBackend) -> None:
        self.require(backend, "sessions")
        s1 = backend.create(self.new(key="a", content="ramen in session one", session_id="s1"))
        s2 = backend.create(self.new(key="b", content="ramen in session two", session_id="s2"))
        none = backend.create(self.new(key="c", content="ramen without session"))
        for strategy in ("exact", "hybrid"):
            hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="ramen", strategy=strategy, session_id="s1"))
            assert self.ids(hits) == [s1.id], f"{strategy} search with session s1 returned {self.ids(hits)}"
            all_hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="ramen", strategy=strategy))
            assert set(self.ids(all_hits)) == {s1.id, s2.id, none.id}, f"{strategy} search without session scope"

    def test_search_filters_with_two_tenants(self, backend: MemoryBackend) -> None:
        """Expiry, retention and session filters combined with the owner: another tenant's live memory in
        the same session, with the same words, is never a result."""
        now = utcnow()
        theirs = [
            backend.create(self.new(api_key_id=TENANT_B, key=f"b{i}", content="ramen noodles tonight",
                                    session_id="s1", now=now - timedelta(minutes=i)))
            for i in range(3)
        ]
        mine = backend.create(self.new(api_key_id=TENANT_A, key="a", content="ramen noodles tonight",
                                       session_id="s1", expires_at=now + timedelta(days=1)))
        expired = backend.create(self.new(api_key_id=TENANT_A, key="gone", content="ramen noodles tonight",
                                          session_id="s1", expires_at=now - timedelta(minutes=1)))
        other_ids = {m.id for m in theirs}
        for strategy in ("exact", "semantic", "hybrid"):
            for session in ("s1", None):
                hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="ramen noodles", strategy=strategy,
                                                  session_id=session, retention_days=30, now=now, limit=2))
                got = self.ids(hits)
                assert not other_ids & set(got), f"{strategy} search (session={session}) returned B's memory"
                assert expired.id not in got, f"{strategy} search returned A's expired memory"
                assert got == [mine.id], f"{strategy} search (session={session}, limit=2) returned {got}"
        page = backend.list(ListFilter(api_key_id=TENANT_A, session_id="s1", query="ramen"))
        assert set(self.ids(page.data)) <= {mine.id, expired.id}, "list(A, session, query) returned B's memory"

    def test_keyword_search_of_one_tenant_among_many_matches(self, backend: MemoryBackend) -> None:
        """Tenant B holds far more, better matches than tenant A: A's keyword search still finds A's one
        memory, at the top and alone (a backend that ranks every tenant's matches first and cuts the list
        before filtering by owner loses it)."""
        for i in range(60):
            backend.create(self.new(api_key_id=TENANT_B, key=f"b{i}", content=f"ramen ramen ramen bowl {i}"))
        mine = backend.create(self.new(api_key_id=TENANT_A, key="a", content="I once had ramen in a long sentence "
                                       "about many other things entirely"))
        for limit in (1, 5):
            hits = backend.search(SearchQuery(api_key_id=TENANT_A, text="ramen", strategy="hybrid", limit=limit))
            assert self.ids(hits) == [mine.id], f"keyword search by A (limit {limit}) returned {self.ids(hits)}"

    # --- tenant isolation -------------------------------------------------------------------------------

    def test_tenant_isolation(self, backend: MemoryBackend) -> None:
        a = backend.create(self.new(api_key_id=TENANT_A, key="secret", content="alpha secret ramen",
                                    type="semantic", session_id="s1"))
        b = backend.create(self.new(api_key_id=TENANT_B, key="other", content="beta notes"))
        page = backend.list(ListFilter(api_key_id=TENANT_B, limit=100))
        assert self.ids(page.data) == [b.id], f"list for B returned {self.ids(page.data)}"
        assert page.by_type == {"factual": 1}, f"by_type for B counted A's memories: {page.by_type}"
        for query_text in ("alpha secret ramen", "secret", "ramen"):
            filtered = backend.list(ListFilter(api_key_id=TENANT_B, query=query_text))
            assert filtered.total == 0, f"list(B, query={query_text!r}) matched A's memory"
            for strategy in ("exact", "semantic", "hybrid"):
                hits = backend.search(SearchQuery(api_key_id=TENANT_B, text=query_text, strategy=strategy))
                assert a.id not in self.ids(hits), f"search by B ({strategy}, {query_text!r}) returned A's memory"
                assert all(h.memory.api_key_id == TENANT_B for h in hits), "search returned another tenant's data"
        # B writing the same key and session, and B's key changes, never touch A's memory
        b_same = backend.create(self.new(api_key_id=TENANT_B, key="secret", content="B's own", session_id="s1"))
        assert b_same.id != a.id
        backend.update(b.id, MemoryPatch(key="secret-2"))
        assert backend.delete(b_same.id) is True
        backend.put(self.stored(api_key_id=TENANT_B, key="secret", content="B replicated", at=self.base_time()))
        got = backend.get(a.id)
        assert got is not None, "a write by tenant B deleted tenant A's memory"
        self.assert_same(got, a, "tenant A's memory after tenant B's writes")
        assert backend.list(ListFilter(api_key_id=TENANT_A)).total == 1

    # --- bad input, health, lifecycle -------------------------------------------------------------------

    BAD_INPUTS: ClassVar[dict[str, Callable[[], Any]]] = {
        "empty-api-key": lambda: NewMemory(api_key_id="", key="k", content="c"),
        "empty-key": lambda: NewMemory(api_key_id="a", key="", content="c"),
        "blank-content": lambda: NewMemory(api_key_id="a", key="k", content="   "),
        "surrogate-content": lambda: NewMemory(api_key_id="a", key="k", content="x \ud800"),
        "nul-key": lambda: NewMemory(api_key_id="a", key="k\x00", content="c"),
        "bad-type": lambda: NewMemory(api_key_id="a", key="k", content="c", type="bogus"),
        "list-metadata": lambda: NewMemory(api_key_id="a", key="k", content="c", metadata=["x"]),  # type: ignore[arg-type]
        "bad-expiry": lambda: NewMemory(api_key_id="a", key="k", content="c", expires_at="tomorrow"),
        "search-empty-api-key": lambda: SearchQuery(api_key_id="", text="x"),
        "search-limit-0": lambda: SearchQuery(api_key_id="a", text="x", limit=0),
        "search-surrogate": lambda: SearchQuery(api_key_id="a", text="\udfff"),
        "bad-strategy": lambda: SearchQuery(api_key_id="a", text="x", strategy="fuzzy"),
        "list-limit-0": lambda: ListFilter(api_key_id="a", limit=0),
        "bad-order-by": lambda: ListFilter(api_key_id="a", order_by="content"),
        "patch-empty-content": lambda: MemoryPatch(content=""),
        "patch-bad-type": lambda: MemoryPatch(type="bogus"),
    }
    """Inputs the models refuse before any backend sees them (checked by :meth:`test_models_refuse_bad_input`)."""

    BAD_IDS: ClassVar[tuple[str, ...]] = (
        "", "   ", "not-a-uuid", "../../etc/passwd", "' OR '1'='1", "%2e%2e%2f..%5c", "*", "a" * 300,
        "x\x00y", "x\ud800y", "00000000-0000-0000-0000-000000000000",
    )
    """Ids a backend may be handed by a careless caller: each must be "no such memory" (``None`` / ``False``
    / ``{}``) or a :class:`~memroute.errors.ValidationError`, never another exception, a write, or a match."""

    def test_models_refuse_bad_input(self, backend: MemoryBackend) -> None:
        for name, build in self.BAD_INPUTS.items():
            with pytest.raises(ValidationError):
                build()
            assert backend.list(ListFilter(api_key_id="a")).total == 0, f"bad input {name} left a write"

    def test_bad_input_is_a_validation_error(self, backend: MemoryBackend) -> None:
        """The backend itself, called with bad ids: typed "not found" or ValidationError, no side effect."""
        kept = backend.create(self.new(key="keep", content="must survive bad ids"))
        for bad in self.BAD_IDS:
            calls: dict[str, tuple[Callable[..., Any], Any]] = {
                "get": (backend.get, bad),
                "get_many": (backend.get_many, [bad]),
                "update": (lambda i: backend.update(i, MemoryPatch(content="overwritten")), bad),
                "delete": (backend.delete, bad),
            }
            for op, (call, argument) in calls.items():
                try:
                    result = call(argument)
                except ValidationError:
                    continue
                except Exception as exc:  # the point is to report any other type
                    pytest.fail(f"{op}({bad!r:.40}) raised {type(exc).__name__}: {exc} (expected None/False/{{}} "
                                "or ValidationError)")
                assert result in (None, False, {}), f"{op}({bad!r:.40}) returned {result!r:.80}"
        self.assert_same(backend.get(kept.id), kept, "a memory after calls with bad ids")
        assert backend.list(ListFilter(api_key_id=TENANT_A)).total == 1

    def test_health_ok(self, backend: MemoryBackend) -> None:
        result = backend.health()
        assert result.ok, f"health() of a working backend reported a failure: {result.error}"
        assert result.latency_ms >= 0

    def test_initialize_and_close_are_idempotent(self, backend: MemoryBackend) -> None:
        backend.initialize()
        created = backend.create(self.new())
        assert backend.get(created.id) is not None, "initialize() twice lost data"
        backend.close()
        backend.close()

    def test_concurrent_creates(self, backend: MemoryBackend) -> None:
        errors: list[BaseException] = []

        def work(worker: int) -> None:
            try:
                for i in range(10):
                    backend.create(self.new(key=f"w{worker}-{i}", content=f"worker {worker} item {i}"))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, f"concurrent creates raised: {errors[0]!r}"
        total = backend.list(ListFilter(api_key_id=TENANT_A)).total
        assert total == 40, f"4 threads x 10 creates stored {total} memories"

    def test_persists_across_reopen(self, backend: MemoryBackend,
                                    reopen: Callable[[MemoryBackend], MemoryBackend] | None) -> None:
        self.require(backend, "persistent")
        if reopen is None:
            pytest.skip("the test class provides no `reopen` fixture")
        created = backend.create(self.new(key="durable", content="survives a restart", session_id="s",
                                          metadata={"k": "v"}))
        again = reopen(backend)
        try:
            self.assert_same(again.get(created.id), created, "get() after close and re-open")
            assert again.list(ListFilter(api_key_id=TENANT_A)).total == 1
            hits = again.search(SearchQuery(api_key_id=TENANT_A, text="survives restart", strategy="hybrid"))
            assert created.id in self.ids(hits), "search after re-open lost the memory"
        finally:
            again.close()
