"""Several worker processes on one SQLite deployment, and scheduled maintenance run by one process at a time."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import memroute
from memroute.config.settings import ServerSettings
from memroute.models import utcnow
from memroute.server.maintenance import Maintenance
from tests.servers.memroute_server import MemrouteServer


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def test_two_worker_processes_share_keys_settings_and_memories(tmp_path):
    with MemrouteServer(tmp_path, workers=2) as server:
        assert len(_children(server._process.pid)) >= 2, server.log_text()
        a = server.client(server.tenant_a)
        admin = server.client(server.admin)
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda i: a.post("/api/memory", json={"content": f"fact {i}", "key": f"k{i}"})
                                     .status_code, range(40)))
        assert statuses == [201] * 40
        assert all(a.get("/api/memory").json()["total"] == 40 for _ in range(10))
        assert admin.put("/api/settings/memory", json={"maxTokens": 77}).status_code == 200
        assert all(a.get("/api/settings/memory").json()["maxTokens"] == 77 for _ in range(10))
        server._keystore().revoke(server.keys["tenant_a"].id)  # revoked by a third process
        assert [a.get("/api/memory").status_code for _ in range(10)] == [401] * 10
        a.close()
        admin.close()


def test_scheduled_prune_runs_and_engine_status_shows_it(tmp_path):
    config = {"server": {"maintenance_interval_s": 0.2, "maintenance_first_delay_s": 0}}
    with MemrouteServer(tmp_path, config=config) as server, server.client(server.tenant_a) as a:
        expired = server.mem.add(api_key_id="tenant-a", content="stale", key="stale",
                                 expires_at=utcnow() + timedelta(milliseconds=200))
        kept = a.post("/api/memory", json={"content": "fresh", "key": "fresh"}).json()["id"]
        time.sleep(0.3)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            ids = [m["id"] for m in a.get("/api/memory").json()["data"]]
            if expired.id not in ids:
                break
            time.sleep(0.1)
        assert ids == [kept]
        with server.client(server.admin) as admin:  # deployment-wide: an admin's view
            prune = admin.get("/api/memory/engine-status").json()["maintenance"]["prune"]
        assert prune["ok"] is True and prune["ran_at"] and prune["interval_s"] == 0.2


def test_only_one_process_runs_a_due_job(tmp_path):
    settings = ServerSettings(maintenance_interval_s=3600, maintenance_first_delay_s=0)
    with memroute.open(data_dir=str(tmp_path / "d")) as one, memroute.open(data_dir=str(tmp_path / "d")) as two:
        first, second = Maintenance(one, settings), Maintenance(two, settings)
        with ThreadPoolExecutor(2) as pool:
            ran = list(pool.map(lambda m: m.run_if_due("prune", 3600), [first, second]))
        assert sorted(ran) == [False, True]
        assert not first.run_if_due("prune", 3600) and not second.run_if_due("prune", 3600)  # not due again
        assert second.last_runs()["prune"]["ok"] is True


def test_no_job_runs_at_start_up_by_default(tmp_path):
    settings = ServerSettings()  # maintenance_first_delay_s: an hour
    with memroute.open(data_dir=str(tmp_path / "d"), embedding={"source": "none"}) as mem:
        expired = mem.add(api_key_id="tenant-a", content="expired already", expires_at="2020-01-01T00:00:00Z")
        scheduler = Maintenance(mem, settings)
        assert scheduler.jobs() == {"prune": 3600.0}
        assert scheduler.run_if_due("prune", 3600) is False  # never run: yet not before the first delay
        assert scheduler.last_runs()["prune"]["ran_at"] is None
        assert mem.get(expired.id, api_key_id="tenant-a") is not None
        soon = Maintenance(mem, ServerSettings(maintenance_first_delay_s=0))
        assert soon.run_if_due("prune", 3600) is True and mem.get(expired.id, api_key_id="tenant-a") is None


def test_the_decay_sweep_is_scheduled_only_when_enabled(tmp_path):
    settings = ServerSettings(maintenance_interval_s=0)
    with memroute.open(data_dir=str(tmp_path / "d")) as mem:
        assert Maintenance(mem, settings).jobs() == {}
    with memroute.open(data_dir=str(tmp_path / "e"),
                       memory={"typed_decay_enabled": True, "typed_decay_sweep_interval": 60}) as mem:
        assert Maintenance(mem, settings).jobs() == {"decay": 60.0}


def test_the_http_bench_runs_end_to_end(tmp_path):
    from memroute.bench.http import run_http_bench

    report = run_http_bench(memories=40, searches=5, adds=16, clients=4, data_dir=tmp_path / "bench")
    assert report["search"]["http"]["p50_ms"] > 0 and report["search"]["in_process"]["p50_ms"] > 0
    assert {"ratio_p50", "budget_ms", "target_met", "target_met_by"} <= set(report["search"])
    for client in ("http", "raw_client"):  # httpx and the raw socket client, each with CPU per search
        measured = report["search"][client]
        assert measured["p95_ms"] >= measured["p50_ms"] > 0
        # /proc counts the server's CPU in clock ticks (10 ms): five small searches can take less than one.
        assert measured["cpu_ms"]["server"] >= 0 and measured["cpu_ms"]["client"] >= 0
    assert report["search"]["in_process"]["cpu_ms"] > 0
    interleaved = report["search"]["interleaved"]  # the same searches in turn: in-process, httpx, raw
    assert {"in_process", "http", "raw_client", "budget_ms", "ratio_p50"} <= set(interleaved)
    assert all(interleaved[kind]["p95_ms"] >= interleaved[kind]["p50_ms"] > 0
               for kind in ("in_process", "http", "raw_client"))
    assert report["search"]["target_met"] == (interleaved["http"]["p50_ms"] <= interleaved["budget_ms"])
    assert isinstance(report["search"]["target_met_back_to_back"], bool)
    cold = report["search"]["cold_call_factor"]
    assert cold["after_pause_us"] > 0 and cold["back_to_back_us"] > 0 and cold["factor"] > 0
    assert report["add"]["http_4_clients"]["per_s"] > 0 and "ratio_concurrent_vs_one" in report["add"]


def test_the_multi_worker_socket_says_tcp_so_responses_are_not_held_by_nagle():
    # asyncio sets TCP_NODELAY only on accepted sockets whose listener has proto=IPPROTO_TCP; uvicorn's own
    # multi-worker socket has proto 0 and made every keep-alive request wait ~40 ms for a delayed ACK.
    import socket

    from memroute.cli.tcp import TcpConfig

    config = TcpConfig("memroute.server.factory:app_from_env", factory=True, host="127.0.0.1", port=0, workers=2)
    sock = config.bind_socket()
    try:
        assert sock.proto == socket.IPPROTO_TCP and sock.get_inheritable()
        sock.listen(1)
        with socket.create_connection(sock.getsockname()), sock.accept()[0] as accepted:
            assert accepted.proto == socket.IPPROTO_TCP  # what asyncio checks before setting TCP_NODELAY
    finally:
        sock.close()


def test_a_serve_process_is_warm_and_frozen_before_its_first_request(tmp_path):
    """``memroute serve``'s app factory loads the embedding model before serving (the first search no longer waits
    for it) and freezes what start-up left alive (a full collection then skips it). Run in a fresh process: the
    freeze is process-wide."""
    import json
    import subprocess
    import sys

    config = tmp_path / "memroute.toml"
    config.write_text(f'data_dir = "{tmp_path.as_posix()}"\n', encoding="utf-8")
    code = ("import gc, json\n"
            "from memroute.embedding.cache import uncached\n"
            "from memroute.server.factory import app_from_env\n"
            "app = app_from_env()\n"
            "mem = app.state.memroute\n"
            "print(json.dumps({'frozen': gc.get_freeze_count(), 'loaded': uncached(mem._retrieval.embedder).loaded}))\n"
            "mem.close()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MEMROUTE_CONFIG": str(config)}, check=False)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["loaded"] is True
    assert facts["frozen"] > 10_000  # modules, classes, the model's objects
