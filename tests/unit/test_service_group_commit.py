"""The service's group commit on the real default stack (SQLite, sqlite-vec, static embeddings) and the
manager's batched create: concurrent adds coalesce into one backend write, and each caller still gets exactly
what a single add gives it (its own tenant, id and upsert, its own error), with the journal to fallbacks and
the vector index behaving as for single adds. Batches are forced: the first write waits until the others
queue behind it (no timing assertions)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import memroute
from memroute.config.settings import ManagerSettings
from memroute.errors import ValidationError
from memroute.models import Memory, NewMemory
from memroute.routing.manager import MemoryManager
from memroute.testing.faults import FaultyBackend
from memroute.testing.memory import InMemoryBackend
from memroute_builtins.backends.sqlite.backend import SqliteBackend


def _wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def _hold_first_write(mem, queued):
    """Make the first batch wait until ``queued`` adds are queued behind it, so they form one batch."""
    manager = mem._manager
    held = threading.Event()

    def hold() -> None:
        if not held.is_set():
            held.set()
            _wait_for(lambda: mem._adds.waiting >= queued)

    # The first write of either path: SQLite records history in the add's transaction (create_recorded).
    original, original_recorded = manager.create, manager.create_recorded

    def create(new):
        hold()
        return original(new)

    def create_recorded(news, notes):
        hold()
        return original_recorded(news, notes)

    manager.create = create
    manager.create_recorded = create_recorded


def _concurrently(calls):
    results = [None] * len(calls)

    def run(index):
        try:
            results[index] = calls[index]()
        except Exception as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    return results


@pytest.fixture
def mem(tmp_path):
    with memroute.open(data_dir=str(tmp_path / "d")) as service:
        yield service


def test_concurrent_adds_of_two_tenants_share_a_batch_and_never_mix(mem):
    _hold_first_write(mem, 8)
    calls = [lambda: mem.add(api_key_id="first", content="warm-up")]
    for i in range(4):
        calls.append(lambda i=i: mem.add(api_key_id="tenant-a", content=f"a's note {i}", key=f"note:{i}"))
        calls.append(lambda i=i: mem.add(api_key_id="tenant-b", content=f"b's note {i}", key=f"note:{i}"))
    before = mem._adds.batches
    results = _concurrently(calls)
    assert all(isinstance(r, Memory) for r in results), results
    assert mem._adds.batches - before == 2  # the warm-up alone, then the eight that queued behind it
    for result in results[1:]:
        owner = "tenant-a" if result.content.startswith("a's") else "tenant-b"
        assert result.api_key_id == owner and result.key.startswith("note:")
        assert mem.get(result.id, api_key_id=owner) == result
        assert mem.get(result.id, api_key_id="tenant-b" if owner == "tenant-a" else "tenant-a") is None
    assert len({r.id for r in results}) == 9
    assert mem.list(api_key_id="tenant-a").total == 4 and mem.list(api_key_id="tenant-b").total == 4
    assert mem.flush(30)
    hits = mem.search("b's note", api_key_id="tenant-b", strategy="semantic").hits
    assert hits and all(hit.memory.api_key_id == "tenant-b" for hit in hits)  # indexed, for its tenant only


def test_the_same_key_twice_in_one_batch_upserts_as_one_after_another(mem):
    _hold_first_write(mem, 2)
    results = _concurrently([
        lambda: mem.add(api_key_id="t", content="warm-up"),
        lambda: mem.add(api_key_id="t", content="I prefer Go", key="lang", metadata={"a": 1}),
        lambda: mem.add(api_key_id="t", content="I prefer Rust", key="lang", metadata={"b": 2}),
    ])
    first, second = results[1], results[2]
    assert first.id == second.id  # one memory, whichever of the two was queued first
    stored = mem.get(first.id, api_key_id="t")
    assert stored is not None and stored.metadata == {"a": 1, "b": 2}
    assert stored.content in ("I prefer Go", "I prefer Rust") and stored.content == max(
        (first, second), key=lambda m: m.updated_at).content
    assert mem.list(api_key_id="t").total == 2


def test_bad_input_is_refused_before_the_batch_and_fails_nobody_else(mem):
    _hold_first_write(mem, 2)
    results = _concurrently([
        lambda: mem.add(api_key_id="t", content="warm-up"),
        lambda: mem.add(api_key_id="t", content="fine one"),
        lambda: mem.add(api_key_id="", content="no tenant"),
        lambda: mem.add(api_key_id="t", content="fine two"),
    ])
    assert isinstance(results[2], ValidationError) and "api_key_id" in str(results[2])
    assert [r.content for r in (results[1], results[3])] == ["fine one", "fine two"]
    assert mem.list(api_key_id="t").total == 3


def test_submit_add_validates_at_once_and_resolves_on_the_loop(mem):
    with pytest.raises(ValidationError, match="content"):
        mem.submit_add(api_key_id="t", content=42)  # type: ignore[arg-type]

    async def main():
        futures = [mem.submit_add(api_key_id="t" if i % 2 else "u", content=f"loop add {i}") for i in range(16)]
        return await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))

    added = asyncio.run(main())
    assert [m.api_key_id for m in added] == ["u", "t"] * 8
    assert mem.list(api_key_id="t").total == 8 and mem.list(api_key_id="u").total == 8


def test_close_writes_the_queued_adds(tmp_path):
    mem = memroute.open(data_dir=str(tmp_path / "d"))
    futures = [mem.submit_add(api_key_id="t", content=f"queued {i}") for i in range(10)]
    mem.close()
    assert all(isinstance(f.result(0), Memory) for f in futures)
    with memroute.open(data_dir=str(tmp_path / "d")) as again:
        assert again.list(api_key_id="t").total == 10


# --- the manager's batched create ----------------------------------------------------------------------

SETTINGS = ManagerSettings(health_interval_s=0, operation_timeout_s=5)


def test_a_batch_is_one_write_journaled_to_the_fallback(tmp_path):
    main = SqliteBackend("main", tmp_path / "main.db")
    vault = SqliteBackend("vault", tmp_path / "vault.db")
    manager = MemoryManager(main, [vault], settings=SETTINGS, outbox_path=":memory:", replay_in_background=False)
    manager.initialize()
    try:
        news = [NewMemory(api_key_id=t, key="k", content=f"{t}'s") for t in ("a", "b")]
        news.append(NewMemory(api_key_id="a", key="k", content="a's again"))
        outcomes = manager.create_many(news)
        assert [o.api_key_id for o in outcomes] == ["a", "b", "a"] and outcomes[0].id == outcomes[2].id
        assert manager.outbox.pending("vault") == 3  # one put per item, in order
        assert manager.flush(10)
        assert vault.get(outcomes[0].id).content == "a's again" and vault.get(outcomes[1].id).api_key_id == "b"
    finally:
        manager.close()


def test_without_batch_support_each_item_is_its_own_create_and_its_own_error(tmp_path):
    inner = InMemoryBackend("main")
    main = FaultyBackend(inner)
    manager = MemoryManager(main, [], settings=SETTINGS, outbox_path=":memory:", replay_in_background=False)
    manager.initialize()
    try:
        taken = manager.create(NewMemory(api_key_id="a", key="taken", content="x"))
        news = [NewMemory(api_key_id="a", key="one", content="1"),
                NewMemory(api_key_id="b", key="clash", content="2", id=taken.id),
                NewMemory(api_key_id="b", key="three", content="3")]
        outcomes = manager.create_many(news)
        assert isinstance(outcomes[0], Memory) and isinstance(outcomes[2], Memory)
        assert isinstance(outcomes[1], Exception) and "already" in str(outcomes[1])
        assert inner.get(taken.id).api_key_id == "a"
    finally:
        manager.close()
