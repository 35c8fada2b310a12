"""A poison item in the vector index queue is dead-lettered and reported; it never blocks the rest
(issue 16, item 6). Before the fix one memory the store refused made ``flush()`` return False forever and
left later memories of every tenant without vectors."""

from __future__ import annotations

import memroute
from memroute.config.settings import load_settings
from memroute.errors import VectorStoreError
from memroute.service import Memroute
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.numpy_store import NumpyVectorStore


class Refusing(NumpyVectorStore):
    """Refuses any batch holding a memory of the session ``poison`` (as Qdrant refuses a non-UUID id). By
    session, not id, so the refusal is in place before the memory exists and the indexer never races it."""

    def upsert(self, items):
        if any(item.session_id == "poison" for item in items):
            raise VectorStoreError("point id refused")
        super().upsert(items)


def test_a_poison_memory_is_dead_lettered_and_the_others_are_indexed(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path / "d"), "manager": {"health_interval_s": 0}}, use_env=False)
    store = Refusing()
    with Memroute(settings, embedder=HashingEmbeddingSource(), vector_store=store) as mem:
        poison = mem.add(api_key_id="a", content="the poison memory", session_id="poison")
        others = [mem.add(api_key_id=tenant, content=f"{tenant} note {i}") for tenant in "ab" for i in range(4)]
        assert mem.flush(20) is True, "a poison item blocked the index queue"
        assert {m.id for m in others} <= store.ids()
        status = mem.status().vector_store
        assert status["dead_letters"] == 1 and status["dead_letter_sample"][0]["memory_id"] == poison.id
        assert poison.id not in store.ids()
        hits = mem.search("note", api_key_id="b", strategy="semantic")
        assert not hits.provenance.degraded, hits.provenance.reason
    assert memroute  # the public package imports
