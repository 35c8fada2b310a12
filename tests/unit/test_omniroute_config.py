"""The reference system's environment variables and settings JSON (issue 31, item 3): each variable mapped,
ignored with a warning naming it, or refused; ``memroute config import --from omniroute`` writes a
memroute.toml that loads."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import memroute
from memroute.config.omniroute import REFERENCE_ENV, OmnirouteEnvWarning
from memroute.config.settings import load_settings
from memroute.errors import ConfigError
from tests.servers.qdrant_rest import QdrantRestServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "omniroute-compatibility.md"

# What GET /api/settings/memory answers on a reference install (all 17 fields).
REFERENCE_SETTINGS = {
    "enabled": True, "maxTokens": 3000, "retentionDays": 90, "strategy": "recent", "skillsEnabled": True,
    "embeddingSource": "auto", "embeddingProviderModel": "openai/text-embedding-3-small",
    "customBaseUrl": "http://127.0.0.1:11434/v1", "customModelId": "nomic-embed-text",
    "transformersEnabled": False, "staticEnabled": True, "rerankEnabled": False, "rerankProviderModel": None,
    "vectorStore": "sqlite-vec", "primaryBackend": "sqlite", "fallbackBackends": ["obsidian", "team", "notion"],
    "backendConfigs": {"obsidian": {"baseUrl": "https://127.0.0.1:27124"},
                       "team": {"baseUrl": "https://memory.example.com/api", "apiKey": "t0k", "timeout": 5000,
                                "headers": {"X-Team": "core"}, "endpoints": {"search": "find"}}},
}


def settings(**environ: str):
    return load_settings({}, environ=environ)


# --- environment variables ------------------------------------------------------------------------------------

def test_qdrant_variables_configure_the_qdrant_store_and_the_file_wins():
    loaded = settings(QDRANT_HOST="qdrant.internal", QDRANT_PORT="7000", QDRANT_API_KEY="k",
                      QDRANT_COLLECTION="team_memories")
    assert loaded.vectors.options["qdrant"] == {"url": "http://qdrant.internal:7000", "api_key": "k",
                                                "collection": "team_memories"}
    assert settings(QDRANT_HOST="https://q.example.com").vectors.options["qdrant"]["url"] == "https://q.example.com:6333"
    from_file = load_settings({"vectors": {"qdrant": {"url": "http://file:6333"}}},
                              environ={"QDRANT_HOST": "env-host", "QDRANT_API_KEY": "k"})
    assert from_file.vectors.options["qdrant"] == {"url": "http://file:6333", "api_key": "k"}


def test_a_qdrant_from_the_environment_is_used_for_real(tmp_path, monkeypatch):
    with QdrantRestServer(api_key="s3cret") as qdrant:
        for name, value in {"QDRANT_HOST": "127.0.0.1", "QDRANT_PORT": str(qdrant.port), "QDRANT_API_KEY": "s3cret",
                            "MEMORY_VECTOR_STORE": "qdrant", "MEMORY_EMBEDDING_SOURCE": "static"}.items():
            monkeypatch.setenv(name, value)
        with memroute.open(data_dir=str(tmp_path / "data")) as mem:
            mem.add(api_key_id="a", content="Keeps bees on the roof of the office", key="hobby:bees")
            assert mem.flush(30)
            assert mem.status().vector_store["backend"] == "qdrant"
            hits = mem.search("apiculture on a rooftop", api_key_id="a", strategy="semantic").hits
            assert [h.memory.key for h in hits] == ["hobby:bees"]
        assert any(method == "PUT" and "/collections/" in path for method, path in qdrant.requests)


@pytest.mark.parametrize(("name", "value"), [
    ("MEMORY_TRANSFORMERS_MODEL", "Xenova/bge-small-en"), ("MEMORY_STATIC_MODEL", "minishlab/potion-base-32M"),
    ("MEMORY_STATIC_CACHE_DIR", "/var/cache/omniroute"), ("DATA_DIR", "/home/me/.omniroute"),
    ("QDRANT_EMBEDDING_MODEL", "openai/text-embedding-3-small"), ("QDRANT_VECTOR_SIZE", "1536"),
    ("QDRANT_HNSW_EF_CONSTRUCT", "128"), ("QDRANT_PORT", "6333"), ("OUTBOUND_SSRF_GUARD_ENABLED", "false"),
    ("OMNIROUTE_MCP_ENFORCE_SCOPES", "false"),
])
def test_an_ignored_variable_warns_naming_it(name, value):
    with pytest.warns(OmnirouteEnvWarning, match=rf"^{name} is set but memroute does not use it: "):
        loaded = settings(**{name: value})
    assert loaded == load_settings({}, environ={})


@pytest.mark.parametrize(("value", "model"), [("Xenova/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
                                              ("Xenova/multilingual-e5-small", "multilingual-e5-small")])
def test_a_transformers_model_memroute_runs_is_mapped(value, model):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = settings(MEMORY_TRANSFORMERS_MODEL=value)
    assert loaded.embedding.options["transformers"] == {"model": model}


@pytest.mark.parametrize(("name", "value"), [
    ("MEMORY_STATIC_MODEL", "minishlab/potion-base-8M"),
    ("OUTBOUND_SSRF_GUARD_ENABLED", "true"), ("OMNIROUTE_MCP_ENFORCE_SCOPES", "true"),
    ("OMNIROUTE_ALLOW_PRIVATE_PROVIDER_URLS", "false"),
])
def test_a_variable_memroute_already_honours_is_silent(name, value):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings(**{name: value}) == load_settings({}, environ={})


@pytest.mark.parametrize("name", ["OMNIROUTE_ALLOW_PRIVATE_PROVIDER_URLS", "OMNIROUTE_ALLOW_LOCAL_PROVIDER_URLS"])
def test_provider_url_policy_maps_to_the_remote_embedding_source(name):
    assert settings(**{name: "true"}).embedding.options["remote"] == {"allow_private": True}


@pytest.mark.parametrize(("name", "value"), [("QDRANT_PORT", "abc"), ("QDRANT_PORT", "70000"),
                                             ("OMNIROUTE_MCP_ENFORCE_SCOPES", "maybe"),
                                             ("OUTBOUND_SSRF_GUARD_ENABLED", "2")])
def test_a_meaningless_value_is_refused_naming_the_variable(name, value):
    with pytest.raises(ConfigError, match=rf"^{name}: expected"):
        settings(**{name: value})


def test_obsidian_and_notion_variables_fill_what_a_backend_leaves_unset():
    config = {"backends": {"primary": "main", "fallbacks": ["vault", "wiki", "pinned"],
                           "main": {"type": "sqlite"}, "vault": {"type": "obsidian"},
                           "wiki": {"type": "notion", "database_id": "0" * 32},
                           "pinned": {"type": "obsidian", "api_key": "own", "base_url": "https://127.0.0.1:1"}}}
    loaded = load_settings(config, environ={"OBSIDIAN_API_URL": "https://127.0.0.1:27124", "OBSIDIAN_API_KEY": "ok",
                                            "NOTION_API_URL": "https://api.notion.com/v1", "NOTION_API_KEY": "nt"})
    instances = loaded.backends.instances
    assert instances["vault"].options == {"base_url": "https://127.0.0.1:27124", "api_key": "ok"}
    assert instances["wiki"].options == {"database_id": "0" * 32, "base_url": "https://api.notion.com/v1",
                                         "token": "nt"}
    assert instances["pinned"].options == {"api_key": "own", "base_url": "https://127.0.0.1:1"}
    assert instances["main"].options == {}


def test_the_docs_table_lists_every_variable():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## OmniRoute's other environment variables", 1)[1].split("\n## ", 1)[0]
    for name in REFERENCE_ENV:
        assert f"`{name}`" in section, name


# --- the settings JSON ------------------------------------------------------------------------------------------

@pytest.fixture
def run(run_cli):
    return run_cli


def test_config_import_writes_a_memroute_toml_that_loads(run, tmp_path):
    source = tmp_path / "settings.json"
    source.write_text(json.dumps(REFERENCE_SETTINGS))
    code, _, err = run("config", "import", "--from", "omniroute", str(source), "--output", str(tmp_path / "m.toml"))
    assert code == 0, err
    assert "note: skillsEnabled" in err and "note: backends.notion" in err and "note: backends.obsidian" in err
    loaded = load_settings(tmp_path / "m.toml", environ={"OBSIDIAN_API_KEY": "from-env"})
    assert (loaded.memory.enabled, loaded.memory.max_tokens, loaded.memory.retention_days,
            loaded.memory.strategy) == (True, 3000, 90, "recent")
    assert (loaded.embedding.source, loaded.embedding.static_enabled) == ("auto", True)
    assert loaded.embedding.options["remote"] == {"base_url": "http://127.0.0.1:11434/v1", "model": "nomic-embed-text",
                                                  "allow_private": True}
    assert loaded.vectors.store == "sqlite-vec"
    assert (loaded.backends.primary, loaded.backends.fallbacks) == ("main", ("obsidian", "team"))
    assert loaded.backends.instances["obsidian"].options == {"base_url": "https://127.0.0.1:27124",
                                                             "api_key": "from-env"}
    assert loaded.backends.instances["team"].options == {
        "base_url": "https://memory.example.com/api", "api_key": "t0k", "timeout": 5.0,
        "headers": {"X-Team": "core"}, "endpoints": {"search": "find"}}
    code, _, err = run("config", "import", "--from", "omniroute", str(source), "--output", str(tmp_path / "m.toml"))
    assert code == 2 and "exists" in err


def test_defaults_only_settings_give_a_short_file(run, tmp_path):
    source = tmp_path / "settings.json"
    source.write_text(json.dumps({"enabled": False, "primaryBackend": "sqlite", "fallbackBackends": []}))
    code, out, _ = run("config", "import", "--from", "omniroute", str(source))
    assert code == 0 and out == "[memory]\nenabled = false\n"


@pytest.mark.parametrize(("body", "message"), [
    ('{"enabled": true, "theme": "dark"}', "theme: not a field of OmniRoute's memory settings"),
    ('{"maxTokens": "lots"}', "maxTokens: expected an integer"),
    ('{"maxTokens": 20000}', "max_tokens"),
    ('{"strategy": "newest"}', "strategy"),
    ('{"enabled": tru', "not valid JSON"),
    ('[1, 2]', "expected a JSON object"),
])
def test_bad_settings_are_one_line_errors(run, tmp_path, body, message):
    source = tmp_path / "settings.json"
    source.write_text(body)
    code, out, err = run("config", "import", "--from", "omniroute", str(source))
    assert code == 2 and message in err and out == "" and "Traceback" not in err


def test_the_warning_is_printed_at_start_up_naming_the_variable(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMROUTE_", "MEMORY_", "QDRANT_"))}
    env.update(MEMROUTE_DATA_DIR=str(tmp_path / "data"), MEMORY_EMBEDDING_SOURCE="none",
               DATA_DIR=str(tmp_path / ".omniroute"), QDRANT_VECTOR_SIZE="1536")
    done = subprocess.run([sys.executable, "-m", "memroute.cli", "list", "--api-key", "a", "--json"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "DATA_DIR is set but memroute does not use it" in done.stderr
    assert "QDRANT_VECTOR_SIZE is set but memroute does not use it" in done.stderr
    assert json.loads(done.stdout)["total"] == 0  # the command itself ran as usual
    env["QDRANT_PORT"] = "http"
    refused = subprocess.run([sys.executable, "-m", "memroute.cli", "list", "--api-key", "a"], env=env,
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert refused.returncode == 2 and "QDRANT_PORT: expected a port number" in refused.stderr
    assert "Traceback" not in refused.stderr
