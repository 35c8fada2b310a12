"""Two ``memroute serve`` processes in front of one PostgreSQL, over real HTTP: what one writes the other reads
at once, a key revoked through one is refused by the other, a process killed -9 under load loses nothing it
acknowledged, and a PostgreSQL restart mid-run gives clear errors and then recovers without restarting memroute.
Each server is a separate process with its own data directory: only the database is shared."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.servers.memroute_server import MemrouteServer
from tests.servers.postgres import PostgresServer, fresh_schema, wait_until_ready


@pytest.fixture(scope="module")
def fleet(postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[tuple[MemrouteServer, MemrouteServer]]:
    """Two server processes for the whole module (starting one costs seconds). The kill -9 test runs last."""
    schema = fresh_schema(postgres_server)
    tmp_path = tmp_path_factory.mktemp("fleet")
    config = {
        "backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(), "schema": schema,
                                                 "pool_timeout_s": 1.0, "connect_timeout_s": 1.0}},
        "embedding": {"source": "none"},
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = MemrouteServer(tmp_path / "a", config=config, workers=1)
    second = MemrouteServer(tmp_path / "b", config=config, workers=1, keys=False)
    try:
        first.start()
        second.start()
        second.keys, second.secrets = first.keys, first.secrets  # one deployment: the same keys
        yield first, second
    finally:
        first.stop()
        second.stop()
        postgres_server.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', "memroute")


def test_a_write_through_one_server_is_read_through_the_other_at_once(fleet) -> None:
    one, two = fleet
    with one.client(one.tenant_a) as a1, two.client(one.tenant_a) as a2, two.client(one.tenant_b) as b2:
        created = a1.post("/api/memory", json={"content": "I deploy memroute on PostgreSQL", "key": "deploy"})
        # (the first write of the module: the other tests' memories are not in this tenant's search yet)
        assert created.status_code == 201, created.text
        memory_id = created.json()["id"]
        got = a2.get(f"/api/memory/{memory_id}")
        assert got.status_code == 200 and got.json()["memory"]["content"] == "I deploy memroute on PostgreSQL"
        found = a2.post("/api/memory/search", json={"query": "deploy PostgreSQL"})
        assert [h["memory"]["id"] for h in found.json()["hits"]] == [memory_id]
        assert b2.get(f"/api/memory/{memory_id}").status_code == 404  # another tenant: as if missing
        updated = a2.put(f"/api/memory/{memory_id}", json={"content": "I deploy memroute on PostgreSQL 18"})
        assert updated.status_code == 200, updated.text
        assert a1.get(f"/api/memory/{memory_id}").json()["memory"]["content"].endswith("18")


def test_a_key_revoked_through_one_server_is_refused_by_the_other(fleet) -> None:
    one, two = fleet
    with one.client(one.admin) as admin1:
        made = admin1.post("/api/keys", json={"name": "temp", "scopes": ["read"], "tenant": "tenant-a"})
        assert made.status_code == 201, made.text
        key_id, secret = made.json()["key"]["id"], made.json()["secret"]
        with two.client(secret) as temp2:
            assert temp2.get("/api/memory").status_code == 200
            assert admin1.post(f"/api/keys/{key_id}/revoke").status_code == 200
            refused = temp2.get("/api/memory")
            assert refused.status_code == 401, refused.text


def test_a_postgres_restart_mid_run_is_a_clear_error_then_recovers(fleet, postgres_server: PostgresServer) -> None:
    one, two = fleet
    with one.client(one.tenant_a) as a1, two.client(one.tenant_a) as a2:
        before = a1.post("/api/memory", json={"content": "before the restart", "key": "before"}).json()["id"]
        postgres_server.stop("fast")
        try:
            down = a2.get(f"/api/memory/{before}")
            assert down.status_code == 503, down.text
            assert "PostgreSQL" in down.text or "unavailable" in down.text.lower()
            assert "Traceback" not in down.text
        finally:
            postgres_server.start()
            wait_until_ready(postgres_server)
        # Neither server was restarted: both answer again.
        assert a2.get(f"/api/memory/{before}").status_code == 200
        after = a2.post("/api/memory", json={"content": "after the restart", "key": "after"})
        assert after.status_code == 201, after.text
        assert a1.get(f"/api/memory/{after.json()['id']}").status_code == 200


def test_a_server_killed_under_load_loses_nothing_it_acknowledged(fleet) -> None:
    one, two = fleet
    acknowledged: list[str] = []
    stop = threading.Event()

    def write(worker: int) -> None:
        with one.client(one.tenant_a, timeout=5) as client:
            for i in range(10_000):
                if stop.is_set():
                    return
                try:
                    response = client.post("/api/memory",
                                           json={"content": f"load {worker}-{i}", "key": f"w{worker}-{i}"})
                except httpx.HTTPError:
                    return  # the server died mid-request: that write was never acknowledged
                if response.status_code == 201:
                    acknowledged.append(response.json()["id"])

    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in writers:
        thread.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 40 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert one._process is not None
    os.kill(one._process.pid, signal.SIGKILL)
    one._process.wait(10)
    stop.set()
    for thread in writers:
        thread.join(10)
    assert len(acknowledged) >= 40
    with two.client(one.tenant_a) as a2:
        missing = [mid for mid in acknowledged if a2.get(f"/api/memory/{mid}").status_code != 200]
        assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged writes were lost"
        assert a2.get("/api/memory", params={"limit": 1}).json()["total"] >= len(acknowledged)
