"""Reranking: the ``memroute_rerankers`` hook, the ``remote`` reranker against a loopback server speaking the
Cohere / Jina ``/v1/rerank`` shape (a paid rerank API cannot exist here, so the server in
tests/servers/rerank_api.py stands in for it), and the engine's use of it: applied and named in the
provenance, or — when it fails — the fused order kept and the result marked degraded with the reason."""

from __future__ import annotations

import pytest

import memroute
from memroute.config.serialization import to_jsonable
from memroute.errors import ConfigError, RerankError
from memroute.interfaces import Reranker, RerankResult
from memroute.specs import RerankerSpec
from memroute_builtins.rerankers.remote import RemoteReranker, RemoteRerankSettings, rerank_endpoint
from tests.servers.rerank_api import rerank_server

DOCS = ["Drinks oat milk coffee", "Lisbon trip in June", "Loves the June trip to Lisbon with family"]


@pytest.fixture(scope="module")
def server():
    with rerank_server(api_key="sk-test", slow_seconds=1.0) as state:
        yield state


@pytest.fixture(autouse=True)
def _reset(server):
    server.faults.clear()
    server.requests.clear()


def remote(server, **overrides) -> RemoteReranker:
    options = {"base_url": server.base_url, "model": "jina-reranker-v2", "api_key": "sk-test",
               "allow_private": True, "timeout": 2.0, **overrides}
    return RemoteReranker(RemoteRerankSettings(**options))


def test_reranks_in_the_cohere_jina_shape(server):
    results = remote(server).rerank("June trip Lisbon family", DOCS)
    assert [r.index for r in results] == [2, 1, 0]
    assert results[0].score > results[1].score > results[2].score
    request = server.requests[-1]
    assert request["path"] == "/v1/rerank"
    assert request["body"] == {"model": "jina-reranker-v2", "query": "June trip Lisbon family",
                               "documents": DOCS, "top_n": 3}
    assert request["headers"]["Authorization"] == "Bearer sk-test"


def test_endpoint_naming():
    assert rerank_endpoint("https://api.jina.ai/v1/") == "https://api.jina.ai/v1/rerank"
    assert rerank_endpoint("https://api.cohere.com/v2/rerank") == "https://api.cohere.com/v2/rerank"


@pytest.mark.parametrize(("fault", "reason"), [(500, "request_failed"), (429, "rate_limited"),
                                               ("not_json", "request_failed"), ("bad_index", "request_failed"),
                                               ("empty", "request_failed")])
def test_failures_are_typed_rerank_errors(server, fault, reason):
    server.fail_next(fault)
    with pytest.raises(RerankError) as info:
        remote(server).rerank("June", DOCS)
    assert info.value.reason == reason
    assert "sk-test" not in str(info.value)


def test_wrong_key_is_no_key(server):
    with pytest.raises(RerankError) as info:
        remote(server, api_key="wrong").rerank("June", DOCS)
    assert info.value.reason == "no_key" and "wrong" not in str(info.value)


def test_timeout_is_bounded(server):
    server.fail_next("slow")
    with pytest.raises(RerankError) as info:
        remote(server, timeout=0.2).rerank("June", DOCS)
    assert info.value.reason == "timeout"


def test_ssrf_guard_blocks_loopback_and_metadata(server):
    with pytest.raises(RerankError) as info:
        remote(server, allow_private=False).rerank("June", DOCS)
    assert info.value.reason == "blocked"
    with pytest.raises((RerankError, ConfigError)):
        remote(server, base_url="http://169.254.169.254/v1", allow_private=True).rerank("June", DOCS)
    assert not server.requests


@pytest.mark.parametrize("options", [{"base_url": ""}, {"model": ""}, {"base_url": "http://u:p@example.com/v1"},
                                     {"base_url": "ftp://example.com"}, {"base_url": "https://x.example/v1?k=1"}])
def test_bad_configuration_is_a_config_error(server, options):
    with pytest.raises(ConfigError):
        remote(server, **options)


# --- the engine ----------------------------------------------------------------------------------------

def open_service(tmp_path, server, **rerank):
    from memroute.testing.fakes import HashingEmbeddingSource
    from memroute.testing.numpy_store import NumpyVectorStore

    # min_score 0: these tests are about the reranker's order over every candidate of a fake embedder
    config = {"memory": {"rerank_enabled": True, "rerank_provider_model": "jina/jina-reranker-v2", "min_score": 0.0},
              "rerank": {"reranker": "remote", "base_url": server.base_url, "api_key": "sk-test",
                         "allow_private": True, "timeout": 0.3, **rerank}}
    return memroute.open(config, data_dir=str(tmp_path), embedder=HashingEmbeddingSource(64),
                         vector_store=NumpyVectorStore())


def seed(mem):
    for i, content in enumerate(DOCS):
        mem.add(api_key_id="alice", key=f"k{i}", content=content)
    mem.add(api_key_id="bob", key="b", content="June trip Lisbon family, bob's")
    mem.flush()


def test_engine_applies_the_reranker_and_names_it(tmp_path, server):
    with open_service(tmp_path, server) as mem:
        seed(mem)
        result = mem.search("June trip Lisbon family", api_key_id="alice", strategy="hybrid", limit=3)
        assert result.provenance.rerank == "remote:jina/jina-reranker-v2"
        assert not result.provenance.degraded and result.provenance.rerank_error is None
        assert [h.memory.key for h in result] == ["k2", "k1", "k0"]
        assert [h.ranks["rerank"] for h in result] == [1, 2, 3]
        assert result.hits[0].leg_scores["rerank"] == result.hits[0].score
        assert server.requests[-1]["body"]["model"] == "jina/jina-reranker-v2"
        assert all("bob" not in d for d in server.requests[-1]["body"]["documents"])  # tenant-scoped
        status = to_jsonable(mem.status())
        assert status["rerank"]["enabled"] and status["rerank"]["model"] == "jina/jina-reranker-v2"


def test_flat_rerank_options_without_a_reranker_name_use_remote(tmp_path, server):
    # docs/configuration.md calls "remote" the default; flat options without `reranker` used to be a ConfigError.
    from memroute.testing.fakes import HashingEmbeddingSource
    from memroute.testing.numpy_store import NumpyVectorStore

    config = {"memory": {"rerank_enabled": True, "rerank_provider_model": "jina/jina-reranker-v2"},
              "rerank": {"base_url": server.base_url, "api_key": "sk-test", "allow_private": True}}
    with memroute.open(config, data_dir=str(tmp_path), embedder=HashingEmbeddingSource(64),
                       vector_store=NumpyVectorStore()) as mem:
        seed(mem)
        result = mem.search("June trip Lisbon family", api_key_id="alice", strategy="hybrid", limit=3)
        assert result.provenance.rerank == "remote:jina/jina-reranker-v2" and server.requests


def test_a_failing_reranker_keeps_the_fused_order_visibly(tmp_path, server):
    with open_service(tmp_path, server) as mem:
        seed(mem)
        plain = mem.search("June trip Lisbon family", api_key_id="alice", strategy="hybrid", limit=3)
        for fault in (503, "slow"):
            server.fail_next(fault)
            result = mem.search("June trip Lisbon family", api_key_id="alice", strategy="hybrid", limit=3)
            assert result.provenance.degraded and result.provenance.rerank is None
            assert "rerank failed" in (result.provenance.reason or "")
            assert result.provenance.rerank_error
            assert {h.memory.key for h in result} == {h.memory.key for h in plain}
            assert all("rerank" not in h.ranks for h in result)


def test_reranking_never_runs_on_the_recency_path(tmp_path, server):
    with open_service(tmp_path, server) as mem:
        seed(mem)
        result = mem.search("June", api_key_id="alice", strategy="exact")
        assert result.provenance.rerank is None and not server.requests


def test_rerank_is_off_by_default_and_a_broken_config_is_a_config_error(tmp_path, server):
    with memroute.open({}, data_dir=str(tmp_path / "a")) as mem:
        assert mem.status().rerank["enabled"] is False
    with pytest.raises(ConfigError):
        memroute.open({"memory": {"rerank_enabled": True}, "rerank": {"base_url": server.base_url}},
                      data_dir=str(tmp_path / "b"))


def test_a_third_party_reranker_is_found_through_the_hook(tmp_path, plugin_manager, register_plugin):
    class Reverse(Reranker):
        name = "reverse"

        def rerank(self, query, documents, *, top_n=None):
            return [RerankResult(index=i, score=float(i)) for i in range(len(documents))]

    class Plugin:
        @memroute.hookimpl
        def memroute_rerankers(self):
            yield RerankerSpec(name="reverse", factory=lambda settings, context: Reverse())

    register_plugin(Plugin(), name="reverse-reranker")
    assert "reverse" in plugin_manager.rerankers()
    from memroute.service import Memroute
    from memroute.testing.fakes import HashingEmbeddingSource
    from memroute.testing.numpy_store import NumpyVectorStore

    with Memroute.open({"memory": {"rerank_enabled": True, "min_score": 0.0}, "rerank": {"reranker": "reverse"}},
                                data_dir=str(tmp_path), plugins=plugin_manager,
                                embedder=HashingEmbeddingSource(64), vector_store=NumpyVectorStore()) as mem:
        seed(mem)
        result = mem.search("June trip Lisbon family", api_key_id="alice", limit=3)
        assert result.provenance.rerank == "reverse"
        assert [h.ranks["rerank"] for h in result] == [1, 2, 3]
