"""The manager's per-backend call runner: results, errors, and no late execution of a cancelled call."""

from __future__ import annotations

import threading

import pytest

from memroute.routing.runner import BackendRunner


def test_results_and_errors_come_back():
    runner = BackendRunner("t", size=2)
    assert runner.submit(lambda a, b: a + b, (1, 2)).result(5) == 3
    with pytest.raises(ZeroDivisionError):
        runner.submit(lambda: 1 / 0, ()).result(5)
    runner.shutdown()


def test_a_call_cancelled_while_queued_never_runs():
    runner = BackendRunner("t", size=1)
    gate = threading.Event()
    ran = []
    blocker = runner.submit(gate.wait, (5,))
    queued = runner.submit(ran.append, ("late",))
    assert queued.cancel()  # the caller gave up (its timeout) before a worker picked it up
    gate.set()
    assert blocker.result(5) is True
    assert runner.submit(ran.append, ("next",)).result(5) is None
    assert ran == ["next"]
    runner.shutdown()
