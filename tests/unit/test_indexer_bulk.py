"""A deep backlog (a bulk import) is indexed inside the vector store's ``bulk_load``, once, around all of it;
everyday writes are not. The store here is memroute's numpy test store with the hook recorded."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from memroute.config.serialization import memory_to_dict
from memroute.config.settings import load_settings
from memroute.models import Memory, new_memory_id, utcnow
from memroute.retrieval.indexer import Indexer
from memroute.service import Memroute
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.numpy_store import NumpyVectorStore


class Recording(NumpyVectorStore):
    def __init__(self) -> None:
        super().__init__()
        self.bulk_loads: list[tuple[int, int]] = []
        self.inside = False

    @contextlib.contextmanager
    def bulk_load(self, expected: int) -> Iterator[None]:
        before = self.count()
        self.inside = True
        try:
            yield
        finally:
            self.inside = False
            self.bulk_loads.append((expected, self.count() - before))


def _lines(count: int) -> list[str]:
    now = utcnow()
    return [json.dumps(memory_to_dict(Memory(id=new_memory_id(), api_key_id="a", key=f"k{i}", content=f"note {i}",
                                             created_at=now, updated_at=now))) for i in range(count)]


def test_a_deep_backlog_is_indexed_inside_one_bulk_load(tmp_path, monkeypatch):
    monkeypatch.setattr(Indexer, "BULK_THRESHOLD", 300)
    settings = load_settings({"data_dir": str(tmp_path / "d"), "manager": {"health_interval_s": 0}}, use_env=False)
    store = Recording()
    with Memroute(settings, embedder=HashingEmbeddingSource(), vector_store=store) as mem:
        mem.add(api_key_id="a", content="an everyday write")
        assert mem.flush(20) is True
        assert store.bulk_loads == [], "a shallow queue is indexed as usual"
        mem.import_jsonl(_lines(700))
        assert mem.flush(60) is True
        assert not store.inside, "flush returns after the store finished its bulk load"
        assert store.count() == 701
        # Whichever thread drained it (the worker or flush), the backlog went through bulk loads only.
        assert sum(done for _, done in store.bulk_loads) == 700
        assert all(expected >= 300 for expected, _ in store.bulk_loads)
