"""The plugin manager: discovery through entry points, failure isolation, strict mode, disabling, duplicates,
API versions, and `memroute plugins`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import memroute
from memroute.errors import DuplicatePluginError, PluginLoadError, UnknownComponentError
from memroute.plugins import PluginWarning, make_plugin_manager
from memroute.specs import BackendSpec, EmbeddingSourceSpec


def _fake_distribution(site: Path, dist: str, module: str, source: str, entry_name: str | None = None) -> None:
    """Install a tiny distribution into ``site`` the way pip would lay it out (module + dist-info with an
    entry point in the ``memroute`` group)."""
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[memroute]\n{entry_name or dist} = {module}\n", encoding="utf-8")


@pytest.fixture
def site(tmp_path, monkeypatch):
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    yield path
    for name in list(sys.modules):
        if name.startswith("mr_test_"):
            del sys.modules[name]


BROKEN_IMPORT = "raise ImportError('this plugin needs a library that is not installed')\n"

GOOD_PLUGIN = """
import memroute
from memroute.specs import BackendSpec

class Factory:
    pass

@memroute.hookimpl
def memroute_backends():
    yield BackendSpec(name="{name}", factory=lambda settings, context: None, description="test backend")
"""


def test_builtin_sqlite_backend_is_discovered_through_its_entry_point():
    pm = make_plugin_manager()
    infos = {(i.kind, i.name): i for i in pm.infos()}
    sqlite = infos.get(("backend", "sqlite"))
    assert sqlite is not None, "the built-in SQLite backend is not registered through its entry point"
    assert sqlite.status == "ok"
    assert sqlite.distribution == "memroute"


def test_broken_plugin_is_reported_not_fatal(site):
    _fake_distribution(site, "mr-test-broken", "mr_test_broken", BROKEN_IMPORT)
    with pytest.warns(PluginWarning, match=r"mr-test-broken.*distribution mr-test-broken"):
        pm = make_plugin_manager()
    failed = [i for i in pm.infos() if i.plugin == "mr-test-broken"]
    assert len(failed) == 1
    assert failed[0].status == "failed"
    assert "not installed" in (failed[0].error or "")
    assert failed[0].distribution == "mr-test-broken"


def test_broken_plugin_is_fatal_in_strict_mode(site, monkeypatch):
    _fake_distribution(site, "mr-test-broken", "mr_test_broken", BROKEN_IMPORT)
    monkeypatch.setenv("MEMROUTE_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="mr-test-broken") as info:
        make_plugin_manager()
    assert info.value.distribution == "mr-test-broken"


def test_hook_that_raises_is_isolated(site):
    _fake_distribution(site, "mr-test-raises", "mr_test_raises", """
        import memroute

        @memroute.hookimpl
        def memroute_backends():
            raise RuntimeError("boom")
            yield
    """)
    with pytest.warns(PluginWarning, match="boom"):
        pm = make_plugin_manager()
    assert "boom" in next(i.error for i in pm.infos() if i.plugin == "mr-test-raises")


def test_wrong_api_version_is_rejected(site):
    _fake_distribution(site, "mr-test-future", "mr_test_future", """
        import memroute
        from memroute.specs import BackendSpec

        @memroute.hookimpl
        def memroute_backends():
            yield BackendSpec(name="future", factory=lambda s, c: None, api_version=99)
    """)
    with pytest.warns(PluginWarning, match="plugin API version 99"):
        pm = make_plugin_manager()
    assert "future" not in pm.backends()


def test_duplicate_names_name_both_distributions(site, monkeypatch):
    _fake_distribution(site, "mr-test-dup-a", "mr_test_dup_a", GOOD_PLUGIN.format(name="twin"))
    _fake_distribution(site, "mr-test-dup-b", "mr_test_dup_b", GOOD_PLUGIN.format(name="twin"))
    with pytest.warns(PluginWarning) as caught:
        pm = make_plugin_manager()
    message = " ".join(str(w.message) for w in caught)
    assert "mr-test-dup-a" in message and "mr-test-dup-b" in message
    # two third parties: no silent winner (entry-point order used to decide); using the name says why
    assert "twin" not in pm.backends()
    with pytest.raises(DuplicatePluginError, match=r"mr-test-dup-a.*mr-test-dup-b.*neither is used"):
        pm.component("backend", "twin")
    rows = {i.distribution: i.status for i in pm.infos() if i.name == "twin"}
    assert rows == {"mr-test-dup-a": "conflict", "mr-test-dup-b": "conflict"}
    monkeypatch.setenv("MEMROUTE_DISABLE_PLUGINS", "mr-test-dup-b")  # the way out the message names
    assert "twin" in make_plugin_manager().backends()
    monkeypatch.delenv("MEMROUTE_DISABLE_PLUGINS")
    monkeypatch.setenv("MEMROUTE_STRICT_PLUGINS", "1")
    with pytest.raises(DuplicatePluginError, match=r"mr-test-dup-a.*mr-test-dup-b"):
        make_plugin_manager().backends()


SQLITE_IMPOSTOR = """
import memroute
from memroute.specs import BackendSpec

@memroute.hookimpl
def memroute_backends():
    yield BackendSpec(name="sqlite", factory=lambda settings, context: None, description="not the real one")
"""


@pytest.mark.parametrize("entry_name", ["aaa-first", "sqlite"])
def test_a_builtin_name_stays_the_builtin_whatever_the_entry_point_order(site, entry_name):
    # "aaa-first" sorts before "sqlite" (it used to take the name over); "sqlite" reuses the built-in's
    # entry-point name from another distribution (it used to be dropped without a word)
    _fake_distribution(site, "mr-test-impostor", "mr_test_impostor", SQLITE_IMPOSTOR, entry_name=entry_name)
    with pytest.warns(PluginWarning, match=r"the built-in wins.*mr-test-impostor.*shadowed"):
        pm = make_plugin_manager()
    from memroute_builtins.backends.sqlite.backend import SqliteBackend

    assert pm.backends()["sqlite"].factory == SqliteBackend.from_settings
    rows = {i.distribution: (i.status, i.plugin) for i in pm.infos() if i.kind == "backend" and i.name == "sqlite"}
    assert rows == {"memroute": ("ok", "sqlite"), "mr-test-impostor": ("shadowed", entry_name)}


def test_memroute_plugins_shows_the_shadowed_one_with_its_distribution(site):
    _fake_distribution(site, "mr-test-impostor", "mr_test_impostor", SQLITE_IMPOSTOR, entry_name="sqlite")
    result = _run_cli(["plugins", "--json"], {"PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    rows = [r for r in json.loads(result.stdout) if r["kind"] == "backend" and r["name"] == "sqlite"]
    by_dist = {r["distribution"]: r for r in rows}
    assert by_dist["memroute"]["status"] == "ok"
    assert by_dist["mr-test-impostor"]["status"] == "shadowed"
    assert "distribution memroute" in by_dist["mr-test-impostor"]["error"]
    strict = _run_cli(["plugins", "--json"], {"PYTHONPATH": str(site), "MEMROUTE_STRICT_PLUGINS": "1"})
    assert strict.returncode != 0 and "mr-test-impostor" in strict.stderr and "Traceback" not in strict.stderr


def test_a_registered_plugin_cannot_take_a_builtin_name(register_plugin, plugin_manager):
    class Plugin:
        @memroute.hookimpl
        def memroute_backends(self):
            yield BackendSpec(name="sqlite", factory=lambda s, c: None)

    with pytest.warns(PluginWarning, match="the built-in wins"):
        register_plugin(Plugin(), name="test-impostor")
        spec = plugin_manager.backends()["sqlite"]
    assert spec.description.startswith("Embedded SQLite")


def test_disable_plugins_blocks_by_entry_point_or_component_name(site, monkeypatch):
    _fake_distribution(site, "mr-test-good", "mr_test_good", GOOD_PLUGIN.format(name="goody"))
    monkeypatch.setenv("MEMROUTE_DISABLE_PLUGINS", "mr-test-good")
    pm = make_plugin_manager()
    assert "goody" not in pm.backends()
    assert any(i.status == "disabled" and i.plugin == "mr-test-good" for i in pm.infos())
    monkeypatch.setenv("MEMROUTE_DISABLE_PLUGINS", "goody")
    pm = make_plugin_manager()
    assert "goody" not in pm.backends()
    assert any(i.status == "disabled" and i.name == "goody" for i in pm.infos())


def test_wrong_spec_type_is_rejected(register_plugin, plugin_manager):
    class Plugin:
        @memroute.hookimpl
        def memroute_backends(self):
            yield EmbeddingSourceSpec(name="oops", factory=lambda s, c: None)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        register_plugin(Plugin(), name="wrong-type")
        assert "oops" not in plugin_manager.backends()
    assert any("expected BackendSpec" in str(w.message) for w in caught)


def test_register_plugin_fixture_adds_for_one_test(register_plugin, plugin_manager):
    class Plugin:
        @memroute.hookimpl
        def memroute_backends(self):
            yield BackendSpec(name="temporary", factory=lambda s, c: None)

    register_plugin(Plugin(), name="temporary-plugin")
    assert "temporary" in plugin_manager.backends()
    plugin_manager.remove_plugin("temporary-plugin")
    assert "temporary" not in plugin_manager.backends()


def test_unknown_component_lists_what_is_installed(plugin_manager):
    with pytest.raises(UnknownComponentError, match="no backend plugin named 'nope'"):
        plugin_manager.component("backend", "nope")


def test_spec_names_are_validated():
    with pytest.raises(ValueError, match="component name"):
        BackendSpec(name="has space", factory=lambda s, c: None)


def test_prepare_connection_hook_runs_for_every_connection(register_plugin, plugin_manager):
    import apsw

    from memroute.deployment.db import open_connection

    class Plugin:
        @memroute.hookimpl
        def memroute_prepare_connection(self, connection):
            connection.create_scalar_function("memroute_test_double", lambda x: x * 2, 1, deterministic=True)

    register_plugin(Plugin(), name="functions")
    connection = open_connection(":memory:", prepare=plugin_manager.prepare_connection)
    assert connection.execute("select memroute_test_double(21)").fetchone() == (42,)
    assert isinstance(connection, apsw.Connection)


def _run_cli(args: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-m", "memroute.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_cli_plugins_json_reports_a_broken_plugin_beside_the_builtins(site):
    _fake_distribution(site, "mr-test-broken", "mr_test_broken", BROKEN_IMPORT)
    result = _run_cli(["plugins", "--json"], {"PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert all(set(r) >= {"name", "kind", "distribution", "version", "status", "error"} for r in rows)
    broken = [r for r in rows if r["distribution"] == "mr-test-broken"]
    assert broken and broken[0]["status"] == "failed"
    assert "Traceback" not in result.stderr


def test_cli_plugins_is_fatal_with_strict_plugins(site):
    _fake_distribution(site, "mr-test-broken", "mr_test_broken", BROKEN_IMPORT)
    result = _run_cli(["plugins", "--json"], {"PYTHONPATH": str(site), "MEMROUTE_STRICT_PLUGINS": "1"})
    assert result.returncode != 0
    assert "mr-test-broken" in result.stderr
    assert "Traceback" not in result.stderr
