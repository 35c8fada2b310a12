"""Concurrent POST /api/memory over real HTTP, two tenants at once: the adds that arrive together are written
in one batch by the service's group commit (memroute.deployment.group_commit), and every response is still its own
request's memory, in its own tenant; a bad request among them is its own 4xx and fails nobody else."""

from __future__ import annotations

import threading


def test_concurrent_adds_of_two_tenants_each_get_their_own_memory(memroute_server):
    clients = {"tenant-a": memroute_server.client(memroute_server.tenant_a),
               "tenant-b": memroute_server.client(memroute_server.tenant_b)}
    results: dict[tuple[str, int], object] = {}

    def write(tenant, n):
        client = clients[tenant]
        for i in range(6):
            body = {"content": f"{tenant} writer {n} note {i}", "key": f"note:{n}:{i}"}
            if n == 3 and i == 2:
                body = {"content": ""}  # bad input, in the middle of the others
            response = client.post("/api/memory", json=body)
            results[(tenant, n * 10 + i)] = (response.status_code, response.json())

    # one connection (client) per tenant is shared by its threads: httpx pools a connection per request
    threads = [threading.Thread(target=write, args=(tenant, n)) for tenant in clients for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert len(results) == 48
        for (tenant, number), (status, body) in results.items():
            if number == 32:
                assert status in (400, 422) and "content" in str(body["error"]), body
                continue
            assert status == 201, body
            memory = body["memory"]
            assert memory["apiKeyId"] == tenant and memory["key"] == f"note:{number // 10}:{number % 10}"
            assert memory["content"] == f"{tenant} writer {number // 10} note {number % 10}"
        for tenant, client in clients.items():
            page = client.get("/api/memory", params={"limit": 100}).json()
            assert page["total"] == 23 and {m["apiKeyId"] for m in page["data"]} == {tenant}
        # engine-status shows how the server's group commit batched them (the bad add never entered a batch)
        with memroute_server.client(memroute_server.admin) as admin:  # deployment-wide: an admin's view
            batching = admin.get("/api/memory/engine-status").json()["group_commit"]
        assert batching["items"] == 46 and 1 <= batching["batches"] <= 46 and batching["waiting"] == 0
        assert batching["mean_batch"] == round(46 / batching["batches"], 2)
        assert 1 <= batching["last_batch"] <= batching["largest_batch"] <= batching["max_batch"] == 64
    finally:
        for client in clients.values():
            client.close()
