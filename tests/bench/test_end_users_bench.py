"""What naming an end user costs a request (issue 30): the same search over REST by a plain key on its tenant and
by an app key on one end user's, with equal data, interleaved in one run on one server. A ratio, not a timing."""

from __future__ import annotations

import statistics
import time

import pytest

from tests.servers.memroute_server import MemrouteServer

pytestmark = pytest.mark.bench

MEMORIES = 500
ROUNDS = 300


def test_an_app_key_costs_what_a_plain_key_costs(tmp_path):
    with MemrouteServer(tmp_path, config={"embedding": {"source": "static"}}) as server:
        _key, app = server.create_key("shop", tenant="shop", end_users=True)
        for owner in ("tenant-a", "shop/u1"):
            for i in range(MEMORIES):
                server.mem.add(api_key_id=owner, content=f"fact {i}: the user likes topic {i % 37} and city {i % 11}")
        assert server.mem.flush(timeout=120)
        plain = server.client(server.tenant_a)
        enduser = server.client(app)
        enduser.headers["x-memroute-user"] = "u1"
        timings: dict[str, list[float]] = {"plain": [], "end user": []}
        for i in range(ROUNDS):  # interleaved: both under the same machine state
            body = {"query": f"which topic {i % 37} in city {i % 11}", "limit": 10}
            for name, client in (("plain", plain), ("end user", enduser)):
                started = time.perf_counter()
                response = client.post("/api/memory/search", json=body)
                timings[name].append(time.perf_counter() - started)
                assert response.status_code == 200 and response.json()["hits"]
        p50 = {name: statistics.median(values) * 1000 for name, values in timings.items()}
        ratio = p50["end user"] / p50["plain"]
        print(f"search p50: plain key {p50['plain']:.2f} ms, app key + end user {p50['end user']:.2f} ms, "
              f"ratio {ratio:.3f}")
        assert ratio < 1.25, p50
