"""Failover end to end (issue 5): a SQLite primary with Obsidian and Notion as fallbacks, configured the way a
user writes memroute.toml and driven through ``memroute.open``, over real HTTP(S) to the loopback fakes of
the Obsidian Local REST API and the Notion API, with the real default retrieval engine (static embeddings,
sqlite-vec).

The primary is the real SQLite backend inside the fault injector (``faulty-sqlite``), so "stopping" it makes
every call fail the way an unreachable store does; the Obsidian fake is stopped and restarted on its port.

What must hold: writes reach all three; with the primary down, reads and searches are served by the first
healthy fallback and say so; writes made meanwhile land in the primary after it returns; with a fallback down,
its writes wait in the outbox and arrive when it is back; nothing acknowledged is lost; no tenant sees another's
memories on any path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import memroute
from memroute_builtins.backends.notion import schema as ns
from tests.servers.faulty_sqlite import FaultySqlitePlugin
from tests.servers.notion_fake import NotionFake, running_notion_fake
from tests.servers.obsidian_fake import ObsidianFake, make_self_signed_cert


@pytest.fixture
def obsidian(tmp_path: Path) -> Iterator[ObsidianFake]:
    (tmp_path / "tls").mkdir()
    cert = make_self_signed_cert(tmp_path / "tls")
    with ObsidianFake(tmp_path / "vault", tls_cert=cert) as fake:
        yield fake


@pytest.fixture
def notion() -> Iterator[NotionFake]:
    with running_notion_fake() as fake:
        yield fake


def contents(backend: memroute.MemoryBackend) -> dict[str, tuple[str, str, str]]:
    return {m.id: (m.api_key_id, m.key, m.content) for m in backend.iter_all()}


def test_writes_reach_every_backend_and_nothing_acknowledged_is_lost(
    tmp_path, obsidian, notion, plugin_manager, register_plugin, monkeypatch
):
    monkeypatch.setenv("OBSIDIAN_API_KEY", obsidian.api_key)
    monkeypatch.setenv("NOTION_TOKEN", notion.token)
    faulty = FaultySqlitePlugin()
    register_plugin(faulty, name="faulty-sqlite")
    config = {
        "backends": {
            "primary": "main",
            "fallbacks": ["vault", "notes"],
            "main": {"type": "faulty-sqlite", "path": str(tmp_path / "memroute.db")},
            "vault": {"type": "obsidian", "api_key": "${OBSIDIAN_API_KEY}", "base_url": obsidian.base_url,
                      "verify": str(obsidian.cert_path), "timeout": 5},
            "notes": {"type": "notion", "token": "${NOTION_TOKEN}", "base_url": notion.base_url, "allow_private": True,
                      "database_id": notion.add_database(ns.database_properties()), "requests_per_second": 0,
                      "max_retries": 1, "max_retry_delay": 0.05},
        },
        "manager": {"health_interval_s": 0, "retry_base_s": 0.01, "retry_max_s": 0.05, "breaker_reset_s": 0},
        "data_dir": str(tmp_path / "data"),
    }
    expected: dict[str, tuple[str, str, str]] = {}

    def remember(memory: memroute.Memory) -> memroute.Memory:
        expected[memory.id] = (memory.api_key_id, memory.key, memory.content)
        return memory

    with memroute.open(config, plugins=plugin_manager) as mem:
        main = faulty.instances["main"]
        vault, notes = mem._manager.fallbacks  # internals: inspect each backend

        # 1. Writes reach all three.
        coffee = remember(mem.add(api_key_id="alice", key="pref:coffee", content="Drinks flat white with oat milk"))
        remember(mem.add(api_key_id="alice", key="fact:city", content="Lives in Lisbon near the river"))
        remember(mem.add(api_key_id="bob", key="pref:coffee", content="Bob drinks espresso, no milk"))
        assert mem.flush(timeout=60)
        assert contents(main.inner) == contents(vault) == contents(notes) == expected

        # 2. The primary stops: reads and searches are served by the first healthy fallback, and say so.
        main.fail()
        result = mem.search("oat milk coffee", api_key_id="alice", strategy="hybrid")
        assert result.provenance.fallback and result.provenance.backend == "vault"
        assert result.provenance.degraded and "primary unavailable" in (result.provenance.reason or "")
        assert coffee.id in {h.memory.id for h in result.hits}
        assert {h.memory.api_key_id for h in result.hits} == {"alice"}
        assert mem.get(coffee.id, api_key_id="alice") is not None
        assert mem.get(coffee.id, api_key_id="bob") is None
        assert mem.list(api_key_id="alice").total == 2

        # Writes during the outage are acknowledged (served by a fallback, journaled for the primary).
        tea = remember(mem.add(api_key_id="alice", key="pref:tea", content="Started drinking green tea"))
        assert mem.update(coffee.id, api_key_id="alice", content="Drinks flat white with almond milk now")
        expected[coffee.id] = ("alice", "pref:coffee", "Drinks flat white with almond milk now")
        city = next(mid for mid, row in expected.items() if row[1] == "fact:city")
        assert mem.delete(city, api_key_id="alice")
        del expected[city]
        assert mem.health().outbox.by_target.get("main") == 3

        # 3. The primary returns: the outbox replays in order and it holds exactly the acknowledged state.
        main.recover()
        assert mem.flush(timeout=60)
        assert contents(main.inner) == expected
        assert not mem.search("tea", api_key_id="alice", strategy="exact").provenance.fallback

        # 4. A fallback stops: its writes wait in the outbox; the others still get theirs.
        obsidian.stop()
        assert not vault.health().ok
        late = remember(mem.add(api_key_id="bob", key="fact:dog", content="Bob has a dog called Pixel"))
        assert mem.update(tea.id, api_key_id="alice", content="Drinks green tea every afternoon")
        expected[tea.id] = ("alice", "pref:tea", "Drinks green tea every afternoon")
        assert mem.flush(timeout=2) is False
        waiting = mem.health().outbox.by_target
        assert waiting.get("vault") == 2 and not waiting.get("notes")
        assert late.id in contents(notes) and late.id in contents(main.inner)

        # 5. It comes back: the waiting writes arrive. Nothing acknowledged was lost anywhere.
        obsidian.start()
        assert mem.flush(timeout=60)
        assert contents(main.inner) == contents(vault) == contents(notes) == expected

        # No tenant sees another's memories, on any leg, whichever backend serves.
        for strategy in ("exact", "semantic", "hybrid"):
            hits = mem.search("coffee milk dog tea", api_key_id="bob", strategy=strategy).hits
            assert {h.memory.api_key_id for h in hits} <= {"bob"}, strategy
