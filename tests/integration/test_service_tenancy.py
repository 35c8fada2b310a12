"""The tenant rules of the public service, on SQLite and on the in-memory backend: every operation names its
tenant, another tenant's id behaves exactly like a missing one, bad ids and tenants are ValidationErrors,
``clear`` deletes the real count (no page cap) through the manager, and ``stats`` counts one tenant."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import memroute
from memroute.config.serialization import memory_to_dict, to_jsonable
from memroute.errors import NotFoundError, ValidationError
from memroute.models import Memory, MemoryType, new_memory_id, utcnow
from memroute.reports import RetrievalPreview
from memroute.service import Memroute
from memroute.specs import BackendSpec
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.memory import InMemoryBackend
from memroute.testing.numpy_store import NumpyVectorStore

MISSING = "00000000-0000-4000-8000-00000000beef"


class _InMemoryPlugin:
    def __init__(self) -> None:
        self.instances: dict[str, InMemoryBackend] = {}

    @memroute.hookimpl
    def memroute_backends(self):
        def make(settings, context):
            backend = InMemoryBackend(context.instance_name)
            self.instances[context.instance_name] = backend
            return backend

        yield BackendSpec(name="memory", factory=make)


@pytest.fixture(params=["sqlite", "memory"])
def backend_kind(request):
    return request.param


@pytest.fixture
def open_service(tmp_path, plugin_manager, register_plugin, backend_kind):
    """Open services on the parametrized primary (optionally with an in-memory fallback), with a hashing
    embedder and an exact vector store so vector removal is observable."""
    plugin = _InMemoryPlugin()
    register_plugin(plugin, name="test-memory-backend")
    opened: list[Memroute] = []

    def make(*, fallback: bool = False) -> tuple[Memroute, NumpyVectorStore, _InMemoryPlugin]:
        primary = ({"type": "sqlite", "path": str(tmp_path / f"m{len(opened)}.db")} if backend_kind == "sqlite"
                   else {"type": "memory"})
        backends = {"primary": "main", "main": primary}
        if fallback:
            backends |= {"fallbacks": ["copy"], "copy": {"type": "memory"}}
        store = NumpyVectorStore()
        config = {"backends": backends, "manager": {"health_interval_s": 0}, "data_dir": str(tmp_path / "data")}
        service = Memroute.open(config, plugins=plugin_manager, embedder=HashingEmbeddingSource(32),
                                vector_store=store)
        opened.append(service)
        return service, store, plugin

    yield make
    for service in opened:
        service.close()


@pytest.fixture
def mem(open_service):
    return open_service()[0]


def old(api_key_id: str, content: str, days: int, **fields) -> Memory:
    moment = utcnow() - timedelta(days=days)
    return Memory(id=new_memory_id(), api_key_id=api_key_id, key=f"k:{content}", content=content,
                  created_at=moment, updated_at=moment, **fields)


# --- by id: another tenant's id is a missing one ---------------------------------------------------------

def test_another_tenants_id_behaves_exactly_like_a_missing_one(mem):
    mine = mem.add(api_key_id="alice", content="Alice prefers tea", key="pref:drink")
    for memory_id in (mine.id, MISSING):
        assert mem.get(memory_id, api_key_id="bob") is None
        assert mem.update(memory_id, api_key_id="bob", content="Bob was here") is None
        assert mem.delete(memory_id, api_key_id="bob") is False
    kept = mem.get(mine.id, api_key_id="alice")
    assert kept is not None and kept.same_as(mine)  # nothing bob did reached it


def test_update_returns_the_updated_memory_and_delete_removes_it_everywhere(open_service):
    mem, store, _plugin = open_service()
    mine = mem.add(api_key_id="alice", content="Alice prefers tea", key="pref:drink")
    mem.flush()
    assert mine.id in store.ids("alice")
    updated = mem.update(mine.id, api_key_id="alice", content="Alice prefers coffee", metadata={"v": 2})
    assert updated is not None and updated.id == mine.id and updated.content == "Alice prefers coffee"
    assert mem.get(mine.id.upper(), api_key_id="alice").content == "Alice prefers coffee"  # any UUID spelling
    assert mem.delete(mine.id, api_key_id="alice") is True
    assert mem.flush()
    assert mem.get(mine.id, api_key_id="alice") is None and mine.id not in store.ids("alice")
    assert mem.delete(mine.id, api_key_id="alice") is False


BAD_IDS = [42, None, "", "   ", "x" * 300, "not-a-uuid", "1234", "a\x00b"]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
@pytest.mark.parametrize("operation", ["get", "update", "delete"])
def test_a_bad_id_is_a_validation_error_naming_id(mem, operation, bad):
    call = {"get": lambda: mem.get(bad, api_key_id="alice"),
            "update": lambda: mem.update(bad, api_key_id="alice", content="x"),
            "delete": lambda: mem.delete(bad, api_key_id="alice")}[operation]
    with pytest.raises(ValidationError) as caught:
        call()
    assert [field for field, _ in caught.value.problems] == ["id"]


BAD_TENANTS = [None, "", "   ", 42, "x" * 300, "a\x00b"]


@pytest.mark.parametrize("bad", BAD_TENANTS, ids=repr)
def test_every_operation_refuses_a_missing_or_bad_tenant(mem, bad):
    calls = [
        lambda: mem.get(MISSING, api_key_id=bad),
        lambda: mem.update(MISSING, api_key_id=bad, content="x"),
        lambda: mem.delete(MISSING, api_key_id=bad),
        lambda: mem.list(api_key_id=bad),
        lambda: mem.search("tea", api_key_id=bad),
        lambda: list(mem.export(bad)),
        lambda: mem.stats(bad),
        lambda: mem.clear(bad),
        lambda: mem.prune(bad),
        lambda: mem.summarize(bad, 30),
        lambda: mem.add(api_key_id=bad, content="x"),
    ]
    for call in calls:
        with pytest.raises(ValidationError):
            call()


def test_every_tenant_only_through_the_explicit_calls(mem):
    mem.add(api_key_id="alice", content="one")
    mem.add(api_key_id="bob", content="two")
    assert {m.api_key_id for m in mem.export("alice")} == {"alice"}
    assert {m.api_key_id for m in mem.export_all()} == {"alice", "bob"}
    assert mem.prune("alice", dry_run=True).api_key_id == "alice"
    assert mem.prune_all(dry_run=True).api_key_id is None


# --- clear ----------------------------------------------------------------------------------------------

def test_clear_deletes_the_real_count_past_fifty_and_the_vectors(open_service):
    mem, store, _plugin = open_service()
    for i in range(60):
        mem.add(api_key_id="alice", content=f"alice fact number {i}")
    bystander = mem.add(api_key_id="bob", content="bob fact")
    mem.flush()
    dry = mem.clear("alice", dry_run=True)
    assert dry.dry_run and dry.matched == 60 and dry.deleted == 0 and len(dry.ids) == 60
    assert mem.list(api_key_id="alice").total == 60
    report = mem.clear("alice")
    assert report.matched == 60 and report.deleted == 60 and not report.dry_run
    assert mem.flush()
    assert mem.list(api_key_id="alice").total == 0 and store.ids("alice") == set()
    assert mem.get(bystander.id, api_key_id="bob") is not None and bystander.id in store.ids("bob")
    assert mem.clear("alice").deleted == 0


def test_clear_filters_by_type_session_and_age(mem):
    episodic = mem.add(api_key_id="alice", content="went to Lisbon", type="episodic")
    in_session = mem.add(api_key_id="alice", content="session note", session_id="s1")
    ancient, recent = old("alice", "ancient note", 40), old("alice", "recent note", 2)
    mem.import_memories([ancient, recent, old("bob", "bob ancient", 40)])

    assert mem.clear("alice", type=MemoryType.EPISODIC, dry_run=True).ids == (episodic.id,)
    assert mem.clear("alice", session_id="s1", dry_run=True).ids == (in_session.id,)
    by_age = mem.clear("alice", older_than_days=30, dry_run=True)
    assert by_age.ids == (ancient.id,) and by_age.older_than_days == 30
    assert mem.clear("alice", type="episodic").deleted == 1
    assert mem.clear("alice", older_than_days=30).deleted == 1
    remaining = {m.id for m in mem.export("alice")}
    assert remaining == {in_session.id, recent.id}
    assert mem.list(api_key_id="bob").total == 1  # another tenant is never touched


@pytest.mark.parametrize("kwargs", [{"type": "opinion"}, {"older_than_days": -1}, {"older_than_days": "30"},
                                    {"session_id": 5}])
def test_clear_bad_filters_are_validation_errors(mem, kwargs):
    with pytest.raises(ValidationError):
        mem.clear("alice", **kwargs)


def test_clear_replicates_to_the_fallback(open_service):
    mem, _store, plugin = open_service(fallback=True)
    for i in range(5):
        mem.add(api_key_id="alice", content=f"replicated {i}")
    mem.add(api_key_id="bob", content="bob keeps this")
    assert mem.flush()
    copy = plugin.instances["copy"]
    assert sum(1 for m in copy.snapshot().values() if m.api_key_id == "alice") == 5
    assert mem.clear("alice").deleted == 5
    assert mem.flush()
    assert {m.api_key_id for m in copy.snapshot().values()} == {"bob"}


# --- stats ----------------------------------------------------------------------------------------------

def test_stats_counts_one_tenant(mem):
    mem.add(api_key_id="alice", content="abcd")                      # 1 token
    mem.add(api_key_id="alice", content="abcde", type="episodic")    # 2 tokens
    mem.add(api_key_id="bob", content="x" * 400)
    stats = mem.stats("alice")
    assert stats.api_key_id == "alice" and stats.total == 2 and stats.tokens_used == 3
    assert stats.by_type == {"factual": 1, "episodic": 1, "procedural": 0, "semantic": 0}
    empty = mem.stats("carol")
    assert empty.total == 0 and empty.tokens_used == 0 and set(empty.by_type.values()) == {0}


def test_stats_reports_the_embedding_caches_counters(tmp_path):
    """The configured (cached) embedding source: the counters move with searches (process-wide, not per
    tenant: the cache is shared)."""
    with memroute.open({"data_dir": str(tmp_path), "embedding": {"source": "static"}}) as mem:
        mem.add(api_key_id="alice", content="Alice prefers green tea")
        mem.flush()
        before = mem.stats("alice").cache
        mem.search("green tea", api_key_id="alice", strategy="semantic")
        mem.search("green tea", api_key_id="alice", strategy="semantic")
        after = mem.stats("alice").cache
        assert after.misses >= before.misses + 1 and after.hits >= before.hits + 1
        assert 0.0 < after.hit_rate < 1.0


# --- import ---------------------------------------------------------------------------------------------

def _line(memory: Memory, **changes) -> str:
    return json.dumps({**memory_to_dict(memory), **changes})


def test_import_for_one_tenant_refuses_another_tenants_lines_and_ids(mem):
    theirs = mem.add(api_key_id="bob", content="bob's memory", key="k:bob")
    mine = old("alice", "alice imported", 1)
    with pytest.raises(ValidationError, match="line 2: api_key_id: belongs to another tenant than the one importing"):
        mem.import_jsonl([_line(mine), _line(old("bob", "smuggled", 1))], api_key_id="alice")
    with pytest.raises(NotFoundError, match=r"line 1: Memory not found"):  # no hint that the id exists
        mem.import_jsonl([_line(theirs, api_key_id="alice", key="k:stolen")], api_key_id="alice")
    with pytest.raises(ValidationError, match="another tenant"):  # operators too
        mem.import_jsonl([_line(theirs, api_key_id="alice")])
    assert mem.list(api_key_id="alice").total == 0  # all or nothing
    assert mem.get(theirs.id, api_key_id="bob").same_as(theirs)
    unowned = {k: v for k, v in json.loads(_line(mine)).items() if k != "api_key_id"}
    report = mem.import_jsonl(["", json.dumps(unowned)], api_key_id="alice")
    assert report.imported == 1 and report.lines == 1 and report.api_key_id == "alice"
    assert mem.get(mine.id, api_key_id="alice") is not None


# --- preview --------------------------------------------------------------------------------------------

def test_preview_is_typed_scoped_and_fits_the_budget(open_service):
    mem, _store, _plugin = open_service()
    for i in range(8):
        mem.add(api_key_id="alice", content=f"Trip to Lisbon number {i} " + "x" * 20)  # 11 tokens each
    mem.add(api_key_id="bob", content="Bob's trip to Lisbon")
    mem.flush()
    preview = mem.preview("Lisbon trip", api_key_id="alice", strategy="hybrid", max_tokens=40, limit=10)
    assert isinstance(preview, RetrievalPreview) and preview.api_key_id == "alice"
    assert len(preview.memories) == 3 and preview.total_tokens == 33 <= preview.budget_max_tokens == 40
    assert all("Bob" not in m.content for m in preview.memories)
    first = preview.memories[0]
    assert first.tier == "hybrid" and set(first.ranks) == {"keyword", "vector"}
    assert first.vec_score == first.leg_scores["vector"] and first.fts_score == first.leg_scores["keyword"]
    r = preview.resolution
    assert (r.embedding_source, r.vector_store, r.strategy_requested, r.strategy_used) == \
        ("hashing", "numpy", "hybrid", "hybrid")
    assert r.legs == ("keyword", "vector") and r.rerank_applied is False and not r.fallback
    data = to_jsonable(preview)
    assert json.loads(json.dumps(data)) == data
    assert data["memories"][0]["vec_score"] == first.vec_score and data["resolution"]["rerank_applied"] is False


def test_preview_defaults_and_bad_input(mem):
    mem.add(api_key_id="alice", content="Alice prefers tea")
    preview = mem.preview("tea", api_key_id="alice")
    assert preview.limit == 20 and preview.budget_max_tokens == 2000  # the [memory] max_tokens default
    for kwargs in ({"limit": 0}, {"limit": 101}, {"max_tokens": -1}, {"max_tokens": 16001}, {"strategy": "magic"}):
        with pytest.raises(ValidationError):
            mem.preview("tea", api_key_id="alice", **kwargs)
    with pytest.raises(ValidationError):
        mem.preview("tea", api_key_id="")


def test_every_report_is_json_through_the_one_converter(mem):
    mine = mem.add(api_key_id="alice", content="Alice prefers tea")
    reports = [mem.status(), mem.health(), mem.reindex(), mem.stats("alice"), mem.clear("alice", dry_run=True),
               mem.prune("alice", dry_run=True), mem.preview("tea", api_key_id="alice"),
               mem.import_jsonl([json.dumps(memory_to_dict(mine))], api_key_id="alice"),
               mem.explain_augment({"messages": [{"role": "user", "content": "tea?"}]}, api_key_id="alice")]
    for report in reports:
        data = to_jsonable(report)
        assert isinstance(data, dict) and json.loads(json.dumps(data)) == data, type(report).__name__
    status = to_jsonable(mem.status())
    assert {"data_dir", "state_dir", "memory", "backends", "keyword", "embedding", "vector_store", "fusion",
            "health"} <= set(status)
    assert status["health"]["backends"][0]["role"] == "primary"


# --- get_by_key -----------------------------------------------------------------------------------------

def test_get_by_key_is_exact_and_tenant_scoped(mem):
    mine = mem.add(api_key_id="alice", content="likes Python", key="preference:python")
    mem.add(api_key_id="alice", content="mentions preference:python in passing", key="note:other")
    mem.add(api_key_id="bob", content="bob likes Go", key="preference:go")
    assert mem.get_by_key("preference:python", api_key_id="alice").id == mine.id
    assert mem.get_by_key("preference:py", api_key_id="alice") is None
    assert mem.get_by_key("preference:go", api_key_id="alice") is None  # bob's key is not alice's
    for bad in ("", None, 42, "k" * 600):
        with pytest.raises(ValidationError):
            mem.get_by_key(bad, api_key_id="alice")
    with pytest.raises(ValidationError):
        mem.get_by_key("preference:python", api_key_id="")
