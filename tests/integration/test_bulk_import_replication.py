"""Bulk import goes through the manager's put_many: one transaction on the serving backend, and every memory
journaled for the fallbacks, which hold exactly the same memories (ids and timestamps) after the outbox drains.
A tenant's import never touches another tenant."""

from __future__ import annotations

import json

import memroute
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, new_memory_id, utcnow


def test_import_reaches_the_fallback_exactly(tmp_path):
    config = {
        "backends": {"primary": "main", "fallbacks": ["copy"],
                     "main": {"type": "sqlite", "path": str(tmp_path / "main.db")},
                     "copy": {"type": "sqlite", "path": str(tmp_path / "copy.db")}},
        "embedding": {"source": "none"},
        "data_dir": str(tmp_path / "data"),
    }
    now = utcnow()
    memories = [Memory(id=new_memory_id(), api_key_id=f"tenant-{i % 3}", key=f"k{i}", content=f"fact number {i}",
                       created_at=now, updated_at=now) for i in range(2500)]  # more than one import batch
    with memroute.open(config) as mem:
        bystander = mem.add(api_key_id="other", content="untouched", key="keep")
        assert mem.import_jsonl([json.dumps(memory_to_dict(m)) for m in memories]).imported == 2500
        assert mem.flush(timeout=60)
        main, copy = mem._manager.backends  # internals: inspect each backend
        expected = {m.id: m for m in memories} | {bystander.id: bystander}
        for backend in (main, copy):
            stored = {m.id: m for m in backend.iter_all()}
            assert stored.keys() == expected.keys()
            assert all(stored[i].same_as(expected[i]) for i in expected)
        assert mem.list(api_key_id="other").total == 1
        assert mem.list(api_key_id="tenant-0").total == 834
