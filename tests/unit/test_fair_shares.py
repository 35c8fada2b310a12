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
            shares.leave()

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
        shares.leave()  # a's call finished: the worker goes to c, not to the cancelled b
        await later
        shares.leave()
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
    assert started.index("quiet") <= 4, started  # a first-come pool starts it 21st


async def _settled(mem: AsyncMemroute) -> bool:
    await asyncio.sleep(0.05)  # the last worker is freed by a callback on the loop
    return mem._shares.running == 0
