"""PostgreSQL goes away under a running service and comes back: clear errors, the manager's failover to a
configured SQLite fallback, and recovery without restarting memroute (a real server, really stopped)."""

from __future__ import annotations

from pathlib import Path

import pytest

import memroute
from memroute.errors import BackendUnavailableError
from tests.servers.postgres import PostgresServer, wait_until_ready


def _config(server: PostgresServer, schema: str, tmp_path: Path, fallbacks: list[str]) -> dict[str, object]:
    return {
        "backends": {"primary": "main", "fallbacks": fallbacks,
                     "main": {"type": "postgres", "dsn": server.dsn(), "schema": schema, "pool_timeout_s": 1.0,
                              "connect_timeout_s": 1.0},
                     "copy": {"type": "sqlite", "path": str(tmp_path / "copy.db")}},
        "manager": {"health_interval_s": 0, "retry_base_s": 0.01, "retry_max_s": 0.05, "breaker_reset_s": 0},
        "embedding": {"source": "none"},
        "data_dir": str(tmp_path / "data"),
    }


def _ids(backend: memroute.MemoryBackend) -> dict[str, str]:
    return {m.id: m.content for m in backend.iter_all()}


def test_failover_to_sqlite_while_postgres_is_down_and_replay_after(postgres_server: PostgresServer, schema: str,
                                                                   tmp_path: Path) -> None:
    with memroute.open(_config(postgres_server, schema, tmp_path, ["copy"])) as mem:
        primary, copy = mem._manager.primary, mem._manager.fallbacks[0]  # internals: inspect each backend
        before = mem.add(api_key_id="alice", key="before", content="Written while PostgreSQL was up")
        assert mem.flush(timeout=30)
        postgres_server.stop("immediate")  # a crash: connections die without a goodbye
        try:
            assert not primary.health().ok and "PostgreSQL" in (primary.health().error or "")
            # Reads and searches are served by the fallback, and say so.
            result = mem.search("written PostgreSQL", api_key_id="alice")
            assert result.provenance.fallback and result.provenance.backend == "copy"
            assert [h.memory.id for h in result.hits] == [before.id]
            assert mem.get(before.id, api_key_id="alice") is not None
            # Writes are acknowledged by the fallback and journaled for the primary.
            during = mem.add(api_key_id="alice", key="during", content="Written while PostgreSQL was down")
            assert mem.update(before.id, api_key_id="alice", content="Changed while PostgreSQL was down")
            assert mem.health().outbox.by_target.get("main") == 2
        finally:
            postgres_server.start()
            wait_until_ready(postgres_server)
        # Back: the outbox replays in order; no memroute restart.
        assert mem.flush(timeout=60)
        expected = {before.id: "Changed while PostgreSQL was down", during.id: "Written while PostgreSQL was down"}
        assert _ids(primary) == expected == _ids(copy)
        served = mem.search("PostgreSQL down", api_key_id="alice")
        assert not served.provenance.fallback and served.provenance.backend == "main"


def test_without_a_fallback_an_outage_is_a_clear_error_and_recovers(postgres_server: PostgresServer, schema: str,
                                                                   tmp_path: Path) -> None:
    with memroute.open(_config(postgres_server, schema, tmp_path, [])) as mem:
        kept = mem.add(api_key_id="alice", key="k", content="Survives the restart")
        postgres_server.stop("fast")
        try:
            with pytest.raises(BackendUnavailableError, match="PostgreSQL") as caught:
                mem.add(api_key_id="alice", key="lost", content="Not acknowledged")
            assert "Traceback" not in str(caught.value)
        finally:
            postgres_server.start()
            wait_until_ready(postgres_server)
        assert mem.get(kept.id, api_key_id="alice") is not None  # the same service, reconnected by itself
        again = mem.add(api_key_id="alice", key="after", content="Written after the restart")
        assert mem.get(again.id, api_key_id="alice") is not None
