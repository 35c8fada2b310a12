"""Vector stores selected through ``memroute.open``: Qdrant local mode with default settings, the
docs/vectors.md examples as written, quantisation checked against the store's spec, ``auto`` by data."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

import memroute
from memroute.config.serialization import to_jsonable
from memroute.errors import ConfigError
from memroute.specs import VectorStoreSpec
from memroute.testing.numpy_store import NumpyVectorStore

DOC = Path(__file__).resolve().parents[2] / "docs" / "vectors.md"


def _open(tmp_path: Path, vectors: dict, **extra: object) -> memroute.Memroute:
    config = {"backends": {"main": {"type": "sqlite", "path": str(tmp_path / "m.db")}},
              "embedding": {"source": "static"}, "vectors": vectors, **extra}
    return memroute.open(config)


def _semantic_round_trip(mem: memroute.Memroute) -> None:
    mem.add(api_key_id="alice", content="I deploy everything with Kubernetes on weekends", key="k8s")
    mem.add(api_key_id="bob", content="Bob deploys with Kubernetes too", key="k8s")
    assert mem.flush(timeout=30)
    hits = mem.search("container orchestration deployments", api_key_id="alice", strategy="semantic").hits
    assert [h.memory.key for h in hits] == ["k8s"]
    assert {h.memory.api_key_id for h in hits} == {"alice"}  # the store filters by tenant


@pytest.mark.parametrize("quantization", ["float32", "int8", "binary"])
def test_qdrant_opens_with_default_settings_in_local_mode(tmp_path: Path, quantization: str) -> None:
    with _open(tmp_path, {"store": "qdrant", "quantization": quantization}) as mem:
        status = to_jsonable(mem.status())
        assert status["vector_store"]["backend"] == "qdrant" and status["vector_store"]["available"]
        _semantic_round_trip(mem)


def test_the_docs_examples_open_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [block for block in re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
              if re.search(r'store = "(sqlite-vec|qdrant|auto)"', block)]  # pgvector's needs a PostgreSQL primary
    assert len(blocks) >= 2
    for number, block in enumerate(blocks):
        folder = tmp_path / f"example{number}"
        folder.mkdir()
        monkeypatch.chdir(folder)
        (folder / "memroute.toml").write_text(block + '\n[embedding]\nsource = "static"\n', encoding="utf-8")
        with memroute.open("memroute.toml") as mem:
            _semantic_round_trip(mem)


def test_a_quantization_the_store_cannot_index_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"vectors.quantization: the sqlite-vec vector store indexes float32, int8"):
        _open(tmp_path, {"store": "sqlite-vec", "quantization": "binary"})


def test_auto_takes_the_store_with_the_highest_priority(tmp_path: Path, register_plugin, plugin_manager) -> None:
    made: list[NumpyVectorStore] = []

    def factory(settings: object, context: object) -> NumpyVectorStore:
        made.append(NumpyVectorStore())
        return made[-1]

    plugin = types.SimpleNamespace(memroute_vector_stores=memroute.hookimpl(
        lambda: [VectorStoreSpec(name="numpy-first", factory=factory, auto_priority=1000)]))
    register_plugin(plugin, name="numpy-plugin")
    mem = memroute.open({"backends": {"main": {"type": "sqlite", "path": str(tmp_path / "m.db")}},
                         "embedding": {"source": "static"}, "vectors": {"store": "auto"}}, plugins=plugin_manager)
    with mem:
        assert to_jsonable(mem.status())["vector_store"]["backend"] == made[0].store_name
        _semantic_round_trip(mem)
