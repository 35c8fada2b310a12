"""Group commit (memroute.deployment.group_commit): concurrent calls coalesce into batches, each caller gets exactly its
own outcome, a batch's own failure is every caller's (each its own copy), close writes what is queued.
Batches are forced deterministically: the first batch waits until the others are queued behind it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from memroute.deployment.group_commit import GroupCommit
from memroute.errors import BackendUnavailableError, ValidationError


def _wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


class Recorder:
    """A write_batch that records its batches; the first batch waits until ``hold`` items queue behind it."""

    def __init__(self, hold=0, fail_item=None):
        self.batches: list[list[str]] = []
        self.hold = hold
        self.fail_item = fail_item
        self.commit: GroupCommit | None = None

    def __call__(self, items):
        if not self.batches and self.hold:
            _wait_for(lambda: self.commit.waiting >= self.hold)
        self.batches.append(list(items))
        return [ValidationError(f"{item}: refused", [("item", "bad")]) if item == self.fail_item else item.upper()
                for item in items]


def _rig(**kwargs):
    recorder = Recorder(**kwargs)
    commit = GroupCommit(recorder)
    recorder.commit = commit
    return recorder, commit


def _run_threads(commit, items):
    results: dict[str, object] = {}

    def call(item):
        try:
            results[item] = commit.call(item)
        except Exception as exc:
            results[item] = exc

    threads = [threading.Thread(target=call, args=(item,)) for item in items]
    threads[0].start()
    _wait_for(lambda: commit._writing and commit.waiting == 0)  # the first caller leads: it took its batch
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


def test_a_lone_call_is_a_batch_of_one_at_once():
    recorder, commit = _rig()
    assert commit.call("a") == "A"
    assert commit.call("b") == "B"
    assert recorder.batches == [["a"], ["b"]]
    assert (commit.batches, commit.items) == (2, 2)


def test_calls_that_arrive_while_a_batch_is_written_go_in_the_next_one():
    recorder, commit = _rig(hold=7)
    items = [f"item{i}" for i in range(8)]
    results = _run_threads(commit, items)
    assert results == {item: item.upper() for item in items}
    assert recorder.batches[0] == ["item0"]
    assert sorted(recorder.batches[1]) == sorted(items[1:])  # one batch for the seven that queued
    assert (commit.batches, commit.items) == (2, 8)
    assert commit.counters() == {"batches": 2, "items": 8, "mean_batch": 4.0, "last_batch": 7, "largest_batch": 7,
                                 "max_batch": 64, "waiting": 0}


def test_each_caller_gets_its_own_error_and_the_others_their_results():
    _recorder, commit = _rig(hold=3, fail_item="item2")
    results = _run_threads(commit, ["item0", "item1", "item2", "item3"])
    assert isinstance(results["item2"], ValidationError) and "item2: refused" in str(results["item2"])
    assert {k: v for k, v in results.items() if k != "item2"} == {"item0": "ITEM0", "item1": "ITEM1",
                                                                  "item3": "ITEM3"}


def test_a_failing_batch_is_every_callers_error_each_with_its_own_copy():
    holder = {}

    def write(items):
        if len(items) == 1 and items[0] == "first":
            _wait_for(lambda: holder["commit"].waiting >= 3)
            return ["FIRST"]
        raise BackendUnavailableError("disk gone")

    commit = GroupCommit(write)
    holder["commit"] = commit
    results = _run_threads(commit, ["first", "x", "y", "z"])
    assert results["first"] == "FIRST"
    errors = [results[k] for k in ("x", "y", "z")]
    assert all(isinstance(e, BackendUnavailableError) and "disk gone" in str(e) for e in errors)
    assert len({id(e) for e in errors}) == 3, "one exception object raised in several threads"
    assert len({id(e.__cause__) for e in errors}) == 1  # each chained to the one original


def test_max_batch_caps_a_batch():
    recorder = Recorder(hold=5)
    commit = GroupCommit(recorder, max_batch=2)
    recorder.commit = commit
    results = _run_threads(commit, [f"i{n}" for n in range(6)])
    assert len(results) == 6 and all(v == k.upper() for k, v in results.items())
    assert [len(b) for b in recorder.batches] == [1, 2, 2, 1]
    assert commit.counters() == {"batches": 4, "items": 6, "mean_batch": 1.5, "last_batch": 1, "largest_batch": 2,
                                 "max_batch": 2, "waiting": 0}
    assert GroupCommit(recorder).counters()["mean_batch"] == 0.0  # nothing written yet


def test_submit_resolves_futures_from_the_writer_thread_without_blocking_the_loop():
    recorder, commit = _rig()

    async def main():
        futures = [commit.submit(f"s{i}") for i in range(20)]  # queued in one go: the loop never waits
        return await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))

    assert asyncio.run(main()) == [f"S{i}" for i in range(20)]
    assert sum(len(b) for b in recorder.batches) == 20
    assert len(recorder.batches) < 20  # the loop queued faster than the writer wrote: batches formed
    commit.close(5)


def test_submitted_and_called_items_share_batches():
    recorder, commit = _rig(hold=3)
    leader = threading.Thread(target=commit.call, args=("t0",))
    leader.start()
    _wait_for(lambda: commit._writing and commit.waiting == 0)
    futures = [commit.submit(f"s{i}") for i in range(3)]
    assert [f.result(10) for f in futures] == ["S0", "S1", "S2"]
    leader.join(10)
    assert recorder.batches == [["t0"], ["s0", "s1", "s2"]]
    commit.close(5)


def test_a_submitted_items_error_is_its_futures():
    _recorder, commit = _rig(fail_item="bad")
    good, bad = commit.submit("good"), commit.submit("bad")
    assert good.result(10) == "GOOD"
    with pytest.raises(ValidationError, match="bad: refused"):
        bad.result(10)
    commit.close(5)


def test_close_writes_what_is_queued_then_refuses():
    _recorder, commit = _rig()
    futures = [commit.submit(f"q{i}") for i in range(5)]
    commit.close(10)
    assert [f.result(0) for f in futures] == [f"Q{i}" for i in range(5)]
    assert commit._writer is not None and not commit._writer.is_alive()
    with pytest.raises(BackendUnavailableError, match="closed"):
        commit.call("late")
    with pytest.raises(BackendUnavailableError, match="closed"):
        commit.submit("late")
