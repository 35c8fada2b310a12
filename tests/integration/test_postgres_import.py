"""Bulk import into PostgreSQL through the public service: set-based ``put_many`` in chunks, still one
transaction (all or nothing), exact copies, idempotent on a second run, on a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import memroute
from memroute.config.serialization import memory_to_dict
from memroute.errors import BackendError
from memroute.models import Memory, new_memory_id, utcnow
from memroute_builtins.backends.postgres import backend as postgres_backend
from tests.servers.postgres import PostgresServer, fresh_schema


@pytest.fixture
def service(postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(postgres_backend, "_PUT_CHUNK", 50)  # several statements per tenant in one transaction
    schema = fresh_schema(postgres_server)
    config = {"embedding": {"source": "none"},
              "backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}}}
    with memroute.open(config, data_dir=str(tmp_path)) as mem:
        yield mem
    postgres_server.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', "memroute")


def _lines(tenants: int = 3, each: int = 120) -> list[str]:
    now = utcnow()
    return [json.dumps(memory_to_dict(Memory(
        id=new_memory_id(), api_key_id=f"t{t}", key=f"k{i}", content=f"memory {i} of tenant {t} \u00e9\u4e2d",
        metadata={"i": i, "nested": {"quote": "it's \"quoted\""}}, session_id="s1" if i % 2 else None,
        created_at=now, updated_at=now))) for t in range(tenants) for i in range(each)]


def test_import_is_exact_and_idempotent(service: Any, postgres_server: PostgresServer) -> None:
    lines = _lines()
    report = service.import_jsonl(lines)
    assert report.imported == 360 and report.tenants == 3
    exported = {m.id: memory_to_dict(m) for t in range(3) for m in service.export(f"t{t}")}
    assert exported == {json.loads(line)["id"]: json.loads(line) for line in lines}
    assert service.import_jsonl(lines).imported == 360  # the same file again: the same memories, no duplicates
    assert sum(len(list(service.export(f"t{t}"))) for t in range(3)) == 360
    # A copy of t0's k1 under a new id replaces the memory holding (t0, k1): one memory per (owner, key).
    moved = json.loads(lines[1])
    moved["id"] = new_memory_id()
    service.import_jsonl([json.dumps(moved)])
    keys = [m.key for m in service.export("t0")]
    assert len(keys) == 120 and len(set(keys)) == 120
    assert service.get(moved["id"], api_key_id="t0") is not None


def test_a_failure_late_in_the_import_writes_nothing(service: Any, postgres_server: PostgresServer) -> None:
    schema = service.settings.backends.instances["main"].options["schema"]
    # A real server-side failure after several chunks were executed: a trigger refusing one memory.
    postgres_server.admin(
        f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        "IF NEW.content LIKE 'poison%' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$; "
        f'CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".memories FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()',
        "memroute")
    lines = _lines()
    poison = json.loads(lines[-1])
    poison["content"] = "poison pill"
    with pytest.raises(BackendError):
        service.import_jsonl([*lines[:-1], json.dumps(poison)])
    with psycopg.connect(postgres_server.dsn()) as raw:
        raw.execute("SELECT set_config('memroute.all_tenants', 'on', false)")
        assert raw.execute(f'SELECT count(*) FROM "{schema}".memories').fetchone()[0] == 0


def test_an_omniroute_database_lands_per_tenant_all_or_nothing(service: Any, postgres_server: PostgresServer,
                                                              tmp_path: Path) -> None:
    from tests.servers.omniroute_db import TENANTS, build_reference_db, needle

    reference = build_reference_db(tmp_path / "storage.sqlite", per_tenant=200)
    schema = service.settings.backends.instances["main"].options["schema"]
    postgres_server.admin(
        f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        "IF NEW.content LIKE 'Carol%' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$; "
        f'CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".memories FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()',
        "memroute")
    with pytest.raises(BackendError):  # the last tenant's needle is refused by the server: nothing stays
        service.import_omniroute(reference.path, skip_uncarried=True)
    assert all(service.list(api_key_id=t).total == 0 for t in TENANTS)
    postgres_server.admin(f'DROP TRIGGER refuse ON "{schema}".memories', "memroute")

    report = service.import_omniroute(reference.path, skip_uncarried=True)
    assert report.imported == report.carried == sum(report.tenants.values())
    for tenant in TENANTS:
        assert service.list(api_key_id=tenant).total == report.tenants[tenant]
        hits = service.search(needle(tenant), api_key_id=tenant).hits
        assert hits and hits[0].memory.content == needle(tenant)
        assert all(h.memory.api_key_id == tenant for h in service.search(needle("tenant-a"), api_key_id=tenant).hits)


def test_the_key_eviction_join_is_planned_for_each_import(postgres_server: PostgresServer) -> None:
    """``put_many``'s key eviction joins the batch's arrays to the tenant's rows. Prepared (psycopg prepares a
    statement on its fifth run), PostgreSQL may switch it to a generic plan that cannot see the arrays' size: the
    tenth import of 10,000 memories on one connection then took 4.0 s instead of 0.3 s. So it is never prepared,
    while the plain set-based insert beside it is (the check below would otherwise prove nothing)."""
    schema = fresh_schema(postgres_server)
    backend = postgres_backend.PostgresBackend("pg", postgres_backend.PostgresSettings(
        dsn=postgres_server.dsn(), schema=schema, pool_min_size=1, pool_max_size=1))
    backend.initialize()
    try:
        now = utcnow()
        for run in range(8):
            backend.put_many([Memory(id=new_memory_id(), api_key_id=f"t{i % 2}", key=f"k{run}-{i}", content="c",
                                     created_at=now, updated_at=now) for i in range(20)])
        with backend.db.transaction("read the session's prepared statements", tenant="t0") as conn:
            prepared = [row[0] for row in conn.execute("SELECT statement FROM pg_prepared_statements")]
        assert any(text.startswith(f'INSERT INTO "{schema}".memories') for text in prepared), prepared
        assert not [text for text in prepared if text.startswith(f'DELETE FROM "{schema}".memories AS m USING')]
        assert len(list(backend.iter_all("t0"))) == 80
    finally:
        backend.close()
        postgres_server.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', "memroute")
