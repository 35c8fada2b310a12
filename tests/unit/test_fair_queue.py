"""memroute.server.fair_queue on a real asyncio loop: turns on the loop go round-robin across keys, so a key that
arrives behind another key's backlog is served next, not last; a key's queue is bounded (QueueFull is a 429 with
Retry-After); a request that gives up while it waits leaves the queue, and one that gives up after it was given
the turn passes it on; uncontended requests go straight on. Steps are ordered by the loop, not timed."""

from __future__ import annotations

import asyncio

import pytest

from memroute.deployment.fair_use import RateLimited
from memroute.server.fair_queue import LoopTurns, QueueFull


async def _request(turns: LoopTurns, key: str, name: str, served: list[str]) -> None:
    await turns.take(key)
    served.append(name)  # the request's step on the loop: it holds the turn until the loop's next iteration


def test_a_key_arriving_behind_a_backlog_is_served_next():
    async def main() -> list[str]:
        turns = LoopTurns(per_key=100)
        served: list[str] = []
        flood = [asyncio.create_task(_request(turns, "flood", f"f{i}", served)) for i in range(6)]
        await asyncio.sleep(0)  # the flood's six requests reach the queue: f0 goes at once, five wait
        assert turns.waiting("flood") == 5 and served == ["f0"]
        quiet = asyncio.create_task(_request(turns, "quiet", "q", served))
        await asyncio.gather(*flood, quiet)
        return served

    # q arrived behind five waiting flood requests and goes right after the flood's request in progress (first
    # come, first served would have put it last)
    assert asyncio.run(main()) == ["f0", "q", "f1", "f2", "f3", "f4", "f5"]


def test_keys_take_turns_round_robin():
    async def main() -> list[str]:
        turns = LoopTurns(per_key=100)
        served: list[str] = []
        tasks = [asyncio.create_task(_request(turns, key, f"{key}{i}", served))
                 for key in ("a", "b", "c") for i in range(3)]
        await asyncio.gather(*tasks)
        return served

    # a0 found the loop free; then every key in turn, never one twice while another waits
    assert asyncio.run(main()) == ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2"]


def test_a_full_queue_is_a_rate_limit_refusal_for_that_key_only():
    async def main() -> tuple[list[BaseException | None], list[str]]:
        turns = LoopTurns(per_key=2)
        served: list[str] = []
        tasks = [asyncio.create_task(_request(turns, "a", f"a{i}", served)) for i in range(5)]
        other = asyncio.create_task(_request(turns, "b", "b0", served))
        results = await asyncio.gather(*tasks, other, return_exceptions=True)
        return list(results), served

    results, served = asyncio.run(main())
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 2 and all(isinstance(r, QueueFull) and isinstance(r, RateLimited) for r in refused)
    assert refused[0].retry_after_s == 1
    assert str(refused[0]) == "too many requests queued for this API key (at most 2 waiting)"
    assert "b0" in served and len(served) == 4  # a0 at once, a1 and a2 queued, b0 queued beside them


def test_unlimited_queue_with_per_key_zero():
    async def main() -> list[str]:
        turns = LoopTurns(per_key=0)
        served: list[str] = []
        await asyncio.gather(*(_request(turns, "a", f"a{i}", served) for i in range(300)))
        return served

    assert len(asyncio.run(main())) == 300


def test_a_request_that_gives_up_while_waiting_leaves_the_queue():
    async def main() -> tuple[list[str], int]:
        turns = LoopTurns(per_key=10)
        served: list[str] = []
        first = asyncio.create_task(_request(turns, "a", "a0", served))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(_request(turns, "b", "b0", served))
        later = asyncio.create_task(_request(turns, "c", "c0", served))
        await asyncio.sleep(0)
        assert turns.waiting() == 2
        waiting.cancel()
        await asyncio.gather(first, later)
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return served, turns.waiting()

    served, left = asyncio.run(main())
    assert served == ["a0", "c0"] and left == 0


def test_a_request_cancelled_after_it_was_given_the_turn_passes_it_on():
    async def main() -> list[str]:
        turns = LoopTurns(per_key=10)
        served: list[str] = []
        first = asyncio.create_task(_request(turns, "a", "a0", served))
        await asyncio.sleep(0)
        given = asyncio.create_task(_request(turns, "b", "b0", served))
        after = asyncio.create_task(_request(turns, "c", "c0", served))
        await asyncio.sleep(0)
        await first
        while turns.waiting("b"):  # a0's turn passes in a later iteration of the loop: to b0 ...
            await asyncio.sleep(0)
        given.cancel()  # ... which gives up before its step runs
        await asyncio.wait_for(after, 30)  # (a guard against a hang: c0 would wait for a turn never passed on)
        with pytest.raises(asyncio.CancelledError):
            await given
        return served

    assert asyncio.run(main()) == ["a0", "c0"]


def test_uncontended_requests_go_straight_on():
    async def main() -> int:
        turns = LoopTurns(per_key=10)
        served: list[str] = []
        for i in range(20):  # one after another: never a queue
            await _request(turns, "a", f"a{i}", served)
            await asyncio.sleep(0.001)
        return turns.queued

    assert asyncio.run(main()) == 0
