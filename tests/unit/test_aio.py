"""The async API (memroute.aio) on the real default stack (SQLite) in a tmp dir: every method, two tenants
under concurrency, cancellation and timeouts mid-call, typed errors, and a loop-lag probe."""

from __future__ import annotations

import asyncio
import builtins
import threading
import time

import pytest

import memroute
from memroute.aio import AsyncMemroute
from memroute.config.serialization import dumps_memory
from memroute.errors import BackendUnavailableError, ConflictError, ValidationError

TURN = {"model": "m", "messages": [{"role": "user", "content": "I prefer TypeScript over Python for web work"}]}


def _open(tmp_path, **kwargs):
    return memroute.open_async(data_dir=str(tmp_path / "d"), **kwargs)


def test_every_method_through_the_async_api(tmp_path):
    async def main() -> None:
        async with _open(tmp_path) as mem:
            assert isinstance(mem, AsyncMemroute)
            added = await mem.add(api_key_id="a", content="I live in Lisbon", key="home", metadata={"n": 1})
            assert (await mem.get(added.id, api_key_id="a")) == added
            updated = await mem.update(added.id, api_key_id="a", content="I live in Porto")
            assert updated is not None and updated.content == "I live in Porto" and updated.id == added.id
            page = await mem.list(api_key_id="a")
            assert page.total == 1 and page.data[0].id == added.id
            result = await mem.search("where do I live?", api_key_id="a", strategy="exact")
            assert [hit.memory.id for hit in result] == [added.id]
            shown = await mem.preview("where do I live?", api_key_id="a", strategy="exact")
            assert [m.id for m in shown.memories] == [added.id]
            ran = await mem.run(lambda x, y=0: (threading.current_thread().name, x + y), 2, y=3)
            assert ran[0].startswith("memroute-aio") and ran[1] == 5  # in the pool, like the methods
            stats = await mem.stats("a")
            assert stats.total == 1 and stats.by_type["factual"] == 1
            report = await mem.clear("a", dry_run=True)
            assert report.matched == 1 and report.deleted == 0
            augmented = await mem.augment(TURN, api_key_id="a")
            assert augmented is TURN or augmented != TURN
            explained = await mem.explain_augment(TURN, api_key_id="a")
            assert explained.request is not None
            observed = await mem.observe(TURN, api_key_id="a", wait=True)
            assert all(m.api_key_id == "a" for m in observed)
            facts = await mem.extract("I prefer tea")
            assert isinstance(facts, list)
            assert await mem.flush(5.0) is True
            for maintenance in (mem.summarize("a", 30), mem.compact("a"), mem.prune("a", dry_run=True)):
                assert (await maintenance).dry_run is True
            assert (await mem.status()).backends
            assert await mem.health()
            exported = [m async for m in mem.export("a")]
            assert {m.id for m in exported} >= {added.id}
            lines = [dumps_memory(m) for m in exported]
            assert await mem.delete(added.id, api_key_id="a") is True
            assert await mem.get(added.id, api_key_id="a") is None
            assert (await mem.import_jsonl(lines)).imported == len(lines)
            assert (await mem.get(added.id, api_key_id="a")).content == "I live in Porto"
            assert (await mem.clear("a")).deleted == len(lines)
        with pytest.raises(BackendUnavailableError):
            await mem.get(added.id, api_key_id="a")

    asyncio.run(main())


def test_the_forwarded_methods_keep_the_sync_docs_and_signature():
    import inspect

    from memroute.service import Memroute

    assert AsyncMemroute.search.__doc__ == Memroute.search.__doc__
    assert inspect.signature(AsyncMemroute.add) == inspect.signature(Memroute.add)
    assert inspect.iscoroutinefunction(AsyncMemroute.add)


def test_fifty_concurrent_searches_across_two_tenants_never_mix(tmp_path):
    async def main() -> None:
        async with _open(tmp_path, max_workers=4) as mem:
            for tenant in ("a", "b"):
                for i in range(5):
                    await mem.add(api_key_id=tenant, content=f"{tenant} note {i} about coffee", key=f"k{i}")

            async def one(i: int) -> tuple[str, set[str]]:
                tenant = "ab"[i % 2]
                result = await mem.search("coffee", api_key_id=tenant, strategy="exact", limit=10)
                return tenant, {hit.memory.api_key_id for hit in result} | {
                    hit.memory.content.split()[0] for hit in result}

            answers = await asyncio.gather(*(one(i) for i in range(50)))
            assert len(answers) == 50
            for tenant, seen in answers:
                assert seen == {tenant}

    asyncio.run(main())


class _Gate:
    """Holds the wrapped sync call inside its thread until released, so a test can cancel it mid-call."""

    def __init__(self, real):
        self.real, self.started, self.release = real, threading.Event(), threading.Event()

    def __call__(self, *args, **kwargs):
        self.started.set()
        assert self.release.wait(10), "the test never released the gate"
        return self.real(*args, **kwargs)


async def _wait_started(gate: _Gate) -> None:
    while not gate.started.is_set():
        await asyncio.sleep(0.001)


class _Write:
    """One write through the async API: what to seed, where to hold it mid-call (a real manager or service
    step, instrumented with a :class:`_Gate`), the call itself, and the tenant's state before and after it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    async def seed(self, mem: AsyncMemroute) -> None:
        self.seeded = [await mem.add(api_key_id="a", content=f"seed {i}", key=f"seed{i}", metadata={"i": i})
                       for i in range(3)]

    def gated(self, mem: AsyncMemroute) -> tuple[object, str]:
        """(the object, the attribute) to hold: the step that does the writing."""
        if self.kind == "clear":
            return mem.sync, "_delete_owned"  # held before the first of its deletions
        manager = mem.sync._manager
        if self.kind in ("add", "update") and manager.records_in_write:
            # A primary that writes the history entry in the write's own transaction (SQLite) takes these.
            return manager, {"add": "create_recorded", "update": "update_recorded"}[self.kind]
        return manager, {"add": "create", "update": "update", "import": "put_many"}[self.kind]

    def call(self, mem: AsyncMemroute):  # type: ignore[no-untyped-def]
        if self.kind == "add":
            return mem.add(api_key_id="a", content="a long careful memory", key="k", metadata={"x": [1, 2]})
        if self.kind == "update":
            return mem.update(self.seeded[0].id, api_key_id="a", content="rewritten", metadata={"y": 2},
                              key="renamed")
        if self.kind == "import":
            lines = [dumps_memory(m).replace("seed", "imported") for m in self.seeded]
            lines += [dumps_memory(m).replace(self.seeded[0].id, "00000000-0000-4000-8000-00000000000" + str(i))
                      .replace("seed0", f"fresh{i}") for i, m in enumerate([self.seeded[0]] * 3)]
            return mem.import_jsonl(lines)
        return mem.clear("a")

    async def state(self, mem: AsyncMemroute) -> builtins.set[tuple[str, str, str]]:
        page = await mem.list(api_key_id="a", limit=100)
        return {(m.key, m.content, repr(sorted(m.metadata.items()))) for m in page.data}

    def completed(self, before: builtins.set[tuple[str, str, str]]) -> builtins.set[tuple[str, str, str]]:
        """The tenant's state once the write ran to its end (all of it, never a part)."""
        if self.kind == "add":
            return before | {("k", "a long careful memory", repr([("x", [1, 2])]))}
        if self.kind == "update":
            first = self.seeded[0]
            return (before - {(first.key, first.content, repr([("i", 0)]))}
                    | {("renamed", "rewritten", repr([("y", 2)]))})  # metadata is replaced
        if self.kind == "import":
            imported = {(m.key.replace("seed", "imported"), m.content.replace("seed", "imported"),
                         repr(sorted(m.metadata.items()))) for m in self.seeded}
            fresh = {(f"fresh{i}", "seed 0", repr([("i", 0)])) for i in range(3)}
            return imported | fresh
        return builtins.set()


WRITES = ["add", "update", "import", "clear"]


@pytest.mark.parametrize("how", ["cancel", "timeout"])
@pytest.mark.parametrize("kind", WRITES)
def test_a_write_cancelled_mid_call_completes_whole_and_the_service_still_works(tmp_path, monkeypatch, kind, how):
    write = _Write(kind)

    async def main() -> None:
        async with _open(tmp_path) as mem:
            await write.seed(mem)
            before = await write.state(mem)
            # Instrumentation only: the real write runs, held until the await has been abandoned.
            target, name = write.gated(mem)
            gate = _Gate(getattr(target, name))
            monkeypatch.setattr(target, name, gate)
            call = write.call(mem)
            if how == "cancel":
                task = asyncio.ensure_future(call)
                await _wait_started(gate)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                with pytest.raises(asyncio.TimeoutError):  # TimeoutError itself from 3.11; wait_for runs on 3.10
                    await asyncio.wait_for(call, 0.05)
                assert gate.started.is_set()
            assert await write.state(mem) == before  # nothing visible yet: the write is still held
            gate.release.set()
            await mem.settle()
            assert await write.state(mem) == write.completed(before)
            monkeypatch.undo()
            again = await mem.add(api_key_id="a", content="after", key="after")
            assert (await mem.get(again.id, api_key_id="a")) == again

    asyncio.run(main())


@pytest.mark.parametrize("kind", WRITES)
def test_a_write_cancelled_while_queued_never_runs(tmp_path, monkeypatch, kind):
    write = _Write(kind)

    async def main() -> None:
        async with _open(tmp_path, max_workers=1) as mem:
            await write.seed(mem)
            before = await write.state(mem)
            gate = _Gate(mem.sync._manager.list)
            monkeypatch.setattr(mem.sync._manager, "list", gate)
            busy = asyncio.ensure_future(mem.list(api_key_id="a"))  # holds the only worker
            await _wait_started(gate)
            queued = asyncio.ensure_future(write.call(mem))
            await asyncio.sleep(0.01)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            gate.release.set()
            assert (await busy).total == len(before)
            await mem.settle()
            monkeypatch.undo()
            assert await write.state(mem) == before

    asyncio.run(main())


def test_errors_are_the_same_typed_memroute_errors(tmp_path):
    async def main() -> None:
        async with _open(tmp_path) as mem:
            with pytest.raises(ValidationError):
                await mem.get("not-a-uuid", api_key_id="a")
            with pytest.raises(ValidationError):
                await mem.add(api_key_id="a", content=42)
            with pytest.raises(ValidationError):
                await mem.update("00000000-0000-4000-8000-000000000000", api_key_id="a", colour="red")
            first = await mem.add(api_key_id="a", content="one", key="one")
            await mem.add(api_key_id="a", content="two", key="two")
            with pytest.raises(ConflictError):
                await mem.update(first.id, api_key_id="a", key="two")
            with pytest.raises(ValidationError, match="line 2"):
                await mem.import_jsonl([dumps_memory(first).replace("one", "changed"), "not json"])
            assert (await mem.stats("a")).total == 2  # the bad import wrote nothing
            assert (await mem.get(first.id, api_key_id="a")).content == "one"
            with pytest.raises(ValidationError):
                [m async for m in mem.export("")]
            # another tenant's id is a missing one, through the async API too
            assert await mem.get(first.id, api_key_id="b") is None
            assert await mem.delete(first.id, api_key_id="b") is False
        with pytest.raises(ValidationError, match="max_workers"):
            await memroute.open_async(max_workers=0)

    asyncio.run(main())


async def _probe_lag(stop: asyncio.Event, tick: float = 0.001) -> float:
    """The longest the loop was late waking a ``tick`` sleep: how long something blocked it."""
    worst = 0.0
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(tick)
        worst = max(worst, time.perf_counter() - before - tick)
    return worst


def test_memroute_calls_do_not_block_the_loop(tmp_path):
    """The loop only submits and collects; the calls run in pool threads, several at once. Checked
    structurally (which thread ran each call, how many overlapped), not by timing: a timed assertion is
    flaky on a shared 2-core machine. The loop lag is printed for reference; tests/bench has the figure."""
    ran_on: list[int] = []
    active = 0
    most_at_once = 0
    lock = threading.Lock()

    class Spying(AsyncMemroute):
        async def _run(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
            def spied(*a, **kw):  # type: ignore[no-untyped-def]
                nonlocal active, most_at_once
                with lock:
                    ran_on.append(threading.get_ident())
                    active += 1
                    most_at_once = max(most_at_once, active)
                try:
                    return fn(*a, **kw)
                finally:
                    with lock:
                        active -= 1
            return await super()._run(spied, *args, **kwargs)

    async def main() -> tuple[int, float, float]:
        loop_thread = threading.get_ident()
        service = memroute.open(data_dir=str(tmp_path / "d"))
        async with Spying(service, max_workers=4) as mem:
            for i in range(20):
                await mem.add(api_key_id="a", content=f"note {i} about tea", key=f"k{i}")
            await mem.search("warm up", api_key_id="a", strategy="hybrid")  # loads the embedder once
            ran_on.clear()
            stop = asyncio.Event()
            probe = asyncio.ensure_future(_probe_lag(stop))
            started = time.perf_counter()
            results = await asyncio.gather(*(mem.search("tea", api_key_id="a", strategy="hybrid")
                                             for _ in range(50)))
            elapsed = time.perf_counter() - started
            stop.set()
            assert all(result.memories for result in results)
            return loop_thread, await probe, elapsed

    loop_thread, worst, elapsed = asyncio.run(main())
    print(f"max loop lag during 50 concurrent searches: {worst * 1000:.1f} ms of {elapsed * 1000:.0f} ms")
    assert len(ran_on) == 50 and loop_thread not in ran_on, "a call ran on the event loop's thread"
    assert most_at_once >= 2, "the calls never overlapped: they were serialised"


def test_close_service_false_leaves_the_service_open(tmp_path):
    service = memroute.open(data_dir=str(tmp_path / "d"))
    try:
        async def main() -> None:
            async with AsyncMemroute(service, max_workers=2, close_service=False) as mem:
                await mem.add(api_key_id="a", content="kept", key="k")
            with pytest.raises(BackendUnavailableError):
                await mem.stats("a")

        asyncio.run(main())
        assert service.stats("a").total == 1  # still open and usable after aclose()
    finally:
        service.close()


def test_the_pool_is_sized_from_what_the_service_runs(tmp_path):
    from memroute.aio import DEFAULT_MAX_WORKERS, IN_PROCESS_WORKERS, auto_workers
    from memroute.testing.fakes import HashingEmbeddingSource
    from memroute_builtins.backends.http import HttpBackend
    from memroute_builtins.backends.postgres.backend import PostgresBackend
    from memroute_builtins.backends.sqlite.backend import SqliteBackend
    from memroute_builtins.embedding.remote import RemoteEmbeddingSource

    # what the built-ins declare: in this process (the GIL) or waiting on another process / the network
    assert SqliteBackend.in_process is True
    assert HttpBackend.in_process is PostgresBackend.in_process is RemoteEmbeddingSource.in_process is False
    with memroute.open(data_dir=str(tmp_path / "local")) as local:  # the default stack: SQLite, sqlite-vec, static
        assert local.runs_in_process() and auto_workers(local) == IN_PROCESS_WORKERS
    # a component that does not declare where it works counts as waiting elsewhere: the larger pool
    with memroute.open(data_dir=str(tmp_path / "other"), embedder=HashingEmbeddingSource()) as other:
        assert not other.runs_in_process() and auto_workers(other) == DEFAULT_MAX_WORKERS

    async def main() -> None:
        async with _open(tmp_path) as mem:
            assert mem.max_workers == IN_PROCESS_WORKERS
        async with _open(tmp_path, max_workers=5) as mem:
            assert mem.max_workers == 5

    asyncio.run(main())


def test_workers_hand_the_gil_over_between_stages_and_no_other_thread_pauses(tmp_path, monkeypatch):
    from memroute.aio import HANDOFF_FROM_WORKERS, default_handoff
    from memroute.retrieval import gil

    pauses: list[tuple[str, float]] = []
    real_sleep = gil._sleep

    def recorded(seconds: float) -> None:
        pauses.append((threading.current_thread().name, seconds))
        real_sleep(seconds)

    monkeypatch.setattr(gil, "_sleep", recorded)  # instrumentation: the real sleep still runs

    async def main(**kwargs: object) -> None:
        async with _open(tmp_path, **kwargs) as mem:
            if not (await mem.list(api_key_id="a")).total:
                await mem.add(api_key_id="a", content="I drink green tea every morning", key="tea")
            await mem.flush(10)
            assert (await mem.search("tea", api_key_id="a", strategy="hybrid")).memories
            # the sync API on this thread, while the pool exists: never a pause
            assert mem.sync.search("tea", api_key_id="a", strategy="hybrid").memories

    asyncio.run(main(max_workers=HANDOFF_FROM_WORKERS))  # a pool this large hands over by default
    assert pauses, "an async hybrid search made no handoff"
    assert {seconds for _, seconds in pauses} == {gil.DEFAULT_PAUSE}
    assert all(name.startswith("memroute-aio") for name, _ in pauses), pauses
    pauses.clear()
    asyncio.run(main(max_workers=2, gil_handoff=gil.DEFAULT_PAUSE))  # asked for explicitly
    assert pauses and all(name.startswith("memroute-aio") for name, _ in pauses), pauses
    pauses.clear()
    asyncio.run(main(max_workers=8, gil_handoff=0))
    asyncio.run(main())  # the SQLite stack's pool of two: no handoff by default
    asyncio.run(main(max_workers=1))
    assert pauses == []
    assert [default_handoff(n) for n in (1, 2, HANDOFF_FROM_WORKERS, 8)] == [0.0, 0.0, gil.DEFAULT_PAUSE,
                                                                             gil.DEFAULT_PAUSE]
    with memroute.open(data_dir=str(tmp_path / "d")) as service:
        service.search("tea", api_key_id="a", strategy="hybrid")
        with pytest.raises(ValidationError, match="gil_handoff"):
            AsyncMemroute(service, gil_handoff=1.0)
    assert pauses == []


def test_open_async_loads_the_embedding_model_in_its_opening_thread(tmp_path, monkeypatch):
    """Loaded lazily, the model was loaded by the first call's thread (the indexer's, or a search's worker)
    holding the GIL, which stalled the event loop (docs/python-api.md, "The first call")."""
    from memroute.testing.fakes import HashingEmbeddingSource
    from memroute_builtins.embedding.static import StaticEmbeddingSource

    loaded_on: list[str] = []
    real_load = StaticEmbeddingSource._load

    def recorded(self: StaticEmbeddingSource) -> object:
        loaded_on.append(threading.current_thread().name)
        return real_load(self)

    monkeypatch.setattr(StaticEmbeddingSource, "_load", recorded)  # instrumentation: the real load still runs

    async def main() -> None:
        async with _open(tmp_path) as mem:
            assert loaded_on and loaded_on[0].startswith("memroute-aio-open"), loaded_on
            await mem.add(api_key_id="a", content="green tea", key="tea")
            await mem.flush(10)
            assert (await mem.search("tea", api_key_id="a", strategy="hybrid")).memories

    asyncio.run(main())
    assert len(loaded_on) == 1, "the model was loaded again by a call"
    # the sync API stays lazy; warm_up() is there for it, and leaves a source that works elsewhere alone
    with memroute.open(data_dir=str(tmp_path / "sync")) as service:
        assert len(loaded_on) == 1
        assert service.warm_up() is True and len(loaded_on) == 2
    with memroute.open(data_dir=str(tmp_path / "other"), embedder=HashingEmbeddingSource()) as other:
        assert other.warm_up() is False
