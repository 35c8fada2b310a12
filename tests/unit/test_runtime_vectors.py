"""The runtime vector-store overrides (``memroute.retrieval.runtime_vectors``): how the stored qdrant settings apply on
top of ``[vectors]``, URL building, the key mask, and opening a deployment whose stored target is down."""

from __future__ import annotations

import logging

import pytest

import memroute
from memroute.config.settings import VectorSettings
from memroute.errors import ValidationError
from memroute.retrieval.runtime_vectors import effective_vectors, mask_secret, qdrant_url, validate_qdrant_change
from tests.servers.qdrant_rest import QdrantRestServer

LOCAL = VectorSettings(store="qdrant", options={"qdrant": {"path": "/data/q", "collection": "c"}})
SERVER = VectorSettings(store="qdrant", options={"qdrant": {"url": "https://q.internal:7000", "api_key": "file-key"}})


@pytest.mark.parametrize("host, port, url", [
    ("q.internal", None, "http://q.internal:6333"), ("q.internal", 7000, "http://q.internal:7000"),
    ("https://q.internal/", 7000, "https://q.internal:7000"), ("http://q.internal:8000", 7000, "http://q.internal:8000"),
    ("10.0.0.5", None, "http://10.0.0.5:6333"), ("http://[::1]", 1, "http://[::1]:1"),
])
def test_qdrant_url_follows_the_reference(host, port, url):
    assert qdrant_url(host, port) == url


@pytest.mark.parametrize("host", ["ftp://q", "http://u:p@q", "http://q/?x=1", "gopher://q:1"])
def test_unusable_hosts_are_refused(host):
    with pytest.raises(ValidationError):
        qdrant_url(host, None)


def test_overrides_on_top_of_the_file():
    auto = VectorSettings()
    assert effective_vectors(auto, {}) == auto
    assert effective_vectors(auto, {"host": "q"}) == auto  # kept for later: not enabled
    on = effective_vectors(auto, {"enabled": True, "host": "q", "port": 1, "api_key": "k", "quantization": "int8"})
    assert on.store == "qdrant"
    assert on.options["qdrant"] == {"url": "http://q:1", "api_key": "k", "quantization": "int8"}
    assert effective_vectors(auto, {"enabled": False}) == auto
    assert effective_vectors(LOCAL, {"enabled": False}).store == "auto"  # the reference's memoryVectorStore=auto
    moved = effective_vectors(LOCAL, {"host": "q"}).options["qdrant"]
    assert moved == {"url": "http://q:6333", "collection": "c"}  # a server replaces the local folder
    assert effective_vectors(SERVER, {"port": 8000}).options["qdrant"]["url"] == "https://q.internal:8000"
    assert effective_vectors(SERVER, {"api_key": ""}).options["qdrant"]["api_key"] is None  # "" removes it


def test_validation_names_every_bad_field():
    with pytest.raises(ValidationError) as caught:
        validate_qdrant_change({"port": 0, "host": 3, "bogus": 1, "collection": "a/b"}, embedding_model="m")
    assert {field for field, _ in caught.value.problems} == {"port", "host", "bogus", "collection"}
    assert validate_qdrant_change({"embeddingModel": "m", "apiKey": "", "port": None}, embedding_model="m") == {
        "api_key": "", "port": None}


def test_the_mask_shows_at_most_four_characters():
    assert mask_secret("abcdefghijkl1234") == "***1234"
    assert mask_secret("short") == "***" and mask_secret("") is None and mask_secret(None) is None


def test_an_unreachable_stored_target_opens_on_the_file_store(tmp_path, caplog):
    with QdrantRestServer() as qdrant, memroute.open(data_dir=str(tmp_path)) as mem:
        mem.qdrant_settings({"enabled": True, "host": qdrant.url})
        assert mem.status().vector_store["backend"] == "qdrant"
    with caplog.at_level(logging.WARNING), memroute.open(data_dir=str(tmp_path)) as mem:  # the server is gone
        assert mem.status().vector_store["backend"] == "sqlite-vec"
        assert mem.qdrant_settings()["enabled"] is True and mem.qdrant_settings()["switching"] is True
    assert "do not open" in caplog.text
