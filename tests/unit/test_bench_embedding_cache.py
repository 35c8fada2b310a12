"""The benchmarks' disk cache of vectors (memroute.bench.embedding_cache): a text embedded once by a model, on one
side of a search, is read back from disk by any later run; another model, another side or another text never
hits. The wrapped source is the real static model (bundled); a counting subclass records what reaches it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from memroute.bench.embedding_cache import (
    DiskCachedEmbeddingSource,
    VectorCache,
    bench_opener,
    cached_embedder,
    vector_key,
)
from memroute.errors import ConfigError
from memroute.testing import EmbeddingSourceContract
from memroute_builtins.embedding.static import StaticEmbeddingSource, StaticSettings


class CountingStatic(StaticEmbeddingSource):
    """The real static source, counting the texts that reach it."""

    def __init__(self, settings: StaticSettings | None = None) -> None:
        super().__init__(settings)
        self.passages: list[str] = []
        self.queries: list[str] = []

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.passages += list(texts)
        return super().embed_batch(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return super().embed_query(text)


def test_a_miss_embeds_once_and_a_later_run_reads_it_from_disk(tmp_path) -> None:
    inner = CountingStatic()
    cache = VectorCache(tmp_path)
    first = DiskCachedEmbeddingSource(inner, cache).embed_batch(["Lives in Porto", "Prefers Rust", "Lives in Porto"])
    assert inner.passages == ["Lives in Porto", "Prefers Rust"]  # duplicates embedded once
    assert (cache.hits, cache.misses) == (0, 2)
    np.testing.assert_array_equal(first, StaticEmbeddingSource().embed_batch(["Lives in Porto", "Prefers Rust",
                                                                              "Lives in Porto"]))
    cache.close()

    reopened = VectorCache(tmp_path)  # another run: a new process would open the same file
    again_inner = CountingStatic()
    again = DiskCachedEmbeddingSource(again_inner, reopened).embed_batch(["Prefers Rust", "Lives in Porto"])
    assert again_inner.passages == [] and reopened.hits == 2 and len(reopened) == 2
    np.testing.assert_array_equal(again, first[[1, 0]])


def test_queries_and_passages_are_cached_apart(tmp_path) -> None:
    inner = CountingStatic()
    source = DiskCachedEmbeddingSource(inner, VectorCache(tmp_path))
    source.embed_batch(["where does the user live?"])
    vector = source.embed_query("where does the user live?")
    assert inner.queries == ["where does the user live?"]  # the passage did not answer for the query
    source.embed_query("where does the user live?")
    assert inner.queries == ["where does the user live?"]
    np.testing.assert_allclose(vector, StaticEmbeddingSource().embed_query("where does the user live?"), atol=1e-6)


def test_another_model_never_hits(tmp_path) -> None:
    cache = VectorCache(tmp_path)
    DiskCachedEmbeddingSource(CountingStatic(), cache).embed_batch(["Lives in Porto"])
    other = CountingStatic(StaticSettings(model="another/model-label"))
    DiskCachedEmbeddingSource(other, cache).embed_batch(["Lives in Porto"])
    assert other.passages == ["Lives in Porto"] and len(cache) == 2
    keys = {vector_key(s, m, side, "x") for s in ("static", "transformers") for m in ("a", "b")
            for side in ("query", "passage")}
    assert len(keys) == 8
    assert vector_key("static", "a", "passage", "x") != vector_key("static", "a", "passage", "x ")
    with pytest.raises(ValueError, match="side"):
        vector_key("static", "a", "document", "x")


def test_the_wrapper_reports_the_sources_identity_and_calibration(tmp_path) -> None:
    inner = StaticEmbeddingSource()
    source = DiskCachedEmbeddingSource(inner, VectorCache(tmp_path))
    assert (source.source, source.model, source.dimensions) == (inner.source, inner.model, inner.dimensions)
    assert source.fusion_keyword_weight == inner.fusion_keyword_weight
    assert source.relevance_calibration == inner.relevance_calibration
    assert source.query_content_words is True and source.signature() == inner.signature()


def test_an_unwritable_cache_dir_is_a_config_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="embedding cache"):
        VectorCache(blocker / "cache")


def test_a_service_opened_through_the_cache_searches_as_without_it(tmp_path) -> None:
    cache = VectorCache(tmp_path / "cache")
    assert cached_embedder(cache, {}, data_dir=str(tmp_path / "none"), embedding={"source": "none"}) is None
    open_service = bench_opener(cache, {})
    texts = ["Lives in Porto since 2024", "Prefers Rust for CLIs", "Allergic to cats"]
    rankings = []
    for name, opener in (("cached", open_service), ("plain", bench_opener(None, {}))):
        with opener(tmp_path / name, {"source": "static"}) as mem:
            for text in texts:
                mem.add(content=text, api_key_id="a")
            mem.add(content="Lives in Lisbon", api_key_id="b")
            assert mem.flush(timeout=60)
            result = mem.search("which language for command line tools", api_key_id="a", strategy="semantic",
                                min_score=0.0)
            assert {hit.memory.api_key_id for hit in result.hits} == {"a"}  # tenant isolation holds
            rankings.append([(hit.memory.content, round(hit.score, 5)) for hit in result.hits])
    assert rankings[0] == rankings[1] and rankings[0][0][0] == "Prefers Rust for CLIs"
    assert len(cache) == 5  # four memories and one query; the second service embedded without the cache


class TestDiskCachedSource(EmbeddingSourceContract):
    @pytest.fixture
    def source(self, tmp_path):
        return DiskCachedEmbeddingSource(StaticEmbeddingSource(), VectorCache(tmp_path))


def test_the_quality_bench_refuses_a_cache_dir_it_cannot_use(tmp_path, capsys) -> None:
    from memroute.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--quality", "--cache-dir", str(blocker / "cache")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "embedding cache" in err and "Traceback" not in err


def test_the_content_words_setting_can_be_tried_without_the_source_declaring_it(tmp_path) -> None:
    cache = VectorCache(tmp_path / "cache")
    declared = cached_embedder(cache, {}, data_dir=str(tmp_path), embedding={"source": "static"})
    tried = cached_embedder(cache, {}, query_content_words=False, data_dir=str(tmp_path),
                            embedding={"source": "static"})
    assert declared is not None and tried is not None
    assert declared.query_content_words is True and tried.query_content_words is False


def test_a_second_conversation_run_reads_every_vector_from_the_cache(tmp_path, capsys) -> None:
    from memroute.bench import conversations

    reports = []
    for run in ("first", "second"):
        output = tmp_path / f"{run}.json"
        conversations.main(["--models", "static", "--turns", "40", "--cache-dir", str(tmp_path / "cache"),
                            "--output", str(output)])
        reports.append(json.loads(output.read_text()))
    first, second = (report["embedding_cache"] for report in reports)
    assert first["misses"] > 0 and second["misses"] == 0 and second["hits"] > 0
    assert _recall(reports[0]) == _recall(reports[1])  # the same rankings from cached vectors
    assert "Conversations, facts questions, test split" in capsys.readouterr().out


def _recall(report: dict) -> dict:
    """The recall figures of a report, without its timings."""
    return {model: {form: {split: legs for split, legs in result.items() if split in ("dev", "test", "all")}
                    for form, result in forms.items()} for model, forms in report["results"].items()}
