"""Settings: defaults match the reference, file → env → overrides precedence, ${VAR} expansion, and field-level
ConfigErrors for invalid configuration."""

from __future__ import annotations

import textwrap
from pathlib import Path

import attrs
import pytest

from memroute.config.settings import (
    ENV_VARS,
    BackendsSettings,
    EmbeddingSettings,
    ExtractionSettings,
    LimitsSettings,
    ManagerSettings,
    McpSettings,
    MemorySettings,
    MemrouteSettings,
    ProxySettings,
    ServerSettings,
    UpstreamSettings,
    VectorSettings,
    load_settings,
)
from memroute.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memroute.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_defaults_match_the_reference_system():
    settings = load_settings({}, environ={})
    assert settings.memory.enabled is False
    assert settings.memory.max_tokens == 2000
    assert settings.memory.retention_days == 0  # memroute's own default: no retrieval window for facts
    assert settings.memory.delete_after_days == 0  # and nothing deleted for its age unless configured
    assert settings.server.maintenance_first_delay_s == 3600
    assert settings.memory.strategy == "hybrid"
    assert settings.memory.rrf_k == 60
    assert settings.memory.vec_top_k == 20
    assert settings.embedding.source == "auto"
    assert settings.embedding.static_enabled is True  # memroute ships the static weights
    assert settings.embedding.cache_max == 1000
    assert settings.embedding.cache_ttl_ms == 300_000
    assert settings.backends.primary == "main"
    assert settings.backends.instances["main"].type == "sqlite"


def test_file_shape_with_primary_fallbacks_and_instance_tables(tmp_path):
    path = write(tmp_path, """
        [memory]
        enabled = true
        strategy = "recent"

        [backends]
        primary = "main"
        fallbacks = ["copy"]

        [backends.main]
        type = "sqlite"
        path = "a.db"

        [backends.copy]
        type = "sqlite"
        path = "b.db"

        [embedding]
        source = "static"

        [vectors]
        store = "sqlite-vec"
        quantization = "int8"
    """)
    settings = load_settings(path, environ={})
    assert settings.memory.enabled is True
    assert settings.memory.strategy == "recent"
    assert settings.backends.fallbacks == ("copy",)
    assert settings.backends.instances["copy"].options == {"path": "b.db"}
    assert settings.vectors.quantization == "int8"


def test_exact_is_accepted_as_the_retrieval_name_for_recent():
    assert load_settings({"memory": {"strategy": "exact"}}, environ={}).memory.strategy == "recent"


def test_precedence_file_then_env_then_overrides(tmp_path):
    path = write(tmp_path, "[memory]\nmax_tokens = 100\nretention_days = 10\n")
    env = {"MEMORY_MAX_TOKENS": "200", "MEMORY_RRF_K": "7"}
    settings = load_settings(path, environ=env, memory={"max_tokens": 300})
    assert settings.memory.max_tokens == 300
    assert settings.memory.rrf_k == 7
    assert settings.memory.retention_days == 10


def test_config_path_from_memroute_config(tmp_path):
    path = write(tmp_path, "[memory]\nmax_tokens = 123\n")
    assert load_settings(None, environ={"MEMROUTE_CONFIG": str(path)}).memory.max_tokens == 123


def test_working_directory_memroute_toml_is_found(tmp_path, monkeypatch):
    write(tmp_path, "[memory]\nmax_tokens = 321\n")
    monkeypatch.chdir(tmp_path)
    assert load_settings(None, environ={}).memory.max_tokens == 321


def test_env_var_expansion_in_strings(tmp_path):
    path = write(tmp_path, """
        [backends.main]
        type = "sqlite"
        path = "${DB_DIR}/x.db"

        [embedding.remote]
        base_url = "${EMBED_URL:-http://127.0.0.1:9}"
    """)
    settings = load_settings(path, environ={"DB_DIR": "/data"})
    assert settings.backends.instances["main"].options["path"] == "/data/x.db"
    assert settings.embedding.options["remote"]["base_url"] == "http://127.0.0.1:9"


def test_missing_env_var_names_the_field(tmp_path):
    path = write(tmp_path, '[backends.main]\ntype = "sqlite"\npath = "${NOT_SET_ANYWHERE}"\n')
    with pytest.raises(ConfigError, match=r"backends\.main\.path: environment variable NOT_SET_ANYWHERE"):
        load_settings(path, environ={})


def test_reference_env_quirks():
    assert load_settings({}, environ={"MEMORY_VEC_QUANTIZATION": "fp16"}).vectors.quantization == "float32"
    assert load_settings({}, environ={"VECTOR_STORE_DISABLE_VEC": "true"}).vectors.store == "none"
    fallbacks = load_settings(
        {"backends": {"a": {"type": "sqlite"}, "b": {"type": "sqlite"}}},
        environ={"MEMROUTE_PRIMARY_BACKEND": "a", "MEMROUTE_FALLBACK_BACKENDS": "b"},
    ).backends
    assert fallbacks.primary == "a" and fallbacks.fallbacks == ("b",)


def test_db_path_shortcut_marks_the_primary_whatever_its_type():
    settings = load_settings({}, environ={}, db_path="x.db")
    assert settings.backends.instances["main"].db_path == "x.db"
    config = {"backends": {"primary": "notes", "notes": {"type": "sqlite", "path": "a.db"}}}
    marked = load_settings(config, environ={"MEMROUTE_DB": "b.db"}).backends.instances
    assert set(marked) == {"notes"}  # the file's primary, not a made-up "main"
    assert marked["notes"].db_path == "b.db" and marked["notes"].options == {"path": "a.db"}
    again = load_settings(load_settings(config, environ={"MEMROUTE_DB": "b.db"}), environ={})
    assert again.backends.instances["notes"].db_path == "b.db"


@pytest.mark.parametrize(
    ("config", "field", "problem"),
    [
        ({"memory": {"max_tokens": 16001}}, "memory.max_tokens", "must be in [0, 16000]"),
        ({"memory": {"retention_days": -1}}, "memory.retention_days", "must be in [0, 36500]"),
        ({"memory": {"delete_after_days": 36_501}}, "memory.delete_after_days", "must be in [0, 36500]"),
        ({"memory": {"types": {"chat": {"retention_days": 3}}}}, "memory.types.chat", "unknown memory type"),
        ({"memory": {"types": {"episodic": {"delete_after_days": -2}}}}, "memory.types['episodic'].delete_after_days",
         "must be in [0, 36500]"),
        ({"memory": {"types": {"episodic": {"keep": 2}}}}, "memory.types['episodic'].keep", "unknown field"),
        ({"memory": {"strategy": "fuzzy"}}, "memory.strategy", "must be one of"),
        ({"memory": {"enabled": "maybe"}}, "memory.enabled", "expected a boolean"),
        ({"memory": {"max_tokenz": 5}}, "memory.max_tokenz", "unknown field"),
        ({"memory": {"max_tokens": "lots"}}, "memory.max_tokens", "expected an integer"),
        ({"vectors": {"quantization": "int4"}}, "vectors.quantization", "must be one of"),
        ({"backends": {"primary": "ghost"}}, "backends", "ghost"),
        ({"backends": {"x": {"path": "a.db"}}}, "backends.x.type", "required"),
        ({"backends": {"x": 5}}, "backends.x", "expected a"),
        ({"embedding": {"nonsense": 1}}, "embedding.nonsense", "unknown field"),
        ({"manager": {"breaker_failures": 0}}, "manager.breaker_failures", "must be in"),
        ({"unknown_section": {}}, "unknown_section", "unknown field"),
        ({"proxy": {"server_timing": "maybe"}}, "proxy.server_timing", "expected a boolean"),
    ],
)
def test_invalid_configuration_names_the_field(config, field, problem):
    with pytest.raises(ConfigError) as info:
        load_settings(config, environ={})
    message = str(info.value)
    assert field in message and problem in message, message


def test_invalid_toml_is_a_config_error(tmp_path):
    path = write(tmp_path, "[memory\nenabled = true\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path, environ={})


def test_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml", environ={})


def test_settings_object_round_trips_with_overrides():
    base = load_settings({"memory": {"max_tokens": 5}}, environ={})
    again = load_settings(base, environ={}, memory={"enabled": True})
    assert again.memory.max_tokens == 5 and again.memory.enabled is True


SETTINGS_CLASSES = [MemrouteSettings, MemorySettings, BackendsSettings, EmbeddingSettings, VectorSettings,
                    ExtractionSettings, ManagerSettings, LimitsSettings, ServerSettings, ProxySettings,
                    UpstreamSettings, McpSettings]


def test_configuration_reference_documents_every_setting_and_env_var():
    text = DOCS.read_text(encoding="utf-8")
    missing = [f"{cls.__name__}.{f.name}" for cls in SETTINGS_CLASSES for f in attrs.fields(cls)
               if f"`{f.name}`" not in text and f"`[{f.name}]`" not in text]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"
    missing_env = [var for var in ENV_VARS if f"`{var}`" not in text]
    assert not missing_env, f"environment variables missing from docs/configuration.md: {missing_env}"
