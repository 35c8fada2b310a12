"""The retrieval engine: tiers and visible degradation, filters on the vector path, fusion, signature changes
(the old index is never queried), lazy backfill, crash healing and the budget walk.

Uses real components throughout: the in-memory backend behind a real MemoryManager, the feature-hashing
embedding source, the exact numpy vector store, and a durable index queue in a SQLite file."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memroute.config.settings import MemorySettings
from memroute.models import NewMemory, SearchQuery, utcnow
from memroute.retrieval.budget import fit_budget
from memroute.retrieval.engine import RetrievalEngine
from memroute.retrieval.fusion import fuse, keyword_query
from memroute.routing.manager import MemoryManager
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.memory import InMemoryBackend
from memroute.testing.numpy_store import NumpyVectorStore


@pytest.fixture
def manager():
    with MemoryManager(InMemoryBackend("main"), settings=None) as m:
        yield m


def engine(manager, tmp_path, *, embedder=None, store=None, lazy_budget=256, settings=None):
    return RetrievalEngine(
        manager, memory_settings=settings or MemorySettings(min_score=0.0),
        embedder=embedder if embedder is not None else HashingEmbeddingSource(64),
        vector_store=store if store is not None else NumpyVectorStore(),
        index_path=tmp_path / "index.db", background=False, lazy_budget=lazy_budget,
    )


def add(manager, eng, api_key_id, content, **kwargs):
    memory = manager.create(NewMemory(api_key_id=api_key_id, key=kwargs.pop("key", content[:30]), content=content,
                                      **kwargs))
    eng.on_written([memory])
    return memory


def q(text, key="alice", strategy="hybrid", **kwargs):
    return SearchQuery(api_key_id=key, text=text, strategy=strategy, **kwargs)


def test_without_embedding_source_semantic_and_hybrid_degrade_to_keyword_visibly(manager):
    eng = RetrievalEngine(manager, embedder=None, vector_store=None)
    manager.create(NewMemory(api_key_id="alice", key="k", content="Prefers TypeScript for frontend code"))
    for strategy in ("semantic", "hybrid"):
        result = eng.search(q("TypeScript frontend", strategy=strategy))
        assert [h.memory.key for h in result] == ["k"]
        assert result.provenance.legs == ("keyword",)
        assert result.provenance.degraded and "no embedding source" in (result.provenance.reason or "")
        assert result.hits[0].tier == "keyword"


def test_hybrid_fuses_both_legs_and_reports_ranks(manager, tmp_path):
    eng = engine(manager, tmp_path)
    add(manager, eng, "alice", "Prefers TypeScript for frontend code")
    add(manager, eng, "alice", "Drinks coffee with oat milk")
    eng.flush()
    result = eng.search(q("TypeScript frontend"))
    assert result.provenance.legs == ("keyword", "vector")
    assert not result.provenance.degraded
    top = result.hits[0]
    assert top.memory.content.startswith("Prefers TypeScript")
    assert top.tier == "hybrid" and set(top.ranks) == {"keyword", "vector"}
    assert top.leg_scores["vector"] > 0.3


def test_vector_path_never_returns_another_tenants_memory(manager, tmp_path):
    eng = engine(manager, tmp_path)
    add(manager, eng, "alice", "Lives in Lisbon")
    for i in range(50):
        add(manager, eng, "bob", f"Lives in Lisbon too, note {i}")
    eng.flush()
    for strategy in ("semantic", "hybrid", "exact"):
        result = eng.search(q("Lisbon", strategy=strategy, limit=20))
        assert result.hits, strategy
        assert {h.memory.api_key_id for h in result} == {"alice"}, strategy


def test_vector_path_applies_expiry_retention_and_session(manager, tmp_path):
    eng = engine(manager, tmp_path)
    now = utcnow()
    add(manager, eng, "alice", "garden tomatoes growing", key="live", session_id="s1")
    add(manager, eng, "alice", "garden tomatoes expired", key="expired", expires_at=now - timedelta(seconds=1))
    old = NewMemory(api_key_id="alice", key="old", content="garden tomatoes ancient", now=now - timedelta(days=90))
    eng.on_written([manager.create(old)])
    add(manager, eng, "alice", "garden tomatoes other session", key="other", session_id="s2")
    eng.flush()
    result = eng.search(q("garden tomatoes", strategy="semantic", retention_days=30))
    assert sorted(h.memory.key for h in result) == ["live", "other"]
    result = eng.search(q("garden tomatoes", strategy="semantic", retention_days=30, session_id="s1"))
    assert [h.memory.key for h in result] == ["live"]


def test_the_relevance_floor_applies_to_budgeted_and_plain_searches_alike(manager, tmp_path):
    eng = engine(manager, tmp_path, settings=MemorySettings(min_score=0.5))
    add(manager, eng, "alice", "Prefers TypeScript for frontend code")
    eng.flush()
    for max_tokens in (2000, None):
        assert len(eng.search(q("zebra xylophone quantum", strategy="semantic"), max_tokens=max_tokens)) == 0
        assert len(eng.search(q("zebra xylophone quantum"), max_tokens=max_tokens)) == 0
        found = eng.search(q("TypeScript frontend code"), max_tokens=max_tokens)
        assert [h.memory.content for h in found] == ["Prefers TypeScript for frontend code"]
        assert 0.5 <= found.hits[0].score <= 1.0


def test_exact_with_a_query_keeps_only_matching_memories_newest_first(manager, tmp_path):
    eng = engine(manager, tmp_path)
    now = utcnow()
    for i, content in enumerate(["Lisbon trip in May", "Drinks oat milk coffee", "Back from Lisbon, loved it",
                                 "Lisbon has great tiles"]):
        eng.on_written([manager.create(NewMemory(api_key_id="alice", key=f"k{i}", content=content,
                                                 now=now + timedelta(seconds=i)))])
    result = eng.search(q("what about Lisbon?", strategy="exact"))
    assert [h.memory.key for h in result] == ["k3", "k2", "k0"]
    assert result.provenance.strategy_used == "exact" and not result.provenance.degraded
    assert result.hits[0].ranks["recency"] == 1 and "keyword" in result.hits[0].ranks
    assert [h.memory.key for h in eng.search(q("zebra", strategy="exact"))] == []
    assert [h.memory.key for h in eng.search(q("", strategy="exact"))] == ["k3", "k2", "k1", "k0"]


def test_equal_scores_come_back_newest_first_then_by_id_on_every_path(manager, tmp_path):
    eng = engine(manager, tmp_path)
    now = utcnow()
    ids = []
    for i in range(6):  # identical content: equal keyword and vector scores; two share a timestamp
        memory = manager.create(NewMemory(api_key_id="alice", key=f"k{i}", content="Walks the dog at noon",
                                          now=now + timedelta(seconds=i // 2)))
        eng.on_written([memory])
        ids.append((-(i // 2), memory.id))
    eng.flush()
    expected = [mid for _, mid in sorted(ids)]
    for strategy in ("hybrid", "semantic", "exact"):
        for _ in range(3):
            assert [h.memory.id for h in eng.search(q("dog noon", strategy=strategy))] == expected, strategy
    keyword_only = RetrievalEngine(manager, embedder=None, vector_store=None)
    assert [h.memory.id for h in keyword_only.search(q("dog noon"))] == expected


def test_signature_change_never_queries_the_old_index_and_rebuilds(manager, tmp_path):
    store = NumpyVectorStore()
    first = engine(manager, tmp_path, embedder=HashingEmbeddingSource(64), store=store)
    for i in range(10):
        add(manager, first, "alice", f"memory about topic {i}")
    first.flush()
    first.close()
    assert store.count() == 10
    # A new embedding signature: the index is reset and every memory is queued again.
    second = engine(manager, tmp_path, embedder=HashingEmbeddingSource(32), store=store, lazy_budget=0)
    assert store.signature() is not None and ":32:" in store.signature()
    assert store.count() == 0
    result = second.search(q("topic", strategy="semantic"))
    assert result.provenance.legs == ("keyword",)
    assert "rebuilding (10 memories pending)" in (result.provenance.reason or "")
    # reindex drives the rebuild explicitly
    report = second.reindex()
    assert report["processed"] == 10 and report["pending"] == 0
    result = second.search(q("topic", strategy="semantic"))
    assert result.provenance.legs == ("vector",) and not result.provenance.degraded


def test_lazy_backfill_does_bounded_work_per_read(manager, tmp_path):
    store = NumpyVectorStore()
    first = engine(manager, tmp_path, store=store)
    for i in range(30):
        manager.create(NewMemory(api_key_id="alice", key=f"k{i}", content=f"lazy topic {i}"))
    first.close()
    # Memories written without their vectors (as after a crash before enqueueing): the next open heals them.
    eng = engine(manager, tmp_path, store=store, lazy_budget=20)
    assert eng.indexer is not None and eng.indexer.queue.depth() == 30
    first_read = eng.search(q("lazy topic", strategy="semantic"))
    assert first_read.provenance.degraded and "10 memories pending" in (first_read.provenance.reason or "")
    second_read = eng.search(q("lazy topic", strategy="semantic"))
    assert not second_read.provenance.degraded
    assert store.count() == 30


def test_queue_survives_a_restart(manager, tmp_path):
    store = NumpyVectorStore()
    eng = engine(manager, tmp_path, store=store)
    add(manager, eng, "alice", "queued before the crash")
    assert eng.indexer.queue.depth() == 1
    eng.close()  # the process "dies" before the worker ran
    again = engine(manager, tmp_path, store=store)
    assert again.indexer.queue.depth() == 1
    assert again.flush() and store.count() == 1


def test_delete_removes_the_vector(manager, tmp_path):
    store = NumpyVectorStore()
    eng = engine(manager, tmp_path, store=store)
    memory = add(manager, eng, "alice", "to be forgotten")
    eng.flush()
    assert store.count() == 1
    manager.delete(memory.id)
    eng.on_deleted(memory.id, "alice")
    eng.flush()
    assert store.count() == 0


def test_embedding_failure_degrades_and_keeps_entries_queued(manager, tmp_path):
    class Broken(HashingEmbeddingSource):
        fail = False

        def embed_batch(self, texts):
            if self.fail:
                from memroute.errors import EmbeddingError
                raise EmbeddingError("model unavailable", reason="model_load_failed")
            return super().embed_batch(texts)

    embedder = Broken(64)
    eng = engine(manager, tmp_path, embedder=embedder)
    embedder.fail = True
    add(manager, eng, "alice", "kept in the queue")
    assert eng.flush(timeout=0.2) is False
    assert eng.indexer.queue.depth() == 1
    assert eng.indexer.queue.failing()[0]["last_error"].startswith("EmbeddingError")
    result = eng.search(q("kept queue", strategy="hybrid"))
    assert result.provenance.degraded and result.hits  # keyword still serves
    embedder.fail = False
    assert eng.flush()
    assert eng.search(q("kept queue", strategy="semantic")).hits


def test_exact_is_recency_and_empty_query_falls_back_to_recency(manager, tmp_path):
    eng = engine(manager, tmp_path)
    now = utcnow()
    for i in range(3):
        eng.on_written([manager.create(NewMemory(api_key_id="alice", key=f"k{i}", content=f"c{i}",
                                                 now=now + timedelta(seconds=i)))])
    assert [h.memory.key for h in eng.search(q("", strategy="exact"))] == ["k2", "k1", "k0"]
    result = eng.search(q("   ", strategy="hybrid"))
    assert result.provenance.legs == ("recency",) and result.provenance.degraded


def test_budget_walk_skips_items_that_do_not_fit_and_keeps_going():
    from memroute.models import Memory, SearchHit

    def hit(content):
        m = Memory(id=content[:8] + "x", api_key_id="a", key=content[:8], content=content,
                   created_at=utcnow(), updated_at=utcnow())
        return SearchHit(memory=m, score=1.0, tier="keyword")

    hits = [hit("a" * 40), hit("b" * 400), hit("c" * 40)]  # 10, 100, 10 tokens
    assert [h.memory.content[0] for h in fit_budget(hits, 25)] == ["a", "c"]
    assert fit_budget([hit("z" * 400)], 10) == []  # never returns an oversized item
    assert len(fit_budget(hits, None, limit=2)) == 2


def test_keyword_query_drops_stop_words_but_never_empties_the_query():
    assert keyword_query("what does she say about Python for large projects?") == "say Python large projects"
    assert keyword_query("what is it?") == "what is it?"


def test_fusion_rewards_agreement_between_legs():
    from memroute.models import Memory

    def m(i):
        return Memory(id=f"id{i}", api_key_id="a", key=f"k{i}", content=f"c{i}", created_at=utcnow(),
                      updated_at=utcnow())

    a, b, c = m(1), m(2), m(3)
    hits = fuse([(a, 5.0), (b, 4.0)], [(b, 0.9), (c, 0.8)], k=60)
    assert hits[0].memory.id == "id2" and hits[0].tier == "hybrid"
    assert {h.tier for h in hits[1:]} == {"keyword", "vector"}


def test_fusion_ignores_keyword_hits_that_cover_too_little_of_the_query():
    from memroute.models import Memory

    def m(i, content):
        return Memory(id=f"id{i}", api_key_id="a", key=f"k{i}", content=content, created_at=utcnow(),
                      updated_at=utcnow())

    noise = m(1, "Went for a walk at the weekend")          # shares one word of four
    answer = m(2, "Makes chicken stock every Sunday morning")
    hits = fuse([(noise, 3.0)], [(answer, 0.6), (noise, 0.2)], k=60, query="weekend kitchen routine habits")
    assert hits[0].memory.id == "id2"
    assert "keyword" not in hits[1].ranks  # the partial keyword match did not count
    full = m(3, "Kitchen routine habits on the weekend")
    hits = fuse([(full, 3.0)], [(answer, 0.6)], k=60, query="weekend kitchen routine habits")
    assert hits[0].memory.id == "id3" and hits[0].ranks == {"keyword": 1}


def test_long_messages_keep_memories_that_match_one_of_their_topics():
    from memroute.models import Memory
    from memroute.retrieval.fusion import content_terms, coverage

    memory = Memory(id="m", api_key_id="a", key="decision:postgres", content="Postgres for this project",
                    created_at=utcnow(), updated_at=utcnow())
    message = content_terms("Plan the billing service for this project: which database and hosting, any TypeScript "
                            "libraries, and when should I deploy?")
    assert coverage(message, memory) == 0.5  # one word of a long message: counts half, not 1/9
    assert coverage(content_terms("weekend kitchen routine habits"), memory) == 0.0


def test_quantization_is_part_of_the_signature_and_a_change_rebuilds(manager, tmp_path):
    store = NumpyVectorStore()
    first = RetrievalEngine(manager, embedder=HashingEmbeddingSource(64), vector_store=store,
                            index_path=tmp_path / "index.db", background=False)
    add(manager, first, "alice", "quantised or not")
    first.flush()
    first.close()
    assert store.signature().endswith(":float32") and store.count() == 1
    second = RetrievalEngine(manager, embedder=HashingEmbeddingSource(64), vector_store=store,
                             index_path=tmp_path / "index.db", background=False, quantization="int8")
    assert store.signature().endswith(":int8")
    assert second.indexer.depth() == 1  # every memory queued again for the int8 index


def test_indexer_survives_a_failing_backend_and_flush_reports_instead_of_raising(tmp_path):
    from memroute.errors import BackendUnavailableError
    from memroute.retrieval.indexer import Indexer, IndexQueue

    class Markers:
        down = True

        def _check(self):
            if self.down:
                raise BackendUnavailableError("the database is closed")

        def pending_reindex(self, limit=100, api_key_id=None):
            self._check()
            return []

        def count_pending_reindex(self, api_key_id=None):
            self._check()
            return 0

        def mark_indexed(self, memories):
            return 0

        def mark_all_for_reindex(self):
            self._check()
            return 0

    markers = Markers()
    markers.down = False
    indexer = Indexer(fetch=lambda ids: {}, enumerate_memories=list, embedder=HashingEmbeddingSource(8),
                      store=NumpyVectorStore(), queue=IndexQueue(tmp_path / "q.db"), markers=markers)
    markers.down = True
    indexer.enqueue([])  # wakes the worker, whose next depth() call fails
    assert indexer.flush(timeout=0.2) is False
    assert "closed" in (indexer.last_error or "")
    assert indexer._thread is not None and indexer._thread.is_alive()
    markers.down = False
    assert indexer.flush(timeout=5) is True
    indexer.close()


def test_status_reports_the_embedding_cache(tmp_path):
    import memroute
    from memroute.config.serialization import to_jsonable

    with memroute.open({}, data_dir=str(tmp_path / "d")) as mem:
        mem.add(api_key_id="a", content="hello there")
        mem.search("hello", api_key_id="a")
        mem.search("hello", api_key_id="a")
        status = to_jsonable(mem.status())
    assert status["embedding"]["source"] == "static" and status["embedding"]["dimensions"] == 256
    assert status["embedding"]["cache_stats"]["hits"] >= 1
    assert status["vector_store"]["backend"] == "sqlite-vec"
    assert status["vector_store"]["signature"] == "static:minishlab/potion-base-8M:256:l2:float32"


def test_a_budgeted_search_sizes_its_candidates_to_the_budget_and_looks_deeper_for_small_memories(
        manager, tmp_path):
    from memroute.retrieval.engine import BUDGET_TOKENS_PER_MEMORY, MIN_CANDIDATES

    eng = RetrievalEngine(manager, embedder=None, vector_store=None)  # the keyword leg keeps every candidate
    assert eng.budget_depth(100, 1000) == -(-1000 // BUDGET_TOKENS_PER_MEMORY)
    assert eng.budget_depth(100, 100) == MIN_CANDIDATES and eng.budget_depth(100, 4000) == 100
    assert eng.budget_depth(10, 4000) == eng.candidate_depth(10)
    depths = []
    fetch = eng._fetch

    def spy(query, depth, max_tokens):
        depths.append(depth)
        return fetch(query, depth, max_tokens)

    eng._fetch = spy
    # 120 tiny memories (2 tokens each): 63 candidates hold 126 of the 1000 tokens, so it looks deeper and the
    # budget walk gets the full 100.
    for index in range(120):
        manager.create(NewMemory(api_key_id="alice", key=f"tea:{index}", content=f"tea {index}"))
    result = eng.search(q("tea", limit=100), max_tokens=1000)
    assert depths == [eng.budget_depth(100, 1000), 100] and len(result.hits) == 100
    # Memories of the assumed size fill the budget from the sized candidates alone.
    depths.clear()
    for index in range(120):
        manager.create(NewMemory(api_key_id="bob", key=f"coffee:{index}", content=f"coffee {index:03d} " + "x" * 52))
    result = eng.search(q("coffee", key="bob", limit=100), max_tokens=1000)
    assert depths == [eng.budget_depth(100, 1000)]
    assert sum(hit.tokens for hit in result.hits) > 1000 - BUDGET_TOKENS_PER_MEMORY
    # An unbudgeted search ranks at the full depth.
    depths.clear()
    eng.search(q("coffee", key="bob", limit=100))
    assert depths == [100]
