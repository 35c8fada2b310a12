"""MemoryManager routing, replication, failover, breaker and health, over in-memory backends wrapped in the
fault injector. Time is driven by a ManualClock and ``flush``: nothing here sleeps for timing."""

from __future__ import annotations

import threading
import time

import pytest

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendUnavailableError, ConfigError, ConflictError, ValidationError
from memroute.models import ListFilter, MemoryPatch, NewMemory, SearchQuery
from memroute.routing.manager import ManagedSearch, MemoryManager
from memroute.testing.faults import FaultyBackend, ManualClock
from memroute.testing.memory import InMemoryBackend

SETTINGS = ManagerSettings(
    health_interval_s=0, breaker_failures=3, breaker_reset_s=10, retry_base_s=1, retry_max_s=8,
    operation_timeout_s=5,
)


class Rig:
    """Two in-memory backends behind fault injectors, a manual clock and a manager."""

    def __init__(self, tmp_path, settings=SETTINGS, outbox=":memory:", fallbacks=1, background=False):
        self.clock = ManualClock()
        self.stores = [InMemoryBackend("main")] + [InMemoryBackend(f"vault{i}") for i in range(fallbacks)]
        self.main, *self.vaults = [FaultyBackend(s) for s in self.stores]
        self.vault = self.vaults[0] if self.vaults else None
        self.manager = MemoryManager(self.main, self.vaults, settings=settings, outbox_path=outbox, clock=self.clock,
                                     replay_in_background=background)
        self.manager.initialize()

    def add(self, key, content="some content", api_key="k1", **kw):
        return self.manager.create(NewMemory(api_key_id=api_key, key=key, content=content, **kw))

    def assert_converged(self, *expected):
        """Every backend holds exactly the same memories (field for field, metadata included)."""
        snapshots = [s.snapshot() for s in self.stores]
        for snapshot in snapshots[1:]:
            assert snapshot.keys() == snapshots[0].keys()
            for memory_id, memory in snapshot.items():
                assert memory.same_as(snapshots[0][memory_id]), memory_id
        if expected:
            assert {m.id for m in expected} == snapshots[0].keys()
            for memory in expected:
                assert snapshots[0][memory.id].same_as(memory)


@pytest.fixture
def rig(tmp_path):
    rig = Rig(tmp_path)
    yield rig
    rig.manager.close()


# --- normal operation --------------------------------------------------------------------------------

def test_create_is_served_by_primary_and_replicated(rig):
    memory = rig.add("pref:lang", "prefers Python")
    assert rig.main.calls["create"] == 1 and rig.vault.calls["create"] == 0
    assert rig.manager.flush(5)
    assert rig.stores[1].get(memory.id).same_as(memory)
    rig.assert_converged(memory)


def test_manager_generates_ids_identical_everywhere(rig):
    new = NewMemory(api_key_id="k1", key="a", content="x")
    memory = rig.manager.create(new)
    assert memory.id == new.id
    rig.manager.flush(5)
    assert rig.stores[1].get(new.id) is not None


def test_upsert_keeps_id_and_replicates_merged_result(rig):
    first = rig.add("k", "v1", metadata={"a": 1})
    second = rig.add("k", "v2", metadata={"b": 2})
    assert second.id == first.id and second.metadata == {"a": 1, "b": 2}
    rig.manager.flush(5)
    rig.assert_converged(second)


def test_update_and_delete_replicate(rig):
    memory = rig.add("k", "v1")
    updated = rig.manager.update(memory.id, MemoryPatch(content="v2"))
    assert updated.content == "v2"
    other = rig.add("gone", "bye")
    assert rig.manager.delete(other.id) is True
    assert rig.manager.delete(other.id) is False
    assert rig.manager.update("no-such-id", MemoryPatch(content="x")) is None
    rig.manager.flush(5)
    rig.assert_converged(updated)


def test_search_served_by_primary(rig):
    rig.add("a", "the user likes green tea")
    result = rig.manager.search(SearchQuery(api_key_id="k1", text="green tea"))
    assert isinstance(result, ManagedSearch)
    assert result.backend == "main" and not result.fallback and result.error is None
    assert [h.memory.key for h in result.hits] == ["a"]


def test_tenant_isolation_through_the_manager(rig):
    a = rig.add("shared-key", "alpha secret", api_key="A")
    b = rig.add("shared-key", "beta secret", api_key="B")
    assert a.id != b.id
    rig.main.fail()  # isolation must hold on the fallback path too
    for api_key, mine in (("A", a), ("B", b)):
        hits = rig.manager.search(SearchQuery(api_key_id=api_key, text="secret")).hits
        assert [h.memory.id for h in hits] == [mine.id]
        page = rig.manager.list(ListFilter(api_key_id=api_key))
        assert [m.id for m in page.data] == [mine.id]
    rig.main.recover()
    rig.manager.flush(5)
    assert rig.manager.get(a.id).content == "alpha secret"
    assert rig.manager.get(b.id).content == "beta secret"


def test_bad_input_is_a_validation_error_and_writes_nothing(rig):
    with pytest.raises(ValidationError):
        rig.manager.create({"api_key_id": "k1"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        rig.manager.get("")
    with pytest.raises(ValidationError):
        rig.manager.update(123, MemoryPatch(content="x"))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        rig.manager.search("query")  # type: ignore[arg-type]
    assert rig.manager.outbox.depth() == 0
    assert all(not s.snapshot() for s in rig.stores)


def test_conflict_reaches_the_caller_without_failover(rig):
    one = rig.add("one")
    rig.add("two")
    with pytest.raises(ConflictError):
        rig.manager.update(one.id, MemoryPatch(key="two"))
    assert rig.vault.calls["update"] == 0
    assert rig.manager.breaker("main").state == "closed"


def test_duplicate_backend_names_are_a_config_error():
    with pytest.raises(ConfigError, match="twice"):
        MemoryManager(InMemoryBackend("x"), [InMemoryBackend("x")])


# --- primary down ------------------------------------------------------------------------------------

def test_primary_down_writes_acknowledged_then_replayed(rig):
    before = rig.add("before", "written while healthy")
    rig.manager.flush(5)
    rig.main.fail()
    created = rig.add("during", "written during the outage")
    updated = rig.manager.update(before.id, MemoryPatch(content="changed during the outage"))
    doomed = rig.add("doomed", "deleted during the outage")
    assert rig.manager.delete(doomed.id)
    assert rig.vault.calls["create"] == 2
    assert rig.manager.outbox.pending("main") == 4  # put, put, put, delete: journaled for the primary
    # reads are served by the fallback meanwhile
    assert rig.manager.get(created.id).same_as(created)
    search = rig.manager.search(SearchQuery(api_key_id="k1", text="outage"))
    assert search.backend == "vault0" and search.fallback
    assert "main" in search.error
    assert {h.memory.id for h in search.hits} == {created.id, before.id}
    # recovery: the outbox replays in order; the primary then holds exactly the acknowledged state
    rig.main.recover()
    assert rig.manager.flush(5)
    rig.assert_converged(created, updated)
    assert rig.manager.search(SearchQuery(api_key_id="k1", text="outage")).backend == "main"


def test_every_backend_down_raises_the_primary_error(rig):
    rig.main.fail(message="primary exploded")
    rig.vault.fail()
    with pytest.raises(BackendUnavailableError, match="primary exploded"):
        rig.add("k")
    assert rig.manager.outbox.depth() == 0  # nothing acknowledged, nothing journaled
    with pytest.raises(BackendUnavailableError):
        rig.manager.get("some-id")
    with pytest.raises(BackendUnavailableError):
        rig.manager.search(SearchQuery(api_key_id="k1", text="x"))


def test_get_falls_back_when_primary_returns_none_or_raises(rig):
    memory = rig.add("k")
    rig.manager.flush(5)
    rig.stores[0].delete(memory.id)  # the primary lost it behind memroute's back
    assert rig.manager.get(memory.id).same_as(memory)
    rig.main.fail("get", "get_many")
    assert rig.manager.get(memory.id).same_as(memory)
    assert rig.manager.get_many([memory.id, "missing"]) == {memory.id: memory}


def test_list_falls_back_on_error(rig):
    rig.add("k")
    rig.manager.flush(5)
    rig.main.fail("list")
    page = rig.manager.list(ListFilter(api_key_id="k1"))
    assert page.total == 1 and rig.vault.calls["list"] == 1


def test_reads_prefer_an_in_sync_fallback_over_a_primary_catching_up(rig):
    rig.main.fail()
    memory = rig.add("k", "fresh content")
    rig.main.recover()
    # the primary answers again but has not received its backlog: the fallback serves, visibly
    rig.manager.breaker("main").record_success()
    search = rig.manager.search(SearchQuery(api_key_id="k1", text="fresh"))
    assert search.backend == "vault0" and search.fallback and "catching up" in search.error
    # a write first replays the primary's short backlog in order, then goes to the primary directly
    newer = rig.manager.update(memory.id, MemoryPatch(content="newer content"))
    assert rig.manager.outbox.pending("main") == 0 and rig.manager.outbox.pending("vault0") == 1
    assert rig.main.calls["put"] == 1 and rig.main.calls["update"] == 1
    rig.manager.flush(5)
    rig.assert_converged(newer)


# --- fallback down -----------------------------------------------------------------------------------

def test_fallback_down_entries_wait_then_arrive(rig):
    rig.vault.fail()
    memory = rig.add("k")
    assert not rig.manager.flush(0)
    stats = rig.manager.health()["outbox"]
    assert stats["depth"] == 1 and stats["by_target"] == {"vault0": 1}
    failing = stats["failing"][0]
    assert failing["target"] == "vault0" and failing["op"] == "put" and failing["attempts"] >= 1
    assert "injected fault" in failing["last_error"]
    rig.vault.recover()
    assert rig.manager.flush(5)
    rig.assert_converged(memory)


def test_permanently_failing_entry_is_never_dropped(rig):
    rig.vault.fail("put", message="disk full")
    rig.add("k")
    for _ in range(5):
        rig.clock.advance(100)
        rig.manager.flush(0)
    entries = rig.manager.outbox.entries("vault0")
    assert len(entries) == 1 and entries[0].attempts >= 5 and "disk full" in entries[0].last_error


def test_backoff_doubles_up_to_the_maximum(rig):
    rig.vault.fail("put")
    rig.add("k")
    delays = []
    for _ in range(6):
        rig.manager.flush(0)
        head = rig.manager.outbox.head("vault0")
        delays.append(head.next_attempt_at - rig.clock())
    assert delays == [1, 2, 4, 8, 8, 8]


def test_fifo_per_target_stops_at_the_first_failure(rig):
    rig.vault.fail("put")
    memory = rig.add("k", "v1")
    rig.manager.update(memory.id, MemoryPatch(content="v2"))
    rig.manager.delete(memory.id)
    rig.manager.flush(0)
    assert rig.vault.calls["put"] == 1 and rig.vault.calls["delete"] == 0
    rig.vault.recover()
    rig.manager.flush(5)
    assert rig.stores[1].get(memory.id) is None and rig.stores[0].get(memory.id) is None


# --- hangs, breaker, health --------------------------------------------------------------------------

def test_hang_times_out_and_counts_as_failure(tmp_path):
    rig = Rig(tmp_path, settings=ManagerSettings(health_interval_s=0, operation_timeout_s=0.05, breaker_failures=1,
                                                 breaker_reset_s=10))
    try:
        rig.main.hang("create", "put")
        memory = rig.add("k")
        assert rig.vault.calls["create"] == 1  # the fallback took the create after the timeout
        assert rig.manager.breaker("main").state == "open"
        assert rig.manager.health()["backends"][0]["abandoned_writes"] == 1
        rig.main.recover()  # the hung call finishes late; the journaled put still lands after it
        assert rig.manager.flush(5)
        rig.assert_converged(memory)
    finally:
        rig.manager.close()


def test_breaker_opens_half_opens_and_closes(rig):
    rig.main.fail("search")
    query = SearchQuery(api_key_id="k1", text="x")
    for _ in range(3):
        assert rig.manager.search(query).fallback
    assert rig.main.calls["search"] == 3 and rig.manager.breaker("main").state == "open"
    rig.manager.search(query)
    assert rig.main.calls["search"] == 3  # skipped while open
    assert "circuit breaker open" in rig.manager.search(query).error
    rig.clock.advance(10)
    assert rig.manager.breaker("main").state == "half-open"
    rig.manager.search(query)  # the probe fails: open again
    assert rig.main.calls["search"] == 4 and rig.manager.breaker("main").state == "open"
    rig.main.recover()
    rig.clock.advance(10)
    assert not rig.manager.search(query).fallback  # the probe succeeds: closed
    assert rig.manager.breaker("main").state == "closed"


def test_health_checks_feed_the_breaker_and_wake_replay(rig):
    rig.main.fail()
    memory = rig.add("k")
    for _ in range(3):
        rig.manager.check_health()
    assert rig.manager.breaker("main").state == "open"
    rig.main.recover()
    rig.manager.check_health()  # a good probe closes the breaker at once
    assert rig.manager.breaker("main").state == "closed"
    assert rig.manager.flush(5)
    rig.assert_converged(memory)


def test_health_output_shape(rig):
    rig.vault.fail()
    rig.add("k")
    rig.manager.flush(0)
    health = rig.manager.health()
    assert [b["name"] for b in health["backends"]] == ["main", "vault0"]
    main, vault = health["backends"]
    assert main["role"] == "primary" and vault["role"] == "fallback"
    assert main["ok"] is True and main["error"] is None and main["breaker"] == "closed"
    assert vault["ok"] is False and "injected fault" in vault["error"]
    assert vault["breaker"] in ("closed", "open", "half-open")
    assert {"type", "latency_ms", "pending"} <= main.keys()
    outbox = health["outbox"]
    assert outbox["depth"] == 1 and outbox["by_target"] == {"vault0": 1}
    assert outbox["oldest_age_s"] >= 0
    assert {"target", "op", "attempts", "last_error"} <= outbox["failing"][0].keys()


def test_scheduled_health_checks_run_in_the_background(tmp_path):
    rig = Rig(tmp_path, settings=ManagerSettings(health_interval_s=0.01))
    try:
        done = threading.Event()
        original = rig.main.inner.health

        def counting_health():
            done.set()
            return original()

        rig.main.inner.health = counting_health
        assert done.wait(5)
    finally:
        rig.manager.close()


def test_backend_that_fails_to_initialize_is_skipped_then_retried(tmp_path):
    class Flaky(InMemoryBackend):
        broken = True

        def initialize(self):
            if self.broken:
                raise BackendUnavailableError("cannot reach the server")
            super().initialize()

    primary, fallback = Flaky("main"), InMemoryBackend("vault")
    manager = MemoryManager(primary, [fallback], settings=SETTINGS, clock=ManualClock())
    with manager:
        memory = manager.create(NewMemory(api_key_id="k", key="a", content="x"))
        assert fallback.get(memory.id) is not None
        primary.broken = False
        manager.check_health()
        assert manager.flush(5)
        assert primary.get(memory.id).same_as(memory)


def test_no_backend_initializes_raises():
    class Dead(InMemoryBackend):
        def initialize(self):
            raise BackendUnavailableError("down")

    manager = MemoryManager(Dead("a"), [Dead("b")], settings=SETTINGS)
    with pytest.raises(BackendUnavailableError, match="down"):
        manager.initialize()
    manager.close()


def test_close_is_idempotent_and_calls_after_close_fail(rig):
    rig.manager.close()
    rig.manager.close()
    with pytest.raises(BackendUnavailableError, match="closed"):
        rig.add("k")


def test_a_primary_only_manager_works(tmp_path):
    rig = Rig(tmp_path, fallbacks=0)
    try:
        memory = rig.add("k")
        assert rig.manager.outbox.depth() == 0
        assert rig.manager.get(memory.id).same_as(memory)
        rig.main.fail()
        with pytest.raises(BackendUnavailableError):
            rig.add("j")
    finally:
        rig.manager.close()


def test_three_backends_second_fallback_takes_over(tmp_path):
    rig = Rig(tmp_path, fallbacks=2)
    try:
        rig.main.fail()
        rig.vaults[0].fail()
        memory = rig.add("k")
        assert rig.vaults[1].calls["create"] == 1
        assert rig.manager.outbox.pending("main") == 1 and rig.manager.outbox.pending("vault0") == 1
        rig.main.recover()
        rig.vaults[0].recover()
        assert rig.manager.flush(5)
        rig.assert_converged(memory)
    finally:
        rig.manager.close()


# --- background replay and concurrency ---------------------------------------------------------------

def wait_until(condition, timeout=10.0):
    """Poll ``condition`` until it holds (a bound to avoid hanging, not an assertion on duration)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_background_replay_delivers_without_flush(tmp_path):
    rig = Rig(tmp_path, background=True)
    try:
        memory = rig.add("k")
        assert wait_until(lambda: rig.manager.outbox.depth() == 0)
        rig.assert_converged(memory)
    finally:
        rig.manager.close()


def test_background_replay_resumes_after_recovery(tmp_path):
    rig = Rig(tmp_path, background=True)
    try:
        rig.main.fail()
        memory = rig.add("k")
        rig.main.recover()
        rig.clock.advance(3600)  # past the entry's backoff and the breaker's reset
        rig.manager.check_health()
        assert wait_until(lambda: rig.manager.outbox.depth() == 0)
        rig.assert_converged(memory)
    finally:
        rig.manager.close()


def test_nothing_lost_under_concurrent_writers_while_the_primary_flaps(tmp_path):
    settings = ManagerSettings(health_interval_s=0, breaker_failures=2, breaker_reset_s=1, retry_base_s=0.5,
                               retry_max_s=2, operation_timeout_s=5)
    rig = Rig(tmp_path, settings=settings, background=True)
    acknowledged: dict[str, object] = {}
    deleted: set[str] = set()
    ack_lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(40):
                key = f"w{n}-{i % 10}"
                try:
                    memory = rig.add(key, f"writer {n} round {i}")
                    if i % 3 == 0:
                        memory = rig.manager.update(memory.id, MemoryPatch(content=f"updated {n}/{i}"))
                    with ack_lock:
                        acknowledged[key] = memory
                        deleted.discard(key)
                    if i % 7 == 0 and rig.manager.delete(memory.id):
                        with ack_lock:
                            acknowledged.pop(key, None)
                            deleted.add(key)
                except BackendUnavailableError:
                    pass  # not acknowledged: allowed to be absent
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def flapper() -> None:
        pause = threading.Event()
        while not stop.is_set():
            rig.main.fail()
            pause.wait(0.002)
            rig.main.recover()
            rig.clock.advance(1)
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
    rig.main.recover()
    try:
        assert not errors
        assert rig.manager.flush(10)
        expected = list(acknowledged.values())
        rig.assert_converged(*expected)
    finally:
        rig.manager.close()


def test_write_while_primary_still_failing_is_journaled_behind_the_backlog(rig):
    rig.main.fail()
    memory = rig.add("k", "v1")
    newer = rig.manager.update(memory.id, MemoryPatch(content="v2"))
    assert [e.op for e in rig.manager.outbox.entries("main")] == ["put", "put"]
    assert [e.payload["content"] for e in rig.manager.outbox.entries("main")] == ["v1", "v2"]
    rig.main.recover()
    rig.manager.flush(5)
    rig.assert_converged(newer)


def test_iter_all_pages_through_the_manager_and_fails_over(rig):
    memories = [rig.add(f"k{i}", api_key="A" if i % 2 else "B") for i in range(7)]
    rig.manager.flush(5)
    rig.main.fail()
    assert {m.id for m in rig.manager.iter_all(batch=2)} == {m.id for m in memories}
    assert {m.id for m in rig.manager.iter_all("A", batch=2)} == {m.id for m in memories if m.api_key_id == "A"}


def test_a_lagging_fallback_does_not_resurrect_a_deleted_memory(rig):
    memory = rig.add("k")
    rig.manager.flush(5)
    rig.vault.fail("delete")  # the delete cannot reach the fallback yet
    assert rig.manager.delete(memory.id)
    rig.manager.flush(0)
    assert rig.stores[1].get(memory.id) is not None
    assert rig.manager.get(memory.id) is None
    assert rig.manager.get_many([memory.id]) == {}


def test_poison_entries_are_dead_lettered_and_orphaned_entries_stay_visible(rig):
    """A put whose payload no longer validates can never be delivered: it is set aside (and reported)
    instead of blocking every later entry for its target (issue 16, item 6)."""
    rig.manager.outbox.add([
        ("main", "put", {"id": "broken", "content": 1}),
        ("retired-backend", "delete", {"id": "x"}),
    ])
    memory = rig.add("k")
    assert not rig.manager.flush(0)  # the retired target's entry is still there, undelivered
    outbox = rig.manager.health()["outbox"]
    assert outbox["by_target"] == {"retired-backend": 1}
    assert outbox["dead_letters"] == 1
    [dead] = rig.manager.outbox.dead_letters()
    assert (dead["target"], dead["memory_id"]) == ("main", "broken") and "payload" in dead["last_error"]
    assert rig.stores[0].get(memory.id).same_as(memory)
    assert rig.manager.outbox.pending("vault0") == 0 and rig.stores[1].get(memory.id) is not None


def test_all_failed_error_names_the_lagging_primary_and_its_replay_error(rig):
    rig.main.fail(message="disk on fire")
    rig.add("k")
    rig.vault.fail()
    with pytest.raises(BackendUnavailableError, match=r"catching up.*disk on fire"):
        rig.add("j")
