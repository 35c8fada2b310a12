"""The MemoryManager over two real SQLite backends (plugins/memroute_builtins/backends/sqlite/backend.py), each
wrapped in the fault injector: outages, recovery, restart of the process, ordering and isolation."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendUnavailableError
from memroute.models import ListFilter, Memory, MemoryPatch, NewMemory, SearchQuery
from memroute.routing.manager import MemoryManager
from memroute.service import Memroute
from memroute.testing.faults import FaultyBackend, ManualClock
from memroute_builtins.backends.sqlite.backend import SqliteBackend
from tests.servers.faulty_sqlite import FaultySqlitePlugin

SETTINGS = ManagerSettings(health_interval_s=0, breaker_failures=3, breaker_reset_s=10, retry_base_s=1,
                           retry_max_s=8, operation_timeout_s=5)


class Cluster:
    """A primary and a fallback SQLite file behind fault injectors, with a file outbox."""

    def __init__(self, root: Path, *, settings: ManagerSettings = SETTINGS, background: bool = False) -> None:
        self.root = root
        self.clock = ManualClock()
        self.settings = settings
        self.background = background
        self.open()

    def open(self) -> None:
        self.main = FaultyBackend(SqliteBackend("main", self.root / "main.db"))
        self.vault = FaultyBackend(SqliteBackend("vault", self.root / "vault.db"))
        self.manager = MemoryManager(self.main, [self.vault], settings=self.settings,
                                     outbox_path=self.root / "outbox.db", clock=self.clock,
                                     replay_in_background=self.background)
        self.manager.initialize()

    def add(self, key: str, content: str = "content", api_key: str = "k1") -> Memory:
        return self.manager.create(NewMemory(api_key_id=api_key, key=key, content=content))

    def contents(self, backend: FaultyBackend) -> dict[str, Memory]:
        return {m.id: m for m in backend.inner.iter_all()}

    def assert_holds_exactly(self, backend: FaultyBackend, expected: list[Memory]) -> None:
        stored = self.contents(backend)
        assert stored.keys() == {m.id for m in expected}
        for memory in expected:
            assert stored[memory.id].same_as(memory), (backend.name, memory.key)


@pytest.fixture
def cluster(tmp_path: Path):
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.manager.close()


def test_primary_outage_acknowledged_writes_reach_the_primary_after_recovery(cluster):
    kept = cluster.add("kept", "written before the outage")
    changed = cluster.add("changed", "original text")
    removed = cluster.add("removed", "soon gone")
    assert cluster.manager.flush(5)
    cluster.main.fail()
    during = cluster.add("during", "written while the primary was down")
    changed = cluster.manager.update(changed.id, MemoryPatch(content="changed while down", metadata={"v": 2}))
    assert cluster.manager.delete(removed.id)
    # reads and searches are served by the fallback, and say so
    assert cluster.manager.get(during.id).same_as(during)
    search = cluster.manager.search(SearchQuery(api_key_id="k1", text="primary down"))
    assert search.backend == "vault" and search.fallback and "main" in search.error
    assert during.id in {h.memory.id for h in search.hits}
    assert cluster.manager.list(ListFilter(api_key_id="k1")).total == 3
    # recovery
    cluster.main.recover()
    assert cluster.manager.flush(5)
    expected = [kept, changed, during]
    cluster.assert_holds_exactly(cluster.main, expected)
    cluster.assert_holds_exactly(cluster.vault, expected)
    assert not cluster.manager.search(SearchQuery(api_key_id="k1", text="primary down")).fallback


def test_update_after_create_during_outage_replays_in_order(cluster):
    cluster.main.fail()
    memory = cluster.add("k", "v1")
    for n in range(2, 6):
        memory = cluster.manager.update(memory.id, MemoryPatch(content=f"v{n}"))
    assert [e.payload["content"] for e in cluster.manager.outbox.entries("main")] == ["v1", "v2", "v3", "v4", "v5"]
    cluster.main.recover()
    assert cluster.manager.flush(5)
    assert cluster.main.inner.get(memory.id).content == "v5"
    cluster.assert_holds_exactly(cluster.main, [memory])


def test_fallback_down_entries_wait_then_arrive(cluster):
    cluster.vault.fail()
    memories = [cluster.add(f"k{i}", f"content {i}") for i in range(5)]
    assert not cluster.manager.flush(0)
    assert cluster.manager.health()["outbox"]["by_target"] == {"vault": 5}
    assert cluster.contents(cluster.vault) == {}
    cluster.vault.recover()
    assert cluster.manager.flush(5)
    cluster.assert_holds_exactly(cluster.vault, memories)


def test_outbox_survives_a_process_restart(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.main.fail()
    memory = cluster.add("k", "acknowledged during the outage")
    updated = cluster.manager.update(memory.id, MemoryPatch(content="and updated"))
    cluster.manager.close()  # the "process" ends with the primary still down
    cluster.open()           # a new one opens the same files
    try:
        assert cluster.manager.outbox.pending("main") == 2
        assert cluster.contents(cluster.main) == {}
        assert cluster.manager.flush(5)
        cluster.assert_holds_exactly(cluster.main, [updated])
        cluster.assert_holds_exactly(cluster.vault, [updated])
    finally:
        cluster.manager.close()


def test_hang_is_a_timeout_and_the_fallback_serves(tmp_path):
    settings = ManagerSettings(health_interval_s=0, operation_timeout_s=0.05, breaker_failures=2)
    cluster = Cluster(tmp_path, settings=settings)
    try:
        cluster.add("k", "hanging primary")
        cluster.manager.flush(5)
        cluster.main.hang("search", "create")
        search = cluster.manager.search(SearchQuery(api_key_id="k1", text="hanging"))
        assert search.backend == "vault" and "timed out" in search.error and len(search.hits) == 1
        created = cluster.add("j", "created while the primary hangs")
        assert cluster.vault.calls["create"] == 1 and cluster.manager.breaker("main").state == "open"
        # the abandoned create may still finish: the primary counts as behind until it does
        search = cluster.manager.search(SearchQuery(api_key_id="k1", text="hangs"))
        assert search.fallback and "catching up" in search.error and "circuit breaker open" in search.error
        cluster.main.recover()
        assert cluster.manager.flush(5)
        assert cluster.contents(cluster.main)[created.id].same_as(created)
        assert len(cluster.contents(cluster.main)) == 2
    finally:
        cluster.manager.close()


def test_breaker_cycle_driven_by_the_clock(cluster):
    cluster.main.fail()
    cluster.add("k")
    for _ in range(3):
        cluster.manager.check_health()
    assert cluster.manager.breaker("main").state == "open"
    before = cluster.main.calls["get"]
    cluster.manager.get("00000000-0000-4000-8000-000000000001")
    assert cluster.main.calls["get"] == before  # skipped
    cluster.main.recover()
    cluster.clock.advance(10)
    assert cluster.manager.breaker("main").state == "half-open"
    cluster.manager.flush(0)
    assert cluster.manager.breaker("main").state == "closed"
    assert cluster.manager.outbox.depth() == 0


def test_tenant_isolation_through_failover(cluster):
    a = cluster.add("same", "alpha private note", api_key="A")
    b = cluster.add("same", "beta private note", api_key="B")
    cluster.manager.flush(5)
    cluster.main.fail()
    cluster.manager.update(a.id, MemoryPatch(content="alpha changed note"))
    for api_key, own in (("A", a.id), ("B", b.id)):
        hits = cluster.manager.search(SearchQuery(api_key_id=api_key, text="note")).hits
        assert [h.memory.id for h in hits] == [own]
        assert [m.id for m in cluster.manager.list(ListFilter(api_key_id=api_key)).data] == [own]
    cluster.main.recover()
    cluster.manager.flush(5)
    assert cluster.main.inner.get(b.id).content == "beta private note"
    assert cluster.main.inner.get(a.id).content == "alpha changed note"


def test_both_down_nothing_acknowledged_nothing_journaled(cluster):
    cluster.main.fail()
    cluster.vault.fail()
    with pytest.raises(BackendUnavailableError):
        cluster.add("k")
    assert cluster.manager.outbox.depth() == 0


def test_concurrent_writers_while_the_primary_flaps(tmp_path):
    settings = ManagerSettings(health_interval_s=0, breaker_failures=2, breaker_reset_s=1, retry_base_s=0.5,
                               retry_max_s=2, operation_timeout_s=5)
    cluster = Cluster(tmp_path, settings=settings, background=True)
    acknowledged: dict[str, Memory] = {}
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(25):
                key = f"w{n}-{i % 8}"
                try:
                    memory = cluster.add(key, f"writer {n} round {i}")
                    if i % 4 == 0:
                        memory = cluster.manager.update(memory.id, MemoryPatch(content=f"updated {n}/{i}"))
                except BackendUnavailableError:
                    continue
                with lock:
                    acknowledged[key] = memory
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    def flapper() -> None:
        pause = threading.Event()
        while not stop.is_set():
            cluster.main.fail()
            pause.wait(0.003)
            cluster.main.recover()
            cluster.clock.advance(1)
            pause.wait(0.02)

    flapping = threading.Thread(target=flapper)
    flapping.start()
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    flapping.join()
    cluster.main.recover()
    try:
        assert not failures
        assert cluster.manager.flush(15)
        expected = list(acknowledged.values())
        cluster.assert_holds_exactly(cluster.main, expected)
        cluster.assert_holds_exactly(cluster.vault, expected)
    finally:
        cluster.manager.close()


# --- through the public API, with the fault injector as a registered backend plugin ----------------------

def test_service_round_trip_with_primary_outage(tmp_path, plugin_manager, register_plugin):
    plugin = FaultySqlitePlugin()
    register_plugin(plugin, name="faulty-sqlite-plugin")
    config = {
        "backends": {
            "primary": "main", "fallbacks": ["vault"],
            "main": {"type": "faulty-sqlite", "path": str(tmp_path / "main.db")},
            "vault": {"type": "faulty-sqlite", "path": str(tmp_path / "vault.db")},
        },
        "manager": {"outbox_path": str(tmp_path / "outbox.db"), "health_interval_s": 0},
        "embedding": {"source": "none"},
        "vectors": {"store": "none"},
    }
    with Memroute.open(config, plugins=plugin_manager) as mem:
        main = plugin.instances["main"]
        before = mem.add(api_key_id="k1", content="I prefer dark roast coffee", key="pref:coffee")
        main.fail()
        during = mem.add(api_key_id="k1", content="I switched to green tea", key="pref:tea")
        assert mem.update(before.id, api_key_id="k1", content="I prefer light roast coffee")
        result = mem.search("coffee tea", api_key_id="k1", strategy="exact")
        assert result.provenance.fallback and result.provenance.backend == "vault"
        assert {h.memory.id for h in result.hits} == {before.id, during.id}
        assert mem.health().outbox.by_target.get("main") == 2
        main.recover()
        assert mem.flush(10)
        stored = {m.id: m for m in main.inner.iter_all()}
        assert stored[during.id].content == "I switched to green tea"
        assert stored[before.id].content == "I prefer light roast coffee"
        assert not mem.search("coffee", api_key_id="k1", strategy="exact").provenance.fallback
