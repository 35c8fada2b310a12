"""``auto`` resolution, explicit choices (built-in and third-party), ``none``, and building the source."""

from __future__ import annotations

import types

import attrs
import pytest

import memroute
from memroute.config.settings import EmbeddingSettings, load_settings
from memroute.embedding import CachedEmbeddingSource, Resolution, build_embedding_source, resolve
from memroute.errors import ConfigError, EmbeddingError, UnknownComponentError
from memroute.specs import EmbeddingSourceSpec
from memroute.testing.fakes import HashingEmbeddingSource
from memroute_builtins.embedding.remote import RemoteEmbeddingSource
from memroute_builtins.embedding.static import StaticEmbeddingSource

REMOTE = {"remote": {"base_url": "https://api.example.com/v1", "model": "text-embedding-3-small"}}


def settings(**kwargs) -> EmbeddingSettings:
    return EmbeddingSettings(**kwargs)


def test_fresh_install_auto_resolves_to_static(plugin_manager):
    resolution = resolve(load_settings(use_env=False).embedding, plugin_manager)
    assert resolution == Resolution(source="static", reason=resolution.reason, requested="auto")
    assert "static" in resolution.reason


def test_auto_prefers_a_configured_remote(plugin_manager):
    assert resolve(settings(options=REMOTE), plugin_manager).source == "remote"


def test_auto_ignores_an_incomplete_remote_and_says_so(plugin_manager):
    resolution = resolve(settings(options={"remote": {"base_url": "https://api.example.com/v1"}}), plugin_manager)
    assert resolution.source == "static"
    assert "incomplete" in resolution.reason and "model" in resolution.reason


def test_auto_falls_to_transformers_then_none(plugin_manager, monkeypatch):
    assert resolve(settings(static_enabled=False, transformers_enabled=True), plugin_manager).source == "transformers"
    none = resolve(settings(static_enabled=False), plugin_manager)
    assert none.source is None and "keyword" in none.reason
    monkeypatch.setattr("memroute_builtins.embedding.transformers.missing_dependencies", lambda *args: ["onnxruntime"])
    missing = resolve(settings(static_enabled=False, transformers_enabled=True), plugin_manager)
    assert missing.source is None and "memroute[transformers]" in missing.reason


def test_none_means_keyword_only(plugin_manager):
    resolution = resolve(settings(source="none", options=REMOTE), plugin_manager)
    assert resolution.source is None and "keyword" in resolution.reason


@pytest.mark.parametrize("name", ["static", "transformers", "remote"])
def test_explicit_builtin_choice_wins_over_enable_flags(plugin_manager, name):
    resolution = resolve(settings(source=name, static_enabled=False, options=REMOTE), plugin_manager)
    assert resolution.source == name and resolution.requested == name


def test_explicit_remote_without_endpoint_is_no_source(plugin_manager):
    resolution = resolve(settings(source="remote"), plugin_manager)
    assert resolution.source is None and resolution.reason.startswith("no_key")


def test_unknown_source_name_raises_naming_installed(plugin_manager):
    with pytest.raises(UnknownComponentError) as info:
        resolve(settings(source="nope"), plugin_manager)
    assert "nope" in str(info.value) and "static" in str(info.value)


@attrs.frozen(kw_only=True)
class HashSettings:
    dimensions: int = 32


def _hashing_plugin():

    def factory(s, context):
        return HashingEmbeddingSource(s.dimensions)

    @memroute.hookimpl
    def memroute_embedding_sources():
        yield EmbeddingSourceSpec(name="hashing", factory=factory, settings_class=HashSettings)

    return types.SimpleNamespace(memroute_embedding_sources=memroute_embedding_sources)


def test_third_party_source_by_name(plugin_manager, register_plugin, tmp_path):
    register_plugin(_hashing_plugin(), name="hashing-plugin")
    conf = settings(source="hashing", options={"hashing": {"dimensions": 48}})
    source, resolution = build_embedding_source(conf, plugin_manager, tmp_path)
    assert resolution.source == "hashing"
    assert isinstance(source, CachedEmbeddingSource) and isinstance(source.inner, HashingEmbeddingSource)
    assert source.embed("hello").shape == (48,)


def test_build_wraps_in_cache_with_configured_sizes(plugin_manager, tmp_path):
    source, _ = build_embedding_source(settings(cache_max=7, cache_ttl_ms=1234), plugin_manager, tmp_path)
    assert isinstance(source, CachedEmbeddingSource) and isinstance(source.inner, StaticEmbeddingSource)
    assert source.cache.max_entries == 7 and source.cache.ttl_seconds == pytest.approx(1.234)
    assert not source.inner.loaded  # building does not load the model: loading is lazy


def test_build_without_cache(plugin_manager, tmp_path):
    source, _ = build_embedding_source(settings(cache_max=0), plugin_manager, tmp_path)
    assert isinstance(source, StaticEmbeddingSource)


def test_build_none(plugin_manager, tmp_path):
    source, resolution = build_embedding_source(settings(source="none"), plugin_manager, tmp_path)
    assert source is None and resolution.source is None


def test_build_remote_from_options(plugin_manager, tmp_path):
    source, resolution = build_embedding_source(settings(options=REMOTE), plugin_manager, tmp_path)
    assert resolution.source == "remote"
    assert isinstance(source, CachedEmbeddingSource) and isinstance(source.inner, RemoteEmbeddingSource)
    assert source.inner.endpoint == "https://api.example.com/v1/embeddings"


def test_bad_source_options_are_config_errors_naming_the_field(plugin_manager, tmp_path):
    with pytest.raises(ConfigError) as info:
        build_embedding_source(settings(source="static", options={"static": {"batch_size": 0}}), plugin_manager,
                               tmp_path)
    assert "embedding.static" in str(info.value)
    with pytest.raises(ConfigError):
        build_embedding_source(settings(source="static", options={"static": {"bogus": 1}}), plugin_manager, tmp_path)
    with pytest.raises(ConfigError) as info:
        build_embedding_source(settings(options={"remote": {"base_url": "http://u:secret@example.com/v1",
                                                            "model": "m"}}), plugin_manager, tmp_path)
    assert "secret" not in str(info.value)


def _failing_plugin():
    def factory(s, context):
        raise EmbeddingError("needs a thing: pip install thing", reason="model_load_failed")

    @memroute.hookimpl
    def memroute_embedding_sources():
        yield EmbeddingSourceSpec(name="remote-ish", factory=factory)

    return types.SimpleNamespace(memroute_embedding_sources=memroute_embedding_sources)


def test_explicit_source_that_cannot_start_raises(plugin_manager, register_plugin, tmp_path):
    register_plugin(_failing_plugin(), name="failing")
    with pytest.raises(EmbeddingError):
        build_embedding_source(settings(source="remote-ish"), plugin_manager, tmp_path)


def test_auto_source_that_cannot_start_degrades_to_keyword_with_reason(plugin_manager, tmp_path, monkeypatch):
    monkeypatch.setattr("memroute_builtins.embedding.transformers.missing_dependencies", lambda *args: ["onnxruntime"])
    source, resolution = build_embedding_source(settings(static_enabled=False, transformers_enabled=True),
                                                plugin_manager, tmp_path)
    assert source is None and resolution.source is None
    assert "memroute[transformers]" in resolution.reason


def test_env_selects_the_source(monkeypatch, plugin_manager):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")
    assert resolve(load_settings().embedding, plugin_manager).source is None
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "auto")
    monkeypatch.setenv("MEMORY_STATIC_ENABLED", "false")
    assert resolve(load_settings().embedding, plugin_manager).source is None


def test_toml_remote_table(tmp_path, plugin_manager, monkeypatch):
    monkeypatch.setenv("EMBED_KEY", "sk-from-env")
    path = tmp_path / "memroute.toml"
    path.write_text('[embedding.remote]\nbase_url = "https://api.example.com/v1"\nmodel = "m"\n'
                    'api_key = "${EMBED_KEY}"\n')
    conf = load_settings(path).embedding
    source, resolution = build_embedding_source(conf, plugin_manager, tmp_path)
    assert resolution.source == "remote"
    assert source.inner.settings.api_key == "sk-from-env"
    assert "sk-from-env" not in repr(source.inner.settings)


def test_built_resolution_carries_model_and_dimensions(plugin_manager, tmp_path):
    _, resolution = build_embedding_source(settings(), plugin_manager, tmp_path)
    assert resolution.to_dict() == {"source": "static", "model": "minishlab/potion-base-8M", "dimensions": 256,
                                    "reason": resolution.reason, "requested": "auto"}
