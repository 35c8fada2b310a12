"""Core names no built-in: ``auto`` picks by the specs' data, MEMROUTE_DB sets the option the primary's spec
names, and ``status`` reports the keyword tier from a real probe."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

import memroute
from memroute.config.serialization import to_jsonable
from memroute.config.settings import EmbeddingSettings
from memroute.embedding import resolve
from memroute.errors import ConfigError
from memroute.specs import Availability, BackendSpec, EmbeddingSourceSpec
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.faults import FaultyBackend
from memroute.testing.memory import InMemoryBackend


def _sources_plugin(*specs: EmbeddingSourceSpec) -> types.SimpleNamespace:
    return types.SimpleNamespace(memroute_embedding_sources=memroute.hookimpl(lambda: list(specs)))


def _hashing(settings: object, context: object) -> HashingEmbeddingSource:
    return HashingEmbeddingSource(16)


def test_a_plugin_with_a_higher_priority_wins_auto(plugin_manager, register_plugin) -> None:
    register_plugin(_sources_plugin(EmbeddingSourceSpec(name="hashing", factory=_hashing, auto_priority=10_000)),
                    name="hashing-plugin")
    resolution = resolve(EmbeddingSettings(), plugin_manager)
    assert resolution.source == "hashing" and resolution.reason == "auto: hashing: installed"


def test_a_failing_check_passes_auto_on_and_says_why_when_it_should(plugin_manager, register_plugin) -> None:
    def not_here(options: object, section: object) -> Availability:
        return Availability(ok=False, reason="its GPU is missing")

    def quiet(options: object, section: object) -> Availability:
        return Availability(ok=False, reason="disabled", mention=False)

    register_plugin(_sources_plugin(
        EmbeddingSourceSpec(name="gpu", factory=_hashing, auto_priority=10_000, auto_check=not_here),
        EmbeddingSourceSpec(name="off", factory=_hashing, auto_priority=9_000, auto_check=quiet),
    ), name="checks-plugin")
    resolution = resolve(EmbeddingSettings(), plugin_manager)
    assert resolution.source == "static"  # the built-in next in priority
    assert "gpu: its GPU is missing" in resolution.reason and "off" not in resolution.reason
    # auto_check only steers auto: asked for by name, the source is used
    assert resolve(EmbeddingSettings(source="gpu"), plugin_manager).source == "gpu"


def test_a_spec_without_priority_never_serves_auto(plugin_manager, register_plugin) -> None:
    register_plugin(_sources_plugin(EmbeddingSourceSpec(name="manual", factory=_hashing)), name="manual-plugin")
    assert resolve(EmbeddingSettings(static_enabled=False), plugin_manager).source is None


def _backends_plugin(spec: BackendSpec) -> types.SimpleNamespace:
    return types.SimpleNamespace(memroute_backends=memroute.hookimpl(lambda: [spec]))


def test_memroute_db_sets_the_path_of_the_files_primary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMROUTE_DB", str(tmp_path / "from-env.db"))
    config = {"backends": {"primary": "notes", "notes": {"type": "sqlite", "path": str(tmp_path / "file.db")}},
              "embedding": {"source": "none"}}
    with memroute.open(config) as mem:
        assert to_jsonable(mem.status())["backends"]["instances"][0]["path"] == str(tmp_path / "from-env.db")


def test_memroute_db_is_refused_by_a_backend_without_a_path_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin_manager, register_plugin
) -> None:
    register_plugin(_backends_plugin(BackendSpec(name="ram", factory=lambda s, c: InMemoryBackend(c.instance_name))),
                    name="ram-plugin")
    config = {"backends": {"main": {"type": "ram"}}, "embedding": {"source": "none"}}
    assert memroute.open(config, plugins=plugin_manager).close() is None
    monkeypatch.setenv("MEMROUTE_DB", str(tmp_path / "x.db"))
    with pytest.raises(ConfigError, match=r"MEMROUTE_DB: the primary backend 'main' \(type 'ram'\) keeps no database"):
        memroute.open(config, plugins=plugin_manager)


def test_status_reports_the_keyword_probe(tmp_path: Path, plugin_manager, register_plugin) -> None:
    faulty: list[FaultyBackend] = []

    def factory(settings: object, context: object) -> FaultyBackend:
        faulty.append(FaultyBackend(InMemoryBackend(context.instance_name)))  # type: ignore[attr-defined]
        return faulty[-1]

    register_plugin(_backends_plugin(BackendSpec(name="faulty", factory=factory)), name="faulty-plugin")
    config = {"backends": {"primary": "a", "fallbacks": ["b"], "a": {"type": "faulty"}, "b": {"type": "faulty"}},
              "embedding": {"source": "none"}, "manager": {"health_interval_s": 0}}
    with memroute.open(config, plugins=plugin_manager) as mem:
        keyword = to_jsonable(mem.status())["keyword"]
        assert keyword["available"] and keyword["served_by"] == "a" and "reason" not in keyword
        faulty[0].fail("search")
        keyword = to_jsonable(mem.status())["keyword"]
        assert keyword["available"] and keyword["served_by"] == "b" and "a" in keyword["reason"]
        faulty[1].fail("search")
        keyword = to_jsonable(mem.status())["keyword"]
        assert keyword["available"] is False and "no backend could serve it" in keyword["reason"]
