"""A tenant key's reindex touches only its own tenant (issue 29, "Medium 5"), against the real server: a forced
reindex by tenant A re-embeds A's memories and none of B's, B's vectors stay in place, A's running job does not
refuse B's (each tenant has a job of its own, visible only to it), and only an admin key rebuilds the whole
deployment. Before, ``POST /api/memory/reindex {"force": true}`` with any write key dropped every tenant's
vectors and held the one deployment-wide lease (every other tenant got 409)."""

from __future__ import annotations

import time

import pytest


def _wait_done(client, params=None):
    deadline = time.monotonic() + 60
    while True:
        status = client.get("/api/memory/reindex", params=params or {}).json()
        if status["state"] != "running" or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def _vector_ids(server, tenant):
    server.mem.flush(timeout=60)
    return server.mem._retrieval.vector_store.ids(tenant)


@pytest.fixture
def filled(memroute_server):
    with memroute_server.client(memroute_server.tenant_a) as a, memroute_server.client(memroute_server.tenant_b) as b:
        for n in range(3):
            created = a.post("/api/memory", json={"content": f"I like tea number {n}", "key": f"tea:{n}"})
            assert created.status_code == 201
        for n in range(5):
            created = b.post("/api/memory", json={"content": f"I like coffee {n}", "key": f"coffee:{n}"})
            assert created.status_code == 201
    if not _vector_ids(memroute_server, "tenant-b"):
        pytest.skip("no vector store in this configuration")
    return memroute_server


def test_a_tenants_forced_reindex_rebuilds_only_its_own_vectors(filled):
    server = filled
    b_before = _vector_ids(server, "tenant-b")
    with server.client(server.tenant_a) as a:
        started = a.post("/api/memory/reindex", json={"force": True})
        assert started.status_code == 202 and started.json()["apiKeyId"] == "tenant-a"
        done = _wait_done(a)
    assert done["state"] == "done" and done["apiKeyId"] == "tenant-a"
    assert done["done"] == 3  # A's three memories, none of B's five
    assert _vector_ids(server, "tenant-b") == b_before and len(b_before) == 5
    assert len(_vector_ids(server, "tenant-a")) == 3


def test_a_tenant_may_not_reindex_another_tenant(filled):
    with filled.client(filled.tenant_a) as a:
        refused = a.post("/api/memory/reindex", json={"force": True, "apiKeyId": "tenant-b"})
    assert refused.status_code == 403


def test_one_tenants_running_reindex_does_not_block_another(filled):
    server = filled
    assert server.mem.state.try_lease("reindex:tenant-a", "a test holding tenant-a's job", ttl_s=60)
    try:
        with server.client(server.tenant_a) as a, server.client(server.tenant_b) as b:
            assert a.post("/api/memory/reindex", json={"force": True}).status_code == 409
            assert b.post("/api/memory/reindex", json={"force": True}).status_code == 202
            assert _wait_done(b)["state"] == "done"
            assert a.get("/api/memory/reindex").json()["state"] == "idle"  # B's job is not A's to see
    finally:
        server.mem.state.release_lease("reindex:tenant-a", "a test holding tenant-a's job")


def test_an_admin_key_reindexes_the_deployment_or_a_named_tenant(filled):
    with filled.client(filled.admin) as admin:
        assert admin.post("/api/memory/reindex", json={"force": True}).status_code == 202
        whole = _wait_done(admin)
        assert whole["apiKeyId"] is None and whole["done"] == 8
        assert admin.post("/api/memory/reindex", json={"apiKeyId": "tenant-b", "force": True}).status_code == 202
        one = _wait_done(admin, {"apiKeyId": "tenant-b"})
        assert one["apiKeyId"] == "tenant-b" and one["done"] == 5
