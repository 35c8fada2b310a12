"""The indexer embeds batch N + 1 on a helper thread while batch N's vectors and flags are written
(issue 13, indexing throughput). Real SQLite backend and sqlite-vec store; the embedding is the hashing fake
(no model), wrapped to observe threads, fail once or go slow. Checked: the overlap really happens, everything
ends up indexed and searchable when ``flush()`` returns, a failing batch costs nothing, and closing the
service in the middle of indexing leaves every memory either with its vector or still flagged."""

from __future__ import annotations

import json
import threading
import time

import numpy as np

from memroute.config.serialization import memory_to_dict
from memroute.config.settings import load_settings
from memroute.errors import EmbeddingError
from memroute.models import Memory, new_memory_id, utcnow
from memroute.service import Memroute
from memroute.testing.fakes import HashingEmbeddingSource

BATCH = 8


def _settings(tmp_path):
    return load_settings({"data_dir": str(tmp_path / "d"), "manager": {"health_interval_s": 0},
                          "vectors": {"store": "sqlite-vec"}}, use_env=False)


def _lines(count: int, tenant: str = "a") -> list[str]:
    now = utcnow()
    return [json.dumps(memory_to_dict(Memory(id=new_memory_id(), api_key_id=tenant, key=f"k{i}",
                                             content=f"{tenant} note number {i}", created_at=now, updated_at=now)))
            for i in range(count)]


def _open(tmp_path, embedder) -> Memroute:
    mem = Memroute(_settings(tmp_path), embedder=embedder)
    indexer = mem._retrieval.indexer  # internals: small batches, so a few dozen memories make several
    assert indexer is not None
    indexer.batch_size = BATCH
    return mem


class Observed(HashingEmbeddingSource):
    """Records which thread embedded each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def embed_batch(self, texts):
        self.threads.append(threading.current_thread().name)
        return super().embed_batch(texts)


def test_the_next_batch_is_embedded_while_this_one_is_written(tmp_path):
    embedder = Observed()
    with _open(tmp_path, embedder) as mem:
        indexer = mem._retrieval.indexer
        store = indexer.store
        overlapped: list[bool] = []
        upsert = store.upsert

        total = 4 * BATCH  # one chunk of four batches, whichever thread drains it

        def slow_upsert(items):
            # While a batch is written, the next one's embedding must start (on the helper thread).
            last = store.count() + len(items) >= total
            written = store.count() // BATCH  # batches before this one
            deadline = time.monotonic() + 5.0
            while not last and len(embedder.threads) < written + 2 and time.monotonic() < deadline:
                time.sleep(0.002)
            overlapped.append(last or len(embedder.threads) >= written + 2)
            upsert(items)

        store.upsert = slow_upsert
        mem.import_jsonl(_lines(total))
        assert mem.flush(60) is True
        assert store.count() == total
        assert indexer.depth() == 0
        assert "memroute-embed_0" in embedder.threads, embedder.threads
        assert overlapped == [True] * 4, overlapped
        hits = mem.search("note number 17", api_key_id="a", strategy="semantic", limit=3)
        assert not hits.provenance.degraded and hits.hits


def test_written_rows_hand_back_an_unchanged_row_and_rebuild_a_changed_one():
    from memroute_builtins.backends.sqlite.schema import WrittenRows, _row_values

    now = utcnow()
    memory = Memory(id=new_memory_id(), api_key_id="a", key="k", content="hello", created_at=now, updated_at=now)
    rows = WrittenRows(size=2)
    row = _row_values(memory)
    rows.add([(row, memory)])
    assert rows.take(row) is memory
    assert rows.take(row) is not memory and rows.take(row) == memory, "taken once; then built from the row"
    rows.add([(row, memory)])
    changed = (*row[:5], "changed elsewhere", *row[6:])
    rebuilt = rows.take(changed)
    assert rebuilt.content == "changed elsewhere"
    many = [Memory(id=new_memory_id(), api_key_id="a", key=f"k{i}", content=f"c{i}", created_at=now, updated_at=now)
            for i in range(5)]
    rows.add([(_row_values(m), m) for m in many])
    assert rows.take(_row_values(many[-1])) is many[-1]
    assert rows.take(_row_values(many[0])) is not many[0], "bounded: only the newest two were kept"


def test_the_sqlite_backend_hands_the_indexer_the_memories_it_wrote(tmp_path):
    with _open(tmp_path, HashingEmbeddingSource()) as mem:
        mem._retrieval.indexer.close()  # internals: no worker, the rows stay flagged for this test to read
        imported = [json.loads(line) for line in _lines(3)]
        mem.import_jsonl([json.dumps(item) for item in imported])
        added = mem.add(api_key_id="a", content="one more")
        backend = mem._manager.primary
        # Another connection changes one row behind this process's back: it must be read as it now is.
        backend._connection().execute("UPDATE memories SET content = 'edited' WHERE id = ?", (imported[1]["id"],))
        pending = {m.id: m for m in backend.pending_reindex(10)}
        assert set(pending) == {item["id"] for item in imported} | {added.id}
        assert pending[imported[1]["id"]].content == "edited"
        assert pending[added.id] == added
        assert pending[imported[0]["id"]].content == imported[0]["content"]


class FailsOnce(HashingEmbeddingSource):
    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word
        self.failed = False

    def embed_batch(self, texts):
        if not self.failed and any(self.word in text for text in texts):
            self.failed = True
            raise EmbeddingError("the model hiccupped", reason="unknown", source=self.source)
        return super().embed_batch(texts)


def test_a_batch_whose_embedding_fails_ahead_is_retried_and_nothing_is_lost(tmp_path):
    embedder = FailsOnce("number 21")  # in the third batch: embedded ahead, on the helper thread
    with _open(tmp_path, embedder) as mem:
        mem.import_jsonl(_lines(6 * BATCH))
        assert mem.flush(60) is True
        assert embedder.failed
        indexer = mem._retrieval.indexer
        assert indexer.store.count() == 6 * BATCH and indexer.depth() == 0
        assert mem.status().vector_store["dead_letters"] == 0


class Slow(HashingEmbeddingSource):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.batches = 0

    def embed_batch(self, texts):
        time.sleep(self.delay)
        self.batches += 1
        return super().embed_batch(texts)


def test_closing_during_indexing_leaves_every_memory_indexed_or_flagged(tmp_path):
    embedder = Slow(0.02)
    mem = _open(tmp_path, embedder)
    mem.import_jsonl(_lines(30 * BATCH))
    flushed: list[bool] = []
    flusher = threading.Thread(target=lambda: flushed.append(mem.flush(60)))
    flusher.start()
    deadline = time.monotonic() + 30
    while embedder.batches < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    mem.close()
    flusher.join(30)
    assert not flusher.is_alive()
    assert flushed == [False], "flush says the index is incomplete"
    assert embedder.batches < 30, "close stopped indexing"
    with _open(tmp_path, HashingEmbeddingSource()) as again:
        indexer = again._retrieval.indexer
        indexer.close()  # internals: look at the state close left, before any worker runs
        backend = again._manager.primary
        flagged = {m.id for m in backend.pending_reindex(10_000)}
        vectors = indexer.store.ids()
        every = {m.id for m in again.export("a")}
        assert len(every) == 30 * BATCH
        assert flagged and vectors, "close fell between batches: some indexed, some not"
        assert every - vectors <= flagged, "a memory without its vector is not flagged"
    with _open(tmp_path, HashingEmbeddingSource()) as third:
        assert third.flush(60) is True
        assert third._retrieval.indexer.store.count() == 30 * BATCH
        top = third.search("a note number 100", api_key_id="a", strategy="semantic", limit=1)
        assert top.hits and np.isfinite(top.hits[0].score)
