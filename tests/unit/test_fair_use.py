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


# --- concurrency caps across processes: leases on a key's slots in the state store ------------------------------

def _two_processes(stores, clock, cap: int, lease_s: float = 30.0) -> tuple[FairUse, FairUse]:
    return tuple(FairUse(store, requests_per_minute=0, concurrent_requests=cap, lease_s=lease_s, holder=name,
                         clock=clock) for store, name in zip(stores, ("one", "two"), strict=True))


def test_the_concurrency_cap_is_shared_by_every_process(stores):
    clock = Clock()
    one, two = _two_processes(stores, clock, cap=3)
    assert one.admit("key_a") and one.admit("key_a")
    assert two.admit("key_a")
    with pytest.raises(RateLimited, match=r"too many requests in flight for this API key \(at most 3 at once\)"):
        two.admit("key_a")  # three in flight across the two processes
    assert two.admit("key_b")  # another key has slots of its own
    one.release("key_a")
    clock.now += 1  # past the refusal this process remembers
    with pytest.raises(RateLimited):
        two.admit("key_a")  # one still holds the slot it no longer uses ...
    one.renew()  # ... until its next renewal gives it back
    clock.now += 1
    assert two.admit("key_a")


def test_a_dead_process_leaks_its_slots_only_until_its_lease_expires(stores):
    clock = Clock()
    one, two = _two_processes(stores, clock, cap=2, lease_s=30)
    assert one.admit("key_a") and one.admit("key_a")  # then the process is killed: no release, no renewal
    with pytest.raises(RateLimited):
        two.admit("key_a")
    clock.now += 29
    with pytest.raises(RateLimited):
        two.admit("key_a")
    clock.now += 2  # the lease ran out
    assert two.admit("key_a") and two.admit("key_a")


def test_renewal_keeps_a_long_requests_slot(stores):
    clock = Clock()
    one, two = _two_processes(stores, clock, cap=1, lease_s=30)
    assert one.admit("key_a")  # a request that runs for a minute
    for _ in range(6):
        clock.now += 10
        one.renew()
        with pytest.raises(RateLimited):
            two.admit("key_a")
    one.release("key_a")
    one.renew()
    clock.now += 1
    assert two.admit("key_a")


def test_a_busy_key_claims_slots_ahead_instead_of_writing_the_store_per_request(stores):
    clock = Clock()
    one, _two = _two_processes(stores, clock, cap=64)
    assert one.admit("key_a")
    stored = stores[0].get_value("fair_use", "slots:key_a")
    assert stored["holders"]["one"]["slots"] == 5  # the one in flight and 64 // 16 more
    for _ in range(4):
        assert one.admit("key_a")
    assert stores[0].get_value("fair_use", "slots:key_a") == stored  # those four needed no write
    assert one.admit("key_a")  # the sixth claims again
    assert stores[0].get_value("fair_use", "slots:key_a")["holders"]["one"]["slots"] == 10


def test_giving_up_every_lease_frees_the_slots_at_once(stores):
    clock = Clock()
    one, two = _two_processes(stores, clock, cap=1)
    assert one.admit("key_a")
    one.release("key_a")
    one.release_all()  # a server shutting down
    assert two.admit("key_a")


def test_admitting_without_the_store_defers_a_slot_claim(stores):
    clock = Clock()
    one, _two = _two_processes(stores, clock, cap=4)
    one.effective("key_a")  # limits cached: only the slot claim needs the store
    assert one.admit("key_a", store=False) is False and one.in_flight("key_a") == 0
    assert one.admit("key_a") is True and one.in_flight("key_a") == 1
    one.release("key_a")
    assert one.admit("key_a", store=False) is True  # the slot is still this process's: no store needed
    assert one.admit("key_a", store=False) is False  # a second one in flight needs a claim (4 // 16 = none ahead)


def test_a_process_gives_back_the_slots_it_stops_using(stores):
    clock = Clock()
    one, two = _two_processes(stores, clock, cap=1)
    assert one.admit("key_a")
    assert one.release("key_a") is True  # it holds a slot nobody uses: give it back
    one.give_back("key_a")
    assert two.admit("key_a")  # a sequential client served by the other process next is not refused
    busy, _ = _two_processes(stores, clock, cap=64)
    for _ in range(3):
        assert busy.admit("key_b")
    assert busy.release("key_b") is False  # 5 held for 2 in flight: within the slack of 5 it keeps (64 // 16 + 1)
