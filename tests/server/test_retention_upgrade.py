"""Retention never loses data by surprise: an existing database (schema 1, written under the old defaults, where
``retention_days = 30`` hid older memories and the server's scheduled prune deleted them soon after start-up)
opened by this memroute keeps every memory, and ``memroute serve`` with default settings deletes nothing, past
its scheduled prune's first run. A real ``memroute serve`` process over a socket; nothing mocked."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path

import apsw
import httpx

import memroute
from memroute.models import utcnow
from memroute_builtins.backends.sqlite.schema import _MIGRATIONS, format_ts
from tests.servers.memroute_server import MemrouteServer

# (tenant, content, age in days): a year-old allergy is the memory a user must never lose.
_ROWS = [("tenant-a", "Allergic to peanuts", 700), ("tenant-a", "Lives in Lisbon", 100),
         ("tenant-a", "Prefers green tea", 1), ("tenant-b", "Daughter is called Ana", 400),
         ("tenant-b", "Works at Acme", 45)]


def _old_database(path: Path) -> dict[str, str]:
    """A SQLite file as the previous memroute left it: schema version 1, memories written long ago. Returns
    content → id."""
    connection = apsw.Connection(str(path))
    connection.execute(_MIGRATIONS[1])
    connection.pragma("user_version", 1)
    ids = {}
    for tenant, content, days in _ROWS:
        moment = format_ts(utcnow() - timedelta(days=days))
        ids[content] = str(uuid.uuid4())
        connection.execute(
            "INSERT INTO memories(id, api_key_id, type, key, content, metadata, created_at, updated_at) "
            "VALUES (?, ?, 'factual', ?, ?, '{}', ?, ?)",
            (ids[content], tenant, f"note:{days}", content, moment, moment))
    connection.close()
    return ids


def _maintenance_ran(admin: httpx.Client, deadline_s: float = 60) -> dict:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        prune = admin.get("/api/memory/engine-status").json()["maintenance"].get("prune") or {}
        if prune.get("ran_at"):
            return prune
        time.sleep(0.2)
    raise AssertionError("the scheduled prune never ran")


def test_serve_with_default_settings_deletes_nothing_from_an_old_database(tmp_path):
    ids = _old_database(tmp_path / "old.db")
    config = {"backends": {"primary": "main", "main": {"type": "sqlite", "path": str(tmp_path / "old.db")}},
              # only the schedule is shortened (so the test need not wait an hour); memory settings are defaults
              "server": {"maintenance_interval_s": 0.5, "maintenance_first_delay_s": 1}}
    with MemrouteServer(tmp_path, config=config, workers=1) as server, server.client(server.admin) as admin, \
            server.client(server.tenant_a) as a, server.client(server.tenant_b) as b:
        prune = _maintenance_ran(admin)
        assert prune["ok"] is True and prune["result"]["deleted"] == 0 and prune["result"]["tenants"] == 0
        for client, tenant in ((a, "tenant-a"), (b, "tenant-b")):
            kept = {m["content"] for m in client.get("/api/memory").json()["data"]}
            assert kept == {content for owner, content, _ in _ROWS if owner == tenant}
        # no retrieval window by default: the two-year-old allergy is found, for its own tenant only
        hits = a.post("/api/memory/search", json={"query": "peanuts allergy"}).json()["hits"]
        assert [h["memory"]["id"] for h in hits][:1] == [ids["Allergic to peanuts"]]
        b_hits = b.post("/api/memory/search", json={"query": "peanuts allergy"}).json()["hits"]
        assert {h["memory"]["apiKeyId"] for h in b_hits} <= {"tenant-b"}
        assert b.get(f"/api/memory/{ids['Allergic to peanuts']}").status_code == 404


def test_the_old_window_setting_only_hides_after_the_upgrade(tmp_path):
    ids = _old_database(tmp_path / "old.db")
    config = {"backends": {"primary": "main", "main": {"type": "sqlite", "path": str(tmp_path / "old.db")}},
              "data_dir": str(tmp_path / "data"), "memory": {"retention_days": 30}, "embedding": {"source": "none"}}
    with memroute.open(config) as mem:
        report = mem.prune_all()  # what the old server's start-up prune ran
        assert report.deleted == 0 and report.candidates == ()
        assert sum(1 for _ in mem.export_all()) == len(_ROWS)
        assert mem.search("peanuts", api_key_id="tenant-a").hits == ()  # hidden by the window, as before
        found = [h.memory.id for h in mem.search("tea", api_key_id="tenant-a").hits]
        assert found == [ids["Prefers green tea"]]
