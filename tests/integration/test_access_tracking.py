"""Access tracking through the public service: ``augment`` (the memories it injects) and ``search`` (the
memories it returns) count accesses off the request path, batched and coalesced, for the calling tenant only;
previews count nothing; ``flush()`` and ``close()`` write what is pending; a failing write never breaks a
request or counts against the primary's breaker. On SQLite and on the in-memory test backend (wrapped in the
fault injector for the failure and coalescing tests)."""

from __future__ import annotations

import io
import json
import time
from datetime import timedelta

import attrs
import pytest

import memroute
from memroute.config.serialization import memory_to_dict, write_jsonl
from memroute.errors import ValidationError
from memroute.models import Memory, MemoryType, new_memory_id, utcnow
from memroute.service import Memroute
from memroute.specs import BackendSpec
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.faults import FaultyBackend
from memroute.testing.memory import InMemoryBackend
from memroute.testing.numpy_store import NumpyVectorStore

A, B = "tenant-a", "tenant-b"


class _FaultyMemoryPlugin:
    """``type = "faulty-memory"``: the in-memory backend inside the fault injector (which passes
    ``record_access`` through and can fail it on command)."""

    def __init__(self) -> None:
        self.instances: dict[str, FaultyBackend] = {}

    @memroute.hookimpl
    def memroute_backends(self):
        def make(settings, context):
            backend = FaultyBackend(InMemoryBackend(context.instance_name))
            self.instances[context.instance_name] = backend
            return backend

        yield BackendSpec(name="faulty-memory", factory=make)


@pytest.fixture
def faulty_plugin(register_plugin):
    plugin = _FaultyMemoryPlugin()
    register_plugin(plugin, name="test-faulty-memory")
    return plugin


@pytest.fixture
def open_service(tmp_path, plugin_manager, faulty_plugin):
    opened: list[Memroute] = []

    def make(kind: str = "sqlite", *, path: str = "m.db", memory: dict | None = None,
             manager: dict | None = None) -> Memroute:
        primary = {"type": "sqlite", "path": str(tmp_path / path)} if kind == "sqlite" else {"type": "faulty-memory"}
        config = {"memory": {"enabled": True, **(memory or {})}, "backends": {"primary": "main", "main": primary},
                  # 0: nothing is written in the background, so each test decides when (flush / close)
                  "manager": {"health_interval_s": 0, "access_flush_interval_s": 0, **(manager or {})},
                  "data_dir": str(tmp_path / "data")}
        service = Memroute.open(config, plugins=plugin_manager, embedder=HashingEmbeddingSource(32),
                                vector_store=NumpyVectorStore())
        opened.append(service)
        return service

    yield make
    for service in opened:
        service.close()


def chat(text: str) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


def counts(mem: Memroute, tenant: str) -> dict[str, int]:
    return {m.content: m.access_count for m in mem.export(tenant)}


def seed(mem: Memroute) -> None:
    for tenant in (A, B):
        mem.add(api_key_id=tenant, content=f"Postgres is the database for {tenant}", key="db")
        mem.add(api_key_id=tenant, content=f"Tabs not spaces for {tenant}", key="style")
    mem.flush()


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_augment_counts_only_the_injected_memories_of_its_tenant(open_service, kind) -> None:
    mem = open_service(kind, memory={"typed_decay_enabled": True, "typed_decay_episodic_days": 5})
    seed(mem)
    old = utcnow() - timedelta(days=10)
    decayed = Memory(id=new_memory_id(), api_key_id=A, key="old-db", content="Postgres was the old database",
                     type=MemoryType.EPISODIC, created_at=old, updated_at=old)
    mem.import_memories([decayed])
    mem.flush()
    started = utcnow()
    report = mem.explain_augment(chat("Which database do I use?"), api_key_id=A)
    assert report.injected and report.preview is not None
    injected = {m.id for m in report.preview.memories}
    assert decayed.id not in injected, "the decayed memory must not be injected (so not counted either)"
    assert all(m.access_count == 0 for m in mem.export(A)), "access must be recorded off the request path"
    assert mem.flush()
    for memory in mem.export(A):
        if memory.id in injected:
            assert memory.access_count == 1 and memory.last_accessed_at is not None
            assert memory.last_accessed_at >= started.replace(microsecond=0)
        else:
            assert (memory.access_count, memory.last_accessed_at) == (0, None), memory.content
    assert set(counts(mem, B).values()) == {0}, "tenant A's augment counted tenant B's memories"
    assert all(m.last_accessed_at is None for m in mem.export(B))


def test_repeated_accesses_coalesce_into_one_write(open_service, faulty_plugin) -> None:
    mem = open_service("memory")
    seed(mem)
    backend = faulty_plugin.instances["main"]
    backend.reset_calls()
    for _ in range(3):
        mem.augment(chat("Which database do I use?"), api_key_id=A)
    mem.search("database", api_key_id=A, strategy="exact", limit=1)
    assert backend.calls["record_access"] == 0
    assert mem.flush()
    assert backend.calls["record_access"] == 1, "one tenant's pending accesses must be one backend call"
    db = next(m for m in mem.export(A) if m.key == "db")
    assert db.access_count == 4, "three augments and one search of the same memory must add 4"


def test_search_counts_and_previews_do_not(open_service) -> None:
    mem = open_service()
    seed(mem)
    mem.preview("database", api_key_id=A)
    mem.explain_augment(chat("Which database do I use?"), api_key_id=A, record_access=False)
    mem.search("database", api_key_id=A, record_access=False)
    mem.flush()
    assert set(counts(mem, A).values()) == {0}, "a preview must not count as an access"
    found = mem.search("database", api_key_id=A, strategy="exact", limit=1)
    mem.flush()
    assert counts(mem, A)[found.memories[0].content] == 1


def test_a_failing_access_write_never_breaks_augment_or_the_breaker(open_service, faulty_plugin) -> None:
    mem = open_service("memory")
    seed(mem)
    backend = faulty_plugin.instances["main"]
    backend.fail("record_access")
    for _ in range(5):  # more than breaker_failures (3)
        assert mem.explain_augment(chat("Which database do I use?"), api_key_id=A).injected
        assert mem.flush() is True, "a dropped telemetry batch is not unfinished work"
    breaker = mem._manager.breaker("main")
    assert breaker.state == "closed" and breaker.consecutive_failures == 0
    stats = mem._manager.access_stats()
    assert stats["failed_batches"] == 5 and stats["pending"] == 0 and stats["dropped"] >= 5
    assert mem.health().primary.ok
    backend.recover()
    mem.augment(chat("Which database do I use?"), api_key_id=A)
    mem.flush()
    assert max(counts(mem, A).values()) == 1, "recording works again once the backend recovers"


def test_an_open_breaker_skips_the_write_without_probing(open_service, faulty_plugin) -> None:
    mem = open_service("memory")
    seed(mem)
    mem.augment(chat("Which database do I use?"), api_key_id=A)
    breaker = mem._manager.breaker("main")
    for _ in range(3):
        breaker.record_failure("down")
    backend = faulty_plugin.instances["main"]
    backend.reset_calls()
    mem._manager._access.drain()
    assert backend.calls["record_access"] == 0, "telemetry must not take an open breaker's probe"
    assert breaker.state == "open"


def test_close_writes_what_is_pending(open_service) -> None:
    mem = open_service()
    seed(mem)
    mem.augment(chat("Which database do I use?"), api_key_id=A)
    mem.close()
    again = open_service()
    assert max(counts(again, A).values()) == 1, "close() must write the pending accesses"


def test_the_background_thread_writes_without_a_flush(open_service) -> None:
    mem = open_service(manager={"access_flush_interval_s": 0.05})
    seed(mem)
    mem.search("database", api_key_id=A, strategy="exact", limit=1)
    deadline = time.monotonic() + 5
    while max(counts(mem, A).values()) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert max(counts(mem, A).values()) == 1


def test_record_access_checks_its_input_and_ignores_other_tenants(open_service) -> None:
    mem = open_service()
    seed(mem)
    theirs = next(m for m in mem.export(B) if m.key == "db")
    for bad in (["not-a-uuid"], [""], "0b6f4c1e-6a8e-4c36-9d1e-2f6f1f0d8a11", [None]):
        with pytest.raises(ValidationError):
            mem.record_access(bad, api_key_id=A)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        mem.record_access([theirs.id], api_key_id="")
    mem.record_access([theirs.id, new_memory_id()], api_key_id=A)
    mem.flush()
    assert set(counts(mem, B).values()) == {0}, "an id of tenant B recorded under tenant A touched B's row"


def test_list_orders_by_last_accessed_at(open_service) -> None:
    mem = open_service()
    made = [mem.add(api_key_id=A, content=f"memory number {i}", key=f"k{i}") for i in range(3)]
    mem.record_access([made[0].id], api_key_id=A)
    mem.flush()
    time.sleep(0.002)
    mem.record_access([made[2].id], api_key_id=A)
    mem.flush()
    newest_first = mem.list(api_key_id=A, order_by="last_accessed_at")
    assert [m.id for m in newest_first.data] == [made[2].id, made[0].id, made[1].id]
    oldest_first = mem.list(api_key_id=A, order_by="last_accessed_at", order_dir="asc")
    assert [m.id for m in oldest_first.data] == [made[1].id, made[0].id, made[2].id]
    with pytest.raises(ValidationError):
        mem.list(api_key_id=A, order_by="access_count")


def test_export_and_import_carry_the_access_fields(open_service) -> None:
    mem = open_service()
    seed(mem)
    mem.augment(chat("Which database do I use?"), api_key_id=A)
    mem.flush()
    out = io.StringIO()
    write_jsonl(out, mem.export(A))
    lines = out.getvalue().splitlines()
    assert all({"access_count", "last_accessed_at"} <= json.loads(line).keys() for line in lines)
    fresh = open_service(path="fresh.db")
    fresh.import_jsonl(lines, api_key_id=A)
    assert counts(fresh, A) == counts(mem, A)
    assert {m.id: m.last_accessed_at for m in fresh.export(A)} == {m.id: m.last_accessed_at for m in mem.export(A)}
    # a file written before the fields existed imports with the defaults
    legacy = []
    for line in lines:
        data = json.loads(line)
        del data["access_count"], data["last_accessed_at"]
        legacy.append(json.dumps({**data, "id": new_memory_id(), "key": data["key"] + "-legacy"}))
    report = fresh.import_jsonl(legacy, api_key_id=A)
    assert report.imported == len(legacy)
    assert all(m.access_count == 0 for m in fresh.export(A) if m.key.endswith("-legacy"))
    bad = {**json.loads(lines[0]), "access_count": -1}
    with pytest.raises(ValidationError, match="access_count"):
        fresh.import_jsonl([json.dumps(bad)], api_key_id=A)


def test_typed_decay_reads_last_accessed_at(open_service) -> None:
    mem = open_service(memory={"typed_decay_enabled": True, "typed_decay_episodic_days": 5})
    old = utcnow() - timedelta(days=10)
    stale = Memory(id=new_memory_id(), api_key_id=A, key="stale", content="Postgres decision stale",
                   type=MemoryType.EPISODIC, created_at=old, updated_at=old)
    used = attrs.evolve(stale, id=new_memory_id(), key="used", content="Postgres decision used",
                        last_accessed_at=utcnow() - timedelta(days=1))
    mem.import_memories([stale, used])
    report = mem.prune(A, dry_run=True)
    assert set(report.candidates) == {stale.id}, "a memory injected yesterday has not decayed"
    assert memory_to_dict(used)["last_accessed_at"].endswith("Z")
