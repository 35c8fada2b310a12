"""The async API's workers shared fairly between callers (memroute.aio.FairShares, ``caller``): the order
calls reach the pool, on a real event loop and a real thread pool."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import memroute
from memroute.aio import AsyncMemroute, FairShares, caller


def test_a_second_caller_waits_for_one_call_of_a_busy_one_not_its_whole_backlog() -> None:
    async def main() -> list[str]:
        shares = FairShares(1)
        order: list[str] = []

        async def call(who: str, name: str) -> None:
            await shares.enter(who)
            order.append(name)
            await asyncio.sleep(0)  # the call "runs"
            shares.leave(who)

        flood = [asyncio.create_task(call("flood", f"f{i}")) for i in range(6)]
        await asyncio.sleep(0)  # the flood is queued first
        quiet = asyncio.create_task(call("quiet", "q"))
        await asyncio.gather(*flood, quiet)
        return order

    order = asyncio.run(main())
    assert order.index("q") <= 2, order  # behind the running call and the one granted before it came; FIFO: 6
    assert sorted(order) == sorted([f"f{i}" for i in range(6)] + ["q"])


def test_a_cancelled_waiter_leaves_the_line_and_a_cancelled_grant_is_passed_on() -> None:
    async def main() -> tuple[int, list[str]]:
        shares = FairShares(1)
        await shares.enter("a")  # holds the only worker
        waiting = asyncio.create_task(shares.enter("b"))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        served: list[str] = []

        async def take(who: str) -> None:
            await shares.enter(who)
            served.append(who)

        later = asyncio.create_task(take("c"))
        await asyncio.sleep(0)
        shares.leave("a")  # a's call finished: the worker goes to c, not to the cancelled b
        await later
        shares.leave("c")
        return shares.running, served

    running, served = asyncio.run(main())
    assert served == ["c"] and running == 0


def test_calls_of_named_callers_through_the_async_api_are_shared_and_all_complete(tmp_path) -> None:
    """Real service, real pool of 2 workers: 20 calls of one caller and 1 of another; the other's call starts
    before most of the first caller's backlog, and the workers are all free afterwards."""
    started: list[str] = []
    lock = threading.Lock()

    def work(who: str) -> str:
        with lock:
            started.append(who)
        time.sleep(0.005)
        return who

    async def main() -> None:
        with memroute.open(data_dir=str(tmp_path)) as service:
            mem = AsyncMemroute(service, max_workers=2, close_service=False)

            async def as_caller(who: str) -> str:
                token = caller.set(who)
                try:
                    return await mem.run(work, who)
                finally:
                    caller.reset(token)

            flood = [asyncio.create_task(as_caller("flood")) for _ in range(20)]
            await asyncio.sleep(0)
            quiet = asyncio.create_task(as_caller("quiet"))
            results = await asyncio.gather(*flood, quiet)
            assert results.count("flood") == 20 and results[-1] == "quiet"
            assert mem._shares.running == 0 or await _settled(mem)
            await mem.aclose()

    asyncio.run(main())
    assert started.index("quiet") <= 2, started  # on the headroom worker, at once; a first-come pool: 21st


async def _settled(mem: AsyncMemroute) -> bool:
    await asyncio.sleep(0.05)  # the last worker is freed by a callback on the loop
    return mem._shares.running == 0


def test_the_headroom_worker_is_for_a_caller_with_nothing_running_or_waiting() -> None:
    async def main() -> list[str]:
        shares = FairShares(1, headroom=1)
        await shares.enter("flood")  # the one worker of the width
        second = asyncio.create_task(shares.enter("flood"))  # flood already holds one: it waits
        await asyncio.sleep(0)
        assert not second.done() and shares.running == 1
        await shares.enter("quiet")  # nothing running or waiting: the headroom, at once
        third = asyncio.create_task(shares.enter("other"))  # the headroom is taken: it waits in line
        await asyncio.sleep(0)
        assert not third.done() and shares.running == 2
        shares.leave("quiet")  # the pool is back at its width: nothing is handed on
        await asyncio.sleep(0)
        assert not second.done() and not third.done()
        shares.leave("flood")  # now the line moves: flood was first in it
        await asyncio.sleep(0)
        served = [name for name, task in (("flood", second), ("other", third)) if task.done()]
        shares.leave(served[0])
        await asyncio.sleep(0)
        assert second.done() and third.done()
        return served

    assert asyncio.run(main()) == ["flood"]


def _flood_until(stop: threading.Event, passed: list[int]) -> None:
    """A long call of the flood: a stage boundary every millisecond, counted."""
    from memroute.retrieval.gil import checkpoint

    while not stop.is_set():
        checkpoint()
        passed[0] += 1
        time.sleep(0.001)


@pytest.mark.parametrize("backlog", [True, False])
def test_a_callers_backlogged_calls_step_aside_while_a_light_callers_call_runs(tmp_path, backlog) -> None:
    """Real pool: the flood's running calls pass stage boundaries (``gil.checkpoint``) until another caller's call
    runs; then they wait at their next one, until it ends. A caller without a backlog does not step aside."""

    async def main() -> tuple[int, int, int]:
        with memroute.open(data_dir=str(tmp_path)) as service:
            mem = AsyncMemroute(service, max_workers=2, close_service=False)
            mem._shares.max_step_aside_s = 30.0  # this test waits on the rule, not on the bound
            stop, passed = threading.Event(), [0]
            token = caller.set("flood")
            calls = [asyncio.create_task(mem.run(_flood_until, stop, passed)) for _ in range(4 if backlog else 2)]
            caller.reset(token)
            while passed[0] < 20:  # both workers are in the flood's calls
                await asyncio.sleep(0.005)
            assert ("flood" in mem._shares._waiting) is backlog

            def light_call() -> tuple[int, int]:
                with mem._shares.in_call("quiet"):
                    time.sleep(0.05)  # the calls already past a boundary reach their next one
                    before = passed[0]
                    time.sleep(0.1)
                    return before, passed[0]

            before, after = await asyncio.to_thread(light_call)
            ended = passed[0]
            while passed[0] < ended + 10:  # and the flood goes on once it has ended
                await asyncio.sleep(0.005)
            stop.set()
            await asyncio.gather(*calls)
            await mem.aclose()
            return before, after, ended

    before, after, _ended = asyncio.run(main())
    if backlog:
        assert after == before, (before, after)
    else:
        assert after > before, (before, after)


def test_run_inline_counts_as_the_callers_running_call(tmp_path) -> None:
    async def main() -> None:
        with memroute.open(data_dir=str(tmp_path)) as service:
            mem = AsyncMemroute(service, max_workers=2, close_service=False)
            token = caller.set("quiet")
            try:
                assert mem.run_inline(lambda: dict(mem._shares._active)) == {"quiet": 1}
            finally:
                caller.reset(token)
            assert mem.run_inline(lambda: dict(mem._shares._active)) == {}  # no caller: nothing counted
            assert mem._shares._active == {}
            await mem.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("fair_queueing", [True, False])
def test_the_fair_use_gate_names_the_caller_only_with_fair_queueing(tmp_path, fair_queueing) -> None:
    """``[server] fair_queueing`` governs both queues: on, a request's calls are shared by its key (the gate sets
    :data:`memroute.aio.caller` to the key's id, and requests without a key to ``""``); off, nothing names a
    caller, so the worker threads serve calls first come, first served."""
    from memroute.server.fair_queue import LoopTurns
    from memroute.server.fair_use import FairUseMiddleware

    seen: list[str | None] = []

    async def app(scope, receive, send) -> None:
        seen.append(caller.get())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def request(gate, secret: str | None) -> None:
        headers = [(b"authorization", f"Bearer {secret}".encode())] if secret else []
        scope = {"type": "http", "method": "GET", "path": "/api/memory", "headers": headers}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message) -> None:
            pass

        await gate(scope, receive, send)

    with memroute.open({}, data_dir=str(tmp_path)) as mem:
        alice, alice_secret = mem.keys.create("alice", scopes="read", tenant="alice")
        bob, bob_secret = mem.keys.create("bob", scopes="read", tenant="bob")
        gate = FairUseMiddleware(app, mem, LoopTurns(8) if fair_queueing else None)

        async def main() -> None:
            for secret in (alice_secret, bob_secret, None, "not-a-key"):
                await request(gate, secret)

        asyncio.run(main())
    assert seen == ([alice.id, bob.id, "", ""] if fair_queueing else [None] * 4)
    assert caller.get() is None
