"""The ``memroute_register_commands`` hook: plugins add CLI commands; failures stay the plugin's own."""

from __future__ import annotations

import json
import re
import types
import warnings
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import memroute
from memroute.cli.common import CliState
from memroute.errors import PluginLoadError
from memroute.plugins import MemroutePluginManager, PluginWarning, make_plugin_manager

HOOKS_DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins" / "hooks.md"


def _root(config_path: str | None = None) -> click.Group:
    @click.group()
    @click.pass_context
    def root(ctx: click.Context) -> None:
        ctx.obj = CliState(config_path=config_path)

    @root.command("add")
    def add() -> None:
        click.echo("core add")

    return root


def _plugin(name: str, register: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(__name__=name, memroute_register_commands=memroute.hookimpl(register))


def _manager(*plugins: Any, strict: bool = False) -> MemroutePluginManager:
    return make_plugin_manager(entrypoints=False, plugins=[(p.__name__, p) for p in plugins], strict=strict)


def test_the_documented_example_adds_a_working_command(tmp_path: Path) -> None:
    text = HOOKS_DOC.read_text(encoding="utf-8")
    section = text.split("## memroute_register_commands\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    module = types.ModuleType("docs_example_commands")
    exec(compile(block, "hooks.md", "exec"), module.__dict__)
    config = tmp_path / "memroute.toml"
    config.write_text('[backends]\nprimary = "notes"\n[backends.notes]\ntype = "jsonl"\npath = "n.jsonl"\n', "utf-8")
    root = _root(str(config))
    pm = _manager()
    pm.add_plugin(module, name="docs-example")
    pm.register_commands(root)
    result = CliRunner().invoke(root, ["jsonl-files"])
    assert result.exit_code == 0, result.output
    assert result.output == "notes: n.jsonl\n"
    (row,) = [i for i in pm.infos() if i.kind == "command"]
    assert (row.name, row.plugin, row.status) == ("jsonl-files", "docs-example", "ok")


def test_a_hook_that_raises_is_skipped_and_the_others_still_register() -> None:
    def broken(cli: click.Group) -> None:
        cli.add_command(click.Command("half-added"))
        raise RuntimeError("boom")

    def good(cli: click.Group) -> None:
        cli.add_command(click.Command("hello", callback=lambda: click.echo("hi")))

    root = _root()
    pm = _manager(_plugin("broken", broken), _plugin("good", good))
    with pytest.warns(PluginWarning, match=r"entry point 'broken'.*RuntimeError: boom"):
        pm.register_commands(root)
    assert "half-added" not in root.commands  # what the failing plugin added is taken back
    assert CliRunner().invoke(root, ["hello"]).output == "hi\n"
    failed = [i for i in pm.infos() if i.status == "failed"]
    assert [(i.kind, i.plugin) for i in failed] == [("command", "broken")]
    pm.collect()  # a later collection keeps the command rows
    assert {i.name for i in pm.infos() if i.kind == "command"} == {"broken", "hello"}


def test_a_plugin_cannot_replace_a_core_command() -> None:
    def hijack(cli: click.Group) -> None:
        @cli.command("add")
        def add() -> None:
            click.echo("hijacked")

    root = _root()
    pm = _manager(_plugin("hijack", hijack))
    with pytest.warns(PluginWarning, match="command name.*add.*already used"):
        pm.register_commands(root)
    assert CliRunner().invoke(root, ["add"]).output == "core add\n"
    with pytest.raises(PluginLoadError, match="already used"):
        _manager(_plugin("hijack", hijack), strict=True).register_commands(_root())


def test_hook_calls_go_through_pluggy_so_monitoring_sees_them() -> None:
    seen: list[str] = []
    pm = _manager(_plugin("good", lambda cli: None))
    undo = pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append(name), lambda *a: None)
    try:
        pm.register_commands(_root())
    finally:
        undo()
    assert seen == ["memroute_register_commands"]


def test_memroute_plugins_lists_the_notion_commands_with_their_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    from memroute.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        main(["plugins", "--json"])
    rows = json.loads(capsys.readouterr().out)
    (notion,) = [r for r in rows if r["kind"] == "command" and r["name"] == "notion"]
    assert notion["distribution"] == "memroute" and notion["status"] == "ok" and notion["plugin"] == "notion"



def test_discovery_hooks_go_through_pluggy_too() -> None:
    from memroute.specs import BackendSpec
    from memroute.testing.memory import InMemoryBackend

    def backends() -> Any:
        yield BackendSpec(name="traced", factory=lambda settings, context: InMemoryBackend(context.instance_name))

    seen: list[str] = []
    pm = make_plugin_manager(entrypoints=False)
    undo = pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append(name), lambda *a: None)
    try:
        pm.add_plugin(types.SimpleNamespace(memroute_backends=memroute.hookimpl(backends)), name="traced-plugin")
        assert set(pm.backends()) == {"traced"}
    finally:
        undo()
    assert "memroute_backends" in seen
