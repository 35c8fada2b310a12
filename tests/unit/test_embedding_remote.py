"""The remote source against a loopback OpenAI-compatible server: batching, auth, the reference's error
mapping (§9.2), response validation, and the SSRF guard in front of every request."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from memroute.errors import ConfigError, EmbeddingError, ValidationError
from memroute.testing.fakes import HashingEmbeddingSource
from memroute_builtins.embedding.remote import RemoteEmbeddingSource, RemoteSettings, embeddings_endpoint
from tests.servers.openai_embeddings import serve

KEY = "sk-very-secret-key"


@pytest.fixture(scope="module")
def server():
    with serve(api_key=KEY, slow_seconds=1.0) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(server):
    server.faults.clear()
    server.requests.clear()


def remote(server, **overrides) -> RemoteEmbeddingSource:
    options = {"base_url": server.base_url, "model": "embed-small", "api_key": KEY, "allow_private": True,
               "timeout": 5.0, **overrides}
    return RemoteEmbeddingSource(RemoteSettings(**options))


def expect(source, reason: str, texts=("hello",)) -> EmbeddingError:
    with pytest.raises(EmbeddingError) as info:
        source.embed_batch(list(texts))
    assert info.value.reason == reason, str(info.value)
    assert info.value.source == "remote"
    assert KEY not in str(info.value)
    return info.value


def test_vectors_match_the_servers_model_and_are_normalised(server):
    texts = ["alpha beta", "gamma", "delta epsilon zeta"]
    vectors = remote(server).embed_batch(texts)
    assert np.allclose(vectors, HashingEmbeddingSource(64).embed_batch(texts), atol=1e-6)
    request = server.requests[0]
    assert request["path"] == "/v1/embeddings"
    assert request["body"]["model"] == "embed-small" and request["body"]["input"] == texts
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"


def test_batches_by_batch_size(server):
    vectors = remote(server, batch_size=2).embed_batch([f"text {i}" for i in range(5)])
    assert vectors.shape == (5, 64)
    assert [len(r["body"]["input"]) for r in server.requests] == [2, 2, 1]


def test_empty_texts_are_not_sent(server):
    vectors = remote(server).embed_batch(["", "real words", "  "])
    assert server.requests[0]["body"]["input"] == ["real words"]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[0], vectors[2])


def test_only_empty_texts_probe_the_dimension_once(server):
    source = remote(server)
    assert source.embed_batch([""]).shape == (1, 64)
    source.embed_batch([""])
    assert len(server.requests) == 1


def test_out_of_order_response_is_reordered_by_index(server):
    texts = ["first text", "second one", "third thing"]
    server.fail_next("shuffled")
    vectors = remote(server).embed_batch(texts)
    assert np.allclose(vectors, HashingEmbeddingSource(64).embed_batch(texts), atol=1e-6)


def test_dimensions_option_is_sent_and_enforced(server):
    source = remote(server, dimensions=32)
    assert source.embed_batch(["a b c"]).shape == (1, 32)
    assert server.requests[0]["body"]["dimensions"] == 32
    assert source.signature().dimensions == 32


@pytest.mark.parametrize(("fault", "reason"), [(401, "no_key"), (403, "no_key"), (429, "rate_limited"),
                                               (500, "request_failed"), (502, "request_failed"),
                                               (400, "request_failed"), (404, "request_failed")])
def test_http_status_mapping(server, fault, reason):
    server.fail_next(fault)
    err = expect(remote(server), reason)
    assert str(fault) in str(err)
    if fault == 429:
        assert "retry after 7" in str(err)


def test_wrong_key_is_no_key(server):
    expect(remote(server, api_key="sk-wrong"), "no_key")
    expect(remote(server, api_key=None), "no_key")


def test_timeout(server):
    server.fail_next("slow")
    err = expect(remote(server, timeout=0.2), "timeout")
    assert "0.2" in str(err)


@pytest.mark.parametrize("fault", ["not_json", "missing_data", "wrong_count", "bad_index", "duplicate_index",
                                   "nan", "ragged", "empty_vector", "string_vector"])
def test_malformed_responses_are_request_failed(server, fault):
    server.fail_next(fault)
    err = expect(remote(server), "request_failed", texts=("one", "two", "three"))
    assert "response" in str(err) or "JSON" in str(err) or "sizes" in str(err)


def test_dimension_mismatch_with_configured_dimensions(server):
    source = remote(server)
    source.embed_batch(["x"])
    source.dimensions = 10  # as if the model behind the endpoint changed
    expect(source, "request_failed")


def test_redirects_are_not_followed(server):
    server.fail_next("redirect_metadata")
    err = expect(remote(server), "request_failed")
    assert "redirect" in str(err)
    assert len(server.requests) == 1


def test_loopback_endpoint_is_blocked_without_opt_in(server):
    err = expect(remote(server, allow_private=False), "blocked")
    assert "SSRF guard" in str(err) and "127.0.0.1" in str(err)
    assert server.requests == []  # nothing was sent


def test_allow_hosts_admits_the_loopback_endpoint(server):
    assert remote(server, allow_private=False, allow_hosts=("127.0.0.1",)).embed_batch(["x"]).shape == (1, 64)


def test_metadata_endpoint_is_blocked_even_with_allow_private():
    source = RemoteEmbeddingSource(RemoteSettings(base_url="http://169.254.169.254/v1", model="m",
                                                  allow_private=True))
    expect(source, "blocked")


def test_hostname_resolving_to_private_address_is_blocked():
    source = RemoteEmbeddingSource(RemoteSettings(base_url="https://embed.example.com/v1", model="m"),
                                   resolver=lambda host, port: ["10.0.0.7"])
    err = expect(source, "blocked")
    assert "embed.example.com" in str(err) and "10.0.0.7" in str(err)


def test_unresolvable_host_is_request_failed():
    def nxdomain(host, port):
        raise socket.gaierror(-2, "Name or service not known")

    source = RemoteEmbeddingSource(RemoteSettings(base_url="https://nope.invalid/v1", model="m"), resolver=nxdomain)
    expect(source, "request_failed")


def test_connection_refused_is_request_failed():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = RemoteEmbeddingSource(RemoteSettings(base_url=f"http://127.0.0.1:{port}/v1", model="m",
                                                  allow_private=True, timeout=2))
    expect(source, "request_failed")


@pytest.mark.parametrize(("options", "field"), [
    ({"base_url": "", "model": "m"}, "base_url"),
    ({"base_url": "https://api.example.com/v1", "model": ""}, "model"),
    ({"base_url": "ftp://api.example.com/v1", "model": "m"}, "base_url"),
    ({"base_url": "https://user:pw@api.example.com/v1", "model": "m"}, "base_url"),
    ({"base_url": "https://api.example.com/v1?key=abc", "model": "m"}, "base_url"),
    ({"base_url": "https://api.example.com/v1#frag", "model": "m"}, "base_url"),
])
def test_bad_configuration_is_a_config_error(options, field):
    with pytest.raises(ConfigError) as info:
        RemoteEmbeddingSource(RemoteSettings(**options))
    assert f"embedding.remote.{field}" in str(info.value)
    assert "pw@" not in str(info.value)


def test_endpoint_building():
    assert embeddings_endpoint("https://api.openai.com/v1") == "https://api.openai.com/v1/embeddings"
    assert embeddings_endpoint("https://api.openai.com/v1///") == "https://api.openai.com/v1/embeddings"
    assert embeddings_endpoint("http://h:8000/v1/embeddings/") == "http://h:8000/v1/embeddings"


def test_bad_input_is_a_validation_error(server):
    with pytest.raises(ValidationError):
        remote(server).embed_batch([b"bytes"])
    assert server.requests == []


def test_describe_hides_the_key(server):
    info = remote(server).describe()
    assert info["api_key"] == "set" and KEY not in repr(info)
    assert KEY not in repr(remote(server).settings)
