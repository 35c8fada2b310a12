"""History on PostgreSQL through the public service, on a real server: every write records its history entry in
its own transaction (:class:`~memroute.interfaces.RecordedWrites`, :class:`~memroute.interfaces.RecordedImports`),
so a real failure between a memory and its entry (a trigger refusing every history insert, created through an
admin connection) leaves neither. Two tenants throughout; nothing mocked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import memroute
from memroute.errors import MemrouteError
from memroute.interfaces import HistoryNote, RecordedImports, RecordedWrites
from memroute.models import Memory, MemoryPatch, NewMemory, new_memory_id, utcnow
from memroute_builtins.backends.postgres.backend import PostgresBackend, PostgresSettings
from tests.history_checks import check_concurrent_adds_record_their_own_entries, events
from tests.servers.postgres import PostgresServer


@pytest.fixture
def mem(postgres_server: PostgresServer, schema: str, tmp_path: Path) -> Iterator[Any]:
    config = {"embedding": {"source": "none"}, "manager": {"health_interval_s": 0},
              "backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}}}
    with memroute.open(config, data_dir=str(tmp_path)) as service:
        yield service


def _counts(server: PostgresServer, schema: str) -> tuple[int, int]:
    """(memories, history entries) of every tenant, read past row-level security."""
    with psycopg.connect(server.dsn()) as raw:
        raw.execute("SELECT set_config('memroute.all_tenants', 'on', false)")
        memories = raw.execute(f'SELECT count(*) FROM "{schema}".memories').fetchone()
        entries = raw.execute(f'SELECT count(*) FROM "{schema}".memory_history').fetchone()
    assert memories is not None and entries is not None
    return int(memories[0]), int(entries[0])


def _refuse_history(server: PostgresServer, schema: str) -> None:
    server.admin(
        f'CREATE FUNCTION "{schema}".refuse_history() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        "RAISE EXCEPTION 'injected failure between a memory and its history'; END $$; "
        f'CREATE TRIGGER refuse_history BEFORE INSERT ON "{schema}".memory_history FOR EACH ROW '
        f'EXECUTE FUNCTION "{schema}".refuse_history()', "memroute")


def test_the_manager_writes_history_in_the_write_on_postgres(mem: Any) -> None:
    """The manager picks the recorded paths by protocol: the PostgreSQL backend must implement both."""
    backend = mem._manager.primary
    assert isinstance(backend, PostgresBackend)
    assert isinstance(backend, RecordedWrites) and isinstance(backend, RecordedImports)
    assert mem._manager.records_in_write


def test_each_write_and_its_entry_are_one_transaction(mem: Any, postgres_server: PostgresServer,
                                                      schema: str) -> None:
    """With every history insert refused, an add (of a new key and of a taken one), an update, a delete and an
    import each fail with a memroute error and change nothing; once the trigger is gone the same calls succeed
    and each change has its entry, readable only by its tenant."""
    porto = mem.add(api_key_id="alice", content="Lives in Porto", key="profile:location")
    oslo = mem.add(api_key_id="bob", content="Lives in Oslo", key="profile:location")
    now = utcnow()
    moved = Memory(id=porto.id, api_key_id="alice", key="profile:location", content="Lives in Braga",
                   created_at=porto.created_at, updated_at=now)
    pet = Memory(id=new_memory_id(), api_key_id="alice", key="profile:pet", content="Has a cat", created_at=now,
                 updated_at=now)
    bobs_pet = Memory(id=new_memory_id(), api_key_id="bob", key="profile:pet", content="Has a dog",
                      created_at=now, updated_at=now)
    before = _counts(postgres_server, schema)
    assert before == (2, 2)

    _refuse_history(postgres_server, schema)
    with pytest.raises(MemrouteError):
        mem.add(api_key_id="alice", content="Drinks tea", key="pref:drink")
    with pytest.raises(MemrouteError):
        mem.add(api_key_id="alice", content="Lives in Faro", key="profile:location")
    with pytest.raises(MemrouteError):
        mem.update(porto.id, api_key_id="alice", content="Lives in Lagos")
    with pytest.raises(MemrouteError):
        mem.delete(porto.id, api_key_id="alice")
    with pytest.raises(MemrouteError):
        mem.import_memories([moved, pet, bobs_pet])
    assert _counts(postgres_server, schema) == before, "a failed write left a memory or an entry behind"
    assert mem.get_by_key("pref:drink", api_key_id="alice") is None
    assert mem.get(porto.id, api_key_id="alice").content == "Lives in Porto"
    assert mem.get(pet.id, api_key_id="alice") is None and mem.get(bobs_pet.id, api_key_id="bob") is None

    postgres_server.admin(f'DROP TRIGGER refuse_history ON "{schema}".memory_history', "memroute")
    tea = mem.add(api_key_id="alice", content="Drinks tea", key="pref:drink")
    assert mem.add(api_key_id="alice", content="Lives in Faro", key="profile:location", actor="mcp").id == porto.id
    mem.update(porto.id, api_key_id="alice", content="Lives in Lagos", actor="cli")
    assert mem.update(porto.id, api_key_id="bob", content="stolen") is None
    assert mem.delete(porto.id, api_key_id="bob") is False
    assert mem.delete(porto.id, api_key_id="alice", actor="retention")
    assert mem.import_memories([moved, pet, bobs_pet]).imported == 3
    assert events(mem, tea.id, "alice") == [("created", "api", None, "Drinks tea")]
    assert events(mem, porto.id, "alice") == [
        ("created", "api", None, "Lives in Porto"), ("updated", "mcp", "Lives in Porto", "Lives in Faro"),
        ("updated", "cli", "Lives in Faro", "Lives in Lagos"), ("deleted", "retention", "Lives in Lagos", None),
        ("created", "import", None, "Lives in Braga")]
    assert events(mem, pet.id, "alice") == [("created", "import", None, "Has a cat")]
    assert events(mem, bobs_pet.id, "bob") == [("created", "import", None, "Has a dog")]
    assert events(mem, oslo.id, "bob") == [("created", "api", None, "Lives in Oslo")]
    assert mem.history(porto.id, api_key_id="bob") is None and mem.history(bobs_pet.id, api_key_id="alice") is None


def test_concurrent_writers_of_one_key_leave_one_unbroken_chain(postgres_server: PostgresServer,
                                                                 schema: str) -> None:
    """Two backends on one database (two memroute processes) upsert and update one key from eight threads: each
    entry must describe the row its write replaced, so the entries form one chain (each old content is the new
    content of exactly one earlier entry) ending at what the memory says. Reading the row without a lock would
    give two entries the same old content."""
    backends = [PostgresBackend(f"p{i}", PostgresSettings(dsn=postgres_server.dsn(), schema=schema, pool_max_size=4))
                for i in range(2)]
    for backend in backends:
        backend.initialize()
    try:
        [first] = backends[0].create_many_recorded(
            [NewMemory(api_key_id="alice", key="profile:location", content="v-start")], [HistoryNote(actor="t")])
        assert isinstance(first, Memory)
        backends[0].create_many_recorded([NewMemory(api_key_id="bob", key="profile:location", content="bob's")],
                                         [HistoryNote(actor="t")])
        failures: list[BaseException] = []

        def write(worker: int) -> None:
            backend = backends[worker % 2]
            try:
                for i in range(15):
                    content = f"v-{worker}-{i}"
                    if i % 3 == 2:
                        assert backend.update_recorded("alice", first.id, MemoryPatch(content=content),
                                                       HistoryNote(actor=f"w{worker}")) is not None
                    else:
                        [stored] = backend.create_many_recorded(
                            [NewMemory(api_key_id="alice", key="profile:location", content=content)],
                            [HistoryNote(actor=f"w{worker}")])
                        assert isinstance(stored, Memory) and stored.id == first.id
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        threads = [threading.Thread(target=write, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        entries = backends[1].history("alice", first.id)
        assert len(entries) == 1 + 8 * 15, "one entry per write (every write changed the content)"
        following = {e.old_content: e.new_content for e in entries}
        assert len(following) == len(entries), "two entries replaced the same content: a write read a stale row"
        walked, content = 0, None
        while content in following:
            content = following[content]
            walked += 1
        assert walked == len(entries), "the entries do not form one chain"
        current = backends[1].get_owned("alice", first.id)
        assert current is not None and content == current.content
        assert [e.new_content for e in backends[1].history("bob", first.id)] == []
    finally:
        for backend in backends:
            backend.close()


def test_concurrent_adds_and_deletes_of_one_key_record_every_change_once(postgres_server: PostgresServer,
                                                                          schema: str) -> None:
    """Adds of one key race deletes of it (two backends, six threads): an add that finds the key's memory gone
    between its insert and its locked read tries again, never failing; every successful write has exactly one
    entry, and each memory's entries form one chain from its creation to what it says now (or to its deletion)."""
    backends = [PostgresBackend(f"p{i}", PostgresSettings(dsn=postgres_server.dsn(), schema=schema, pool_max_size=4))
                for i in range(2)]
    for backend in backends:
        backend.initialize()
    written = {"adds": 0, "deletes": 0}
    ids: set[str] = set()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work(worker: int) -> None:
        backend = backends[worker % 2]
        try:
            for i in range(25):
                if worker % 3:
                    [stored] = backend.create_many_recorded(
                        [NewMemory(api_key_id="alice", key="k", content=f"c-{worker}-{i}")], [HistoryNote(actor="a")])
                    assert isinstance(stored, Memory), stored
                    with lock:
                        written["adds"] += 1
                        ids.add(stored.id)
                else:
                    found = backend.get_by_key("alice", "k")
                    if found is not None and backend.delete_recorded("alice", found.id, HistoryNote(actor="d")):
                        with lock:
                            written["deletes"] += 1
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    try:
        threads = [threading.Thread(target=work, args=(worker,)) for worker in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        assert written["deletes"] > 0 and len(ids) > 1, "the deletes never met the adds: nothing was raced"
        total = 0
        for memory_id in ids:
            entries = backends[0].history("alice", memory_id)
            total += len(entries)
            following = {e.old_content: e.new_content for e in entries}
            assert len(following) == len(entries), f"{memory_id}: two entries replaced the same content"
            current = backends[1].get_owned("alice", memory_id)
            content, steps = following[None], 1
            while content is not None and content in following:
                content, steps = following[content], steps + 1
            assert steps == len(entries), f"{memory_id}: the entries do not form one chain"
            assert content == (current.content if current is not None else None)
            assert backends[0].history("bob", memory_id) == []
        assert total == written["adds"] + written["deletes"], "a write without its entry, or an entry twice"
    finally:
        for backend in backends:
            backend.close()


def test_concurrent_adds_of_two_tenants_each_record_their_own_entry(mem: Any) -> None:
    check_concurrent_adds_record_their_own_entries(mem)


def test_a_killed_writer_leaves_no_memory_without_its_entry(postgres_server: PostgresServer, schema: str,
                                                            tmp_path: Path) -> None:
    """A process adding in a loop through ``memroute.open`` is killed (SIGKILL) mid-run: its open transaction
    never commits, so every memory it left has its created entry, and every entry its memory."""
    import signal
    import subprocess
    import sys
    import time

    config = {"embedding": {"source": "none"}, "manager": {"health_interval_s": 0},
              "backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}}}
    script = ("import itertools, memroute\n"
              f"mem = memroute.open({config!r}, data_dir={str(tmp_path / 'data')!r})\n"
              "print('ready', flush=True)\n"
              "for i in itertools.count():\n"
              "    mem.add(api_key_id='alice' if i % 2 else 'bob', content=f'note {i}', key=f'k{i}')\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for _ in range(600):  # until it has written a few hundred memories
            time.sleep(0.05)
            if _counts(postgres_server, schema)[0] >= 300:
                break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    with psycopg.connect(postgres_server.dsn()) as raw:
        raw.execute("SELECT set_config('memroute.all_tenants', 'on', false)")
        memories = raw.execute(f'SELECT count(*) FROM "{schema}".memories').fetchone()
        orphans = raw.execute(
            f'SELECT count(*) FROM "{schema}".memories m WHERE NOT EXISTS (SELECT 1 FROM "{schema}".memory_history h '
            "WHERE h.api_key_id = m.api_key_id AND h.memory_id = m.id AND h.event = 'created')").fetchone()
        strays = raw.execute(
            f'SELECT count(*) FROM "{schema}".memory_history h WHERE NOT EXISTS (SELECT 1 FROM "{schema}".memories m '
            "WHERE m.api_key_id = h.api_key_id AND m.id = h.memory_id)").fetchone()
    assert memories is not None and memories[0] >= 300
    assert (orphans, strays) == ((0,), (0,))
