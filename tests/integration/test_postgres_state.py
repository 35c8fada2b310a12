"""The deployment state store in PostgreSQL (API keys, values, leases), shared by two independent opens of one
database as two server processes share it; and chosen by the ``memroute_state_store`` hook for a postgres
primary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import memroute
from memroute.errors import AuthenticationError, ConflictError, NotFoundError
from memroute_builtins.backends.postgres.backend import PostgresBackend, PostgresSettings
from memroute_builtins.backends.postgres.state import PostgresStateStore
from tests.servers.postgres import PostgresServer


@pytest.fixture
def stores(postgres_server: PostgresServer, schema: str) -> Iterator[tuple[PostgresStateStore, PostgresStateStore]]:
    backends = [PostgresBackend(f"p{i}", PostgresSettings(dsn=postgres_server.dsn(), schema=schema, pool_max_size=2))
                for i in range(2)]
    for backend in backends:
        backend.initialize()
    one, two = (PostgresStateStore(b.db, b.schema) for b in backends)
    yield one, two
    for store, backend in zip((one, two), backends, strict=True):
        store.close()
        backend.close()


def test_secret_is_stored_only_as_its_hash(stores, postgres_server: PostgresServer, schema: str) -> None:
    import psycopg

    one, _ = stores
    key, secret = one.keys.create("app", scopes="read,write")
    with psycopg.connect(postgres_server.dsn()) as raw:
        dumped = str(raw.execute(f'SELECT * FROM "{schema}".api_keys').fetchall())
    assert secret not in dumped and key.id in dumped


def test_a_key_revoked_in_one_process_fails_at_once_in_the_other(stores) -> None:
    one, two = stores
    key, secret = one.keys.create("app", scopes="read", tenant="t1")
    assert two.keys.authenticate(secret).tenant == "t1"
    one.keys.revoke(key.id)
    with pytest.raises(AuthenticationError, match="revoked"):
        two.keys.authenticate(secret)
    assert one.keys.revoke(key.id).revoked  # idempotent
    assert [k.id for k in two.keys.list()] == [key.id] and two.keys.list(include_revoked=False) == []


def test_rotate_keeps_name_scopes_and_tenant(stores) -> None:
    one, two = stores
    key, secret = one.keys.create("app", scopes="admin")
    new, new_secret = one.keys.rotate(key.id)
    assert (new.name, new.scopes, new.tenant) == (key.name, key.scopes, key.tenant) and new.id != key.id
    assert two.keys.authenticate(new_secret).id == new.id
    with pytest.raises(AuthenticationError):
        two.keys.authenticate(secret)
    with pytest.raises(ConflictError):
        one.keys.rotate(key.id)
    with pytest.raises(NotFoundError):
        one.keys.rotate("key_nope")
    assert two.keys.get("key_nope") is None and two.keys.get(new.id).tenant == new.tenant


def test_last_used_is_recorded(stores) -> None:
    one, two = stores
    key, secret = one.keys.create("app", scopes="read")
    one.keys.authenticate(secret)
    assert two.keys.get(key.id).last_used_at is not None


def test_values_and_leases_are_shared(stores) -> None:
    one, two = stores
    one.put_value("settings", "memory", {"max_tokens": 5, "nested": [1, "two"]})
    assert two.get_value("settings", "memory") == {"max_tokens": 5, "nested": [1, "two"]}
    assert two.get_value("settings", "nothing") is None
    assert one.try_lease("prune", "host:1", 60)
    assert not two.try_lease("prune", "host:2", 60)
    assert one.try_lease("prune", "host:1", 60)  # renewal
    one.release_lease("prune", "host:1")
    assert two.try_lease("prune", "host:2", 60)
    assert one.try_lease("expired", "a", -1) and two.try_lease("expired", "b", 60)  # an expired lease is free
    one.ping()


def test_concurrent_updates_of_one_value_serialise(stores) -> None:
    """Two stores (two processes' pools) update one value at the same instant: the second waits on the
    advisory lock and sees the first one's change, so neither is lost, even when no value was stored yet."""
    import threading
    import time

    one, two = stores
    first_has_read = threading.Event()

    def slow(current):
        first_has_read.set()
        time.sleep(0.3)
        return {**(current or {}), "a": 1}

    worker = threading.Thread(target=one.update_value, args=("settings", "memory", slow))
    worker.start()
    assert first_has_read.wait(10)
    assert two.update_value("settings", "memory", lambda current: {**(current or {}), "b": 2}) == {"a": 1, "b": 2}
    worker.join(10)
    assert one.get_value("settings", "memory") == {"a": 1, "b": 2}

    def broken(_current):
        raise ValueError("no")

    with pytest.raises(ValueError):
        one.update_value("settings", "memory", broken)
    assert two.get_value("settings", "memory") == {"a": 1, "b": 2}


def test_a_postgres_primary_keeps_the_deployments_keys(postgres_server: PostgresServer, schema: str) -> None:
    config = {"backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}},
              "embedding": {"source": "none"}}
    with memroute.open(config, data_dir="one") as first, memroute.open(config, data_dir="two") as second:
        assert first.state.describe()["type"] == "postgres"
        key, secret = first.keys.create("app", scopes="read,write", tenant="shop")
        assert second.keys.authenticate(secret).tenant == "shop"  # another data dir: only the database is shared
        first.update_memory_settings({"maxTokens": 321})
        assert second.memory_settings().max_tokens == 321
        second.keys.revoke(key.id)
        with pytest.raises(AuthenticationError):
            first.keys.authenticate(secret)


def test_a_keys_concurrency_cap_is_shared_through_postgres_and_a_dead_holders_lease_expires(stores) -> None:
    from memroute.deployment.fair_use import FairUse, RateLimited

    class Clock:
        now = 1_800_000_000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    one, two = (FairUse(store, requests_per_minute=0, concurrent_requests=2, lease_s=30, holder=name, clock=clock)
                for store, name in zip(stores, ("one", "two"), strict=True))
    assert one.admit("key_a") and two.admit("key_a")
    with pytest.raises(RateLimited, match="at most 2 at once"):
        one.admit("key_a")  # two in flight across the two processes
    assert one.admit("key_b")  # another key: slots of its own
    clock.now += 31  # "two" died holding its slot: no renewal, no release
    one.renew()  # "one" renews its own lease, and its in-flight request keeps its slot
    assert one.admit("key_a")  # two's expired lease counts no more
    with pytest.raises(RateLimited):
        one.admit("key_a")
