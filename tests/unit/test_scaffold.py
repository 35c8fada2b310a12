"""``memroute new-plugin``: names, rendering, refusal to overwrite, and plugin-template/ staying the rendered
backend template (so the example in the repository and what users get never drift apart)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from memroute.cli import cli
from memroute.cli.scaffold import KINDS, new_plugin, plugin_names, render_plugin
from memroute.errors import ValidationError

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_EXAMPLE = REPO / "plugin-template"
_IGNORED = re.compile(r"(__pycache__|\.egg-info|\.pytest_cache|\.ruff_cache|\.mypy_cache|/build/|/dist/|\.venv)")


def test_names_are_derived_from_one_spelling() -> None:
    names = plugin_names("My-Store")
    assert (names.name, names.dist, names.module, names.class_name) == (
        "my-store", "memroute-my-store", "memroute_my_store", "MyStore")
    assert plugin_names("memroute-redis").dist == "memroute-redis"  # no memroute-memroute-redis


@pytest.mark.parametrize("bad", ["", "1abc", "a b", "a--b", "-a", "a/../b", "ä", "x" * 41, "a.b"])
def test_bad_names_are_validation_errors(bad: str) -> None:
    with pytest.raises(ValidationError, match="plugin name"):
        plugin_names(bad)


def test_plugin_template_is_the_backend_template_rendered_for_jsonl() -> None:
    rendered = render_plugin("backend", plugin_names("jsonl"))
    on_disk = {
        p.relative_to(TEMPLATE_EXAMPLE).as_posix(): p.read_text(encoding="utf-8")
        for p in TEMPLATE_EXAMPLE.rglob("*")
        if p.is_file() and not _IGNORED.search("/" + p.relative_to(TEMPLATE_EXAMPLE).as_posix())
    }
    assert sorted(on_disk) == sorted(rendered), "plugin-template/ and the backend template list different files"
    for path, text in rendered.items():
        assert on_disk[path] == text, (
            f"plugin-template/{path} differs from the template: edit core/memroute/templates/backend/ and re-render "
            "with `memroute new-plugin jsonl --output /tmp/x` (then copy it over plugin-template/)"
        )


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_renders_without_leftover_placeholders(kind: str) -> None:
    rendered = render_plugin(kind, plugin_names("acme-thing"))
    assert "pyproject.toml" in rendered and any(p.startswith("tests/") for p in rendered)
    assert any(p.startswith("src/memroute_acme_thing/") for p in rendered)
    for path, text in rendered.items():
        assert not re.search(r"\{\{(name|dist|module|Class|title)\}\}", text), path
        assert "__module__" not in path and "dot-" not in path
    assert 'acme-thing = "memroute_acme_thing.plugin"' in rendered["pyproject.toml"]


def test_new_plugin_writes_the_project_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = new_plugin("acme", "backend", tmp_path)
    assert target == tmp_path / "memroute-acme"
    assert (target / "src" / "memroute_acme" / "backend.py").read_text(encoding="utf-8").count("class AcmeBackend") == 1
    assert (target / ".github" / "workflows" / "test.yml").is_file()
    with pytest.raises(ValidationError, match="already exists"):
        new_plugin("acme", "backend", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memroute-acme"]  # no staging directory left behind


def test_the_cli_command(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["new-plugin", "acme-vectors", "--kind", "vector-store", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "created" in result.output and (tmp_path / "memroute-acme-vectors" / "pyproject.toml").is_file()
    bad = runner.invoke(cli, ["new-plugin", "Bad Name!", "--output", str(tmp_path)])
    assert bad.exit_code != 0
