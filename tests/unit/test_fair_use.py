"""memroute.deployment.fair_use over the real SQLite state store: a key's rate is shared by every process of the
deployment (two ``FairUse`` objects on one ``state.db`` stand for two server processes, each with its own
connection), a new minute starts a new budget, the concurrency cap counts requests in flight, a key's own limits
override the defaults in every process, and bad limits are a ValidationError. The clock is a test clock."""

from __future__ import annotations

import pytest

from memroute.deployment.fair_use import FairUse, KeyLimits, RateLimited
from memroute.deployment.state import SqliteStateStore
from memroute.errors import ValidationError


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stores(tmp_path):
    opened = [SqliteStateStore(tmp_path / "state.db"), SqliteStateStore(tmp_path / "state.db")]
    yield opened
    for store in opened:
        store.close()


def _admitted(fair_use: FairUse, key: str, attempts: int) -> int:
    admitted = 0
    for _ in range(attempts):
        try:
            fair_use.admit(key)
        except RateLimited:
            continue
        fair_use.release(key)
        admitted += 1
    return admitted


def test_the_rate_is_shared_by_every_process_and_resets_each_minute(stores):
    clock = Clock()
    one, two = (FairUse(store, requests_per_minute=100, concurrent_requests=0, clock=clock) for store in stores)
    total = _admitted(one, "key_a", 70) + _admitted(two, "key_a", 70)
    assert total == 100  # never more than the key's minute, however the two processes split it
    with pytest.raises(RateLimited) as refused:
        one.admit("key_a")
    assert 1 <= refused.value.retry_after_s <= 60
    assert _admitted(one, "key_b", 10) == 10  # another key has a budget of its own
    clock.now += 60
    assert _admitted(two, "key_a", 10) == 10


def test_the_concurrency_cap_counts_requests_in_flight(stores):
    fair_use = FairUse(stores[0], requests_per_minute=0, concurrent_requests=2)
    fair_use.admit("key_a")
    fair_use.admit("key_a")
    with pytest.raises(RateLimited):
        fair_use.admit("key_a")
    fair_use.admit("key_b")  # another key is not held up
    fair_use.release("key_a")
    fair_use.admit("key_a")
    assert fair_use.in_flight("key_a") == 2 and fair_use.in_flight("key_b") == 1


def test_a_keys_own_limits_apply_in_every_process(stores):
    clock = Clock()
    one = FairUse(stores[0], requests_per_minute=1000, concurrent_requests=0, clock=clock)
    one.set_limits("key_a", KeyLimits(requests_per_minute=3))
    two = FairUse(stores[1], requests_per_minute=1000, concurrent_requests=0, clock=clock)
    assert two.effective("key_a") == KeyLimits(requests_per_minute=3, concurrent_requests=0)
    assert two.effective("key_b").requests_per_minute == 1000
    assert _admitted(two, "key_a", 5) == 3
    one.set_limits("key_a", KeyLimits(requests_per_minute=0))  # 0: unlimited
    assert one.effective("key_a").requests_per_minute == 0 and _admitted(one, "key_a", 50) == 50


@pytest.mark.parametrize("bad", [-1, 10**10, True, 2.5, "10"])
def test_bad_limits_are_a_validation_error(bad):
    with pytest.raises(ValidationError) as caught:
        KeyLimits(requests_per_minute=bad)
    assert caught.value.problems[0][0] == "requests_per_minute"


@pytest.mark.parametrize(("headers", "token"), [
    ([(b"authorization", b"Bearer mr_abc")], "mr_abc"),
    ([(b"authorization", b"bearer  mr_abc ")], "mr_abc"),
    ([(b"x-api-key", b"mr_xyz")], "mr_xyz"),
    ([(b"x-api-key", b"mr_xyz"), (b"authorization", b"Bearer mr_abc")], "mr_abc"),  # Authorization first
    ([(b"authorization", b"Basic dXNlcg==")], None),
    ([(b"authorization", b"Bearer ")], None),
    ([], None),
])
def test_the_gate_reads_the_key_the_routes_read(headers, token):
    from starlette.datastructures import Headers

    from memroute.errors import AuthenticationError
    from memroute.server.auth import token_from_headers
    from memroute.server.fair_use import _presented_token

    assert _presented_token({"headers": headers}) == token
    try:
        expected = token_from_headers(Headers(raw=headers))
    except AuthenticationError:
        expected = None
    assert expected == token


def test_admitting_without_the_store_defers_only_when_the_store_is_needed(stores):
    clock = Clock()
    fair_use = FairUse(stores[0], requests_per_minute=40, concurrent_requests=0, clock=clock)
    assert fair_use.admit("key_a", store=False) is False  # limits not read yet: nothing counted
    assert fair_use.in_flight("key_a") == 0
    assert fair_use.admit("key_a") is True  # reads the limits, claims 2 of the minute's 40 (5 %)
    fair_use.release("key_a")
    assert fair_use.admit("key_a", store=False) is True  # the second of the slice, from memory
    fair_use.release("key_a")
    assert fair_use.admit("key_a", store=False) is False  # the slice is spent: the store must be asked
    assert fair_use.in_flight("key_a") == 0
