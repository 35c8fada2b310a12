"""Qdrant store specifics: what local mode cannot show is observed through a recording client."""

from __future__ import annotations

import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from memroute.components import build_component, make_context
from memroute.errors import ConfigError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.vectors.qdrant import QdrantSettings, QdrantStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SIG = EmbeddingSignature(source="t", model="m", dimensions=16)


class RecordingClient(QdrantClient):
    """A real in-memory Qdrant that records the calls whose arguments local mode ignores."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(location=":memory:")
        self.init_kwargs = kwargs
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _record(self, name: str, kwargs: dict[str, Any]) -> None:
        self.calls.append((name, kwargs))

    def create_collection(self, collection_name: str, **kwargs: Any) -> bool:
        self._record("create_collection", kwargs)
        return super().create_collection(collection_name, **kwargs)

    def create_payload_index(self, collection_name: str, field_name: str, **kwargs: Any) -> Any:
        self._record("create_payload_index", {"field_name": field_name, **kwargs})
        return super().create_payload_index(collection_name, field_name, **kwargs)

    def query_points(self, collection_name: str, **kwargs: Any) -> Any:
        self._record("query_points", kwargs)
        return super().query_points(collection_name, **kwargs)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for call, kwargs in self.calls if call == name]


def _rows(count: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, 16)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _item(vector, key: str = "a", **fields) -> VectorItem:
    values = {"memory_id": str(uuid.uuid4()), "api_key_id": key, "session_id": None, "created_at": NOW,
              "expires_at": None, "vector": vector, **fields}
    return VectorItem(**values)


def _recording(tmp_path: Path, **options) -> tuple[QdrantStore, RecordingClient]:
    clients: list[RecordingClient] = []

    def factory(**kwargs: Any) -> RecordingClient:
        clients.append(RecordingClient(**kwargs))
        return clients[-1]

    store = QdrantStore(QdrantSettings(**options), ComponentContext(instance_name="q", data_dir=tmp_path),
                        client_factory=factory)
    return store, clients[0]


def test_registered_and_built_from_options(plugin_manager, tmp_path: Path) -> None:
    assert "qdrant" in plugin_manager.vector_stores()
    store = build_component(plugin_manager, "vector-store", "qdrant", {"location": ":memory:", "collection": "c1"},
                            context=make_context(plugin_manager, "qdrant", tmp_path), path="vectors")
    try:
        assert isinstance(store, QdrantStore) and store.collection == "c1" and store.bind(SIG)
    finally:
        store.close()


def test_default_is_local_mode_under_the_data_dir(tmp_path: Path) -> None:
    store = QdrantStore(QdrantSettings(), ComponentContext(instance_name="q", data_dir=tmp_path))
    try:
        assert store.local and store.target == str(tmp_path / "qdrant")
        store.bind(SIG)
        assert (tmp_path / "qdrant").is_dir()
    finally:
        store.close()


@pytest.mark.parametrize("options", [
    {"url": "http://127.0.0.1:6333", "path": "x"},
    {"location": "http://example"},
    {"shard_key_by_api_key": True},
    {"quantization": "int4"},
    {"collection": "bad name/../"},
    {"timeout": 0},
])
def test_bad_options_are_config_errors(plugin_manager, tmp_path: Path, options) -> None:
    with pytest.raises(ConfigError):
        build_component(plugin_manager, "vector-store", "qdrant", options,
                        context=make_context(plugin_manager, "qdrant", tmp_path), path="vectors")


def test_missing_client_names_the_install(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "qdrant_client", None)
    with pytest.raises(VectorStoreError, match=r"pip install 'memroute\[qdrant\]'"):
        QdrantStore(QdrantSettings(location=":memory:"), ComponentContext(instance_name="q", data_dir=tmp_path))


def test_collection_is_cosine_with_tenant_index_before_data(tmp_path: Path) -> None:
    store, client = _recording(tmp_path, location=":memory:")
    store.bind(SIG)
    created = client.named("create_collection")[0]
    assert created["vectors_config"] == models.VectorParams(size=16, distance=models.Distance.COSINE)
    assert created["quantization_config"] is None
    assert created["metadata"]["memroute_signature"] == str(SIG)
    indexes = {c["field_name"]: c["field_schema"] for c in client.named("create_payload_index")}
    assert indexes["api_key_id"] == models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    assert set(indexes) == {"api_key_id", "session_id", "created_at", "expires_at"}
    store.close()


@pytest.mark.parametrize("quantization,expected", [
    ("int8", models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(
        type=models.ScalarType.INT8, quantile=0.99, always_ram=True))),
    ("binary", models.BinaryQuantization(binary=models.BinaryQuantizationConfig(always_ram=True))),
])
def test_quantisation_is_configured_and_searches_rescore(tmp_path: Path, quantization, expected) -> None:
    store, client = _recording(tmp_path, location=":memory:")
    store.bind(SIG.with_quantization(quantization))
    assert client.named("create_collection")[0]["quantization_config"] == expected
    rows = _rows(5)
    store.upsert([_item(v) for v in rows])
    store.query(rows[0], SearchQuery(api_key_id="a", now=NOW), 3)
    params = client.named("query_points")[-1]["search_params"]
    assert params.quantization.rescore is True and params.quantization.oversampling == 2.0
    store.close()


def test_every_query_filters_by_owner_and_expiry(tmp_path: Path) -> None:
    store, client = _recording(tmp_path, location=":memory:")
    store.bind(SIG)
    store.upsert([_item(v) for v in _rows(3)])
    store.query(_rows(1)[0], SearchQuery(api_key_id="a", now=NOW, session_id="s", retention_days=7), 3)
    flt = client.named("query_points")[-1]["query_filter"]
    keys = {getattr(c, "key", None) for c in flt.must}
    assert {"api_key_id", "session_id", "created_at"} <= keys
    expiry = next(c for c in flt.must if isinstance(c, models.Filter))
    assert any(isinstance(c, models.IsNullCondition) for c in expiry.should)
    store.close()


def test_payload_holds_unix_times_and_null_expiry(tmp_path: Path) -> None:
    store = QdrantStore(QdrantSettings(location=":memory:"), ComponentContext(instance_name="q", data_dir=tmp_path))
    store.bind(SIG)
    forever, dated = _item(_rows(1)[0], session_id="s"), _item(_rows(1, 1)[0], expires_at=NOW + timedelta(days=1))
    store.upsert([forever, dated])
    points = {str(p.id): p.payload for p in store.client.retrieve(store.collection, [forever.memory_id,
                                                                                       dated.memory_id])}
    assert points[forever.memory_id] == {"api_key_id": "a", "session_id": "s", "created_at": NOW.timestamp(),
                                         "expires_at": None}
    assert points[dated.memory_id]["expires_at"] == (NOW + timedelta(days=1)).timestamp()
    store.close()


def test_foreign_collection_is_never_dropped(tmp_path: Path) -> None:
    store, client = _recording(tmp_path, location=":memory:", collection="theirs")
    client.create_collection("theirs", vectors_config=models.VectorParams(size=16, distance=models.Distance.DOT))
    with pytest.raises(VectorStoreError, match="not created by memroute"):
        store.bind(SIG)
    assert client.collection_exists("theirs")
    store.close()


def test_second_client_on_a_locked_folder_is_a_clear_error(tmp_path: Path) -> None:
    first = QdrantStore(QdrantSettings(), ComponentContext(instance_name="q", data_dir=tmp_path))
    try:
        with pytest.raises(VectorStoreError, match="already accessed"):
            QdrantStore(QdrantSettings(), ComponentContext(instance_name="q", data_dir=tmp_path))
    finally:
        first.close()


def test_unreachable_server_is_a_vector_store_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(VectorStoreError, match="qdrant failed"):
        QdrantStore(QdrantSettings(url=f"http://127.0.0.1:{port}", timeout=2),
                    ComponentContext(instance_name="q", data_dir=tmp_path))


def test_server_options_reach_the_client(tmp_path: Path) -> None:
    store, client = _recording(tmp_path, url="https://qdrant.example:6333", api_key="secret", timeout=3)
    assert client.init_kwargs == {"url": "https://qdrant.example:6333", "api_key": "secret", "timeout": 3}
    assert "secret" not in repr(store.settings) and "secret" not in str(store.describe())
    store.bind(SIG)
    store.upsert([_item(v) for v in _rows(2)])
    store.query(_rows(1)[0], SearchQuery(api_key_id="a", now=NOW), 2)
    assert client.named("query_points")[-1]["timeout"] == 3
    store.close()


def test_delete_expired_removes_expired_and_old_vectors_only(tmp_path: Path) -> None:
    store = QdrantStore(QdrantSettings(location=":memory:"), ComponentContext(instance_name="q", data_dir=tmp_path))
    store.bind(SIG)
    rows = _rows(4)
    keep = _item(rows[0])
    expired = _item(rows[1], expires_at=NOW - timedelta(hours=1))
    old = _item(rows[2], created_at=NOW - timedelta(days=40))
    future = _item(rows[3], key="b", expires_at=NOW + timedelta(days=1))
    store.upsert([keep, expired, old, future])
    assert store.delete_expired(NOW, retention_days=30) == 2
    assert store.ids() == {keep.memory_id, future.memory_id}
    store.close()


def test_health_uses_get_collections_in_local_mode(tmp_path: Path) -> None:
    store = QdrantStore(QdrantSettings(location=":memory:"), ComponentContext(instance_name="q", data_dir=tmp_path))
    result = store.health()
    assert result.ok and result.details["mode"] == "local"
    store.close()
    assert store.health().ok is False


def test_local_store_is_usable_from_several_threads(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = QdrantStore(QdrantSettings(), ComponentContext(instance_name="q", data_dir=tmp_path))
    store.bind(SIG)

    def write(seed: int) -> None:
        store.upsert([_item(v, key=f"t{seed}") for v in _rows(5, seed=seed)])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(4)))
    assert store.count() == 20 and all(store.count(f"t{s}") == 5 for s in range(4))
    store.close()
