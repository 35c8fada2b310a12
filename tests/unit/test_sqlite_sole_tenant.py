"""The keyword search of a tenant alone in its SQLite file leaves the owner term out of the FTS5 match
(``SqliteBackend._sole_tenant``). Only speed may depend on it: the same hits and the same score bits as with the
owner term, and a hint gone stale (another tenant's first rows, written since the last look) never lets another
tenant's memory through or changes a result."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memroute.models import NewMemory, SearchQuery
from memroute_builtins.backends.sqlite import backend as sqlite_backend
from memroute_builtins.backends.sqlite.backend import SqliteBackend, SqliteSettings

WORDS = ["postgres", "billing", "marathon", "lisbon", "dashboard", "review", "pipeline", "offsite", "editor", "neovim",
         "coffee", "tea", "budget", "deadline", "migration", "training", "plan", "trip", "language", "code", "data",
         "team", "user", "service", "decision"]
QUERIES = ("postgres billing", "marathon training plan", "trip to lisbon", "code review", "the user service",
           "tea or coffee", "data pipeline migration decision", "neovim editor", "budget deadline team")


@pytest.fixture
def backend(tmp_path: Path):
    opened = SqliteBackend("test", tmp_path / "sole.db", settings=SqliteSettings(cache_size=0))
    opened.initialize()
    yield opened
    opened.close()


def fill(backend: SqliteBackend, tenant: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    backend.create_many([NewMemory(api_key_id=tenant, key=f"{tenant}:{n}",
                                   content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))))
                         for n in range(count)])


def ranked(backend: SqliteBackend, tenant: str, text: str, limit: int) -> list[tuple[str, float]]:
    return [(hit.memory.id, hit.score) for hit in backend.search(SearchQuery(api_key_id=tenant, text=text,
                                                                            limit=limit))]


def without_hint(backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch, tenant: str, text: str,
                 limit: int) -> list[tuple[str, float]]:
    with monkeypatch.context() as patched:
        patched.setattr(SqliteBackend, "_sole_tenant", lambda self, who: False)
        return ranked(backend, tenant, text, limit)


def test_a_sole_tenant_gets_the_same_hits_and_score_bits_without_the_owner_term(backend, monkeypatch):
    fill(backend, "alice", 400, seed=1)
    assert backend._sole_tenant("alice") and not backend._sole_tenant("bob")
    for text in QUERIES:
        for limit in (1, 10, 64, 200):
            assert ranked(backend, "alice", text, limit) == without_hint(backend, monkeypatch, "alice", text, limit)


def test_a_stale_hint_never_lets_another_tenants_memory_through(backend, monkeypatch):
    fill(backend, "alice", 30, seed=2)
    assert backend._sole_tenant("alice")  # looked now: trusted for SOLE_TENANT_TTL_S
    # Bob's first rows, many and matching the same words better (short texts), crowd any shortlist: Alice's
    # searches still believe she is alone, so they must look deeper rather than come back short.
    backend.create_many([NewMemory(api_key_id="bob", key=f"bob:{n}", content=f"{word} {word}")
                         for n, word in enumerate(WORDS * 150)])
    assert backend._sole == (backend._sole[0], "alice")
    alice = {m.id for m in backend.iter_all("alice")}
    for text in QUERIES:
        for limit in (5, 30):
            hits = ranked(backend, "alice", text, limit)
            assert hits and {memory_id for memory_id, _ in hits} <= alice
            assert hits == without_hint(backend, monkeypatch, "alice", text, limit)
        assert {memory_id for memory_id, _ in ranked(backend, "bob", text, 50)}.isdisjoint(alice)


def test_the_hint_is_looked_at_again_after_its_ttl(backend, monkeypatch):
    fill(backend, "alice", 5, seed=3)
    assert backend._sole_tenant("alice")
    fill(backend, "bob", 5, seed=4)
    assert backend._sole_tenant("alice")  # within the TTL: the last look stands
    monkeypatch.setattr(sqlite_backend, "SOLE_TENANT_TTL_S", 0.0)
    assert not backend._sole_tenant("alice") and not backend._sole_tenant("bob")
    for memory in list(backend.iter_all("bob")):
        backend.delete(memory.id)
    assert backend._sole_tenant("alice")
