"""The plugin tutorial's code runs: ``docs/plugins/writing.md``'s one-file backend passes the whole storage
conformance suite, and its registration snippet works."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from memroute.components import build_component
from memroute.interfaces import ComponentContext, MemoryBackend
from memroute.plugins import make_plugin_manager
from memroute.testing import BackendContract

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins" / "writing.md"


def _block(first_line: str) -> str:
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S):
        if block.startswith(first_line):
            return str(block)
    raise AssertionError(f"docs/plugins/writing.md has no python block starting with {first_line!r}")


def _tutorial_module() -> types.ModuleType:
    module = types.ModuleType("memroute_tiny")
    exec(compile(_block("# memroute_tiny.py"), str(DOC), "exec"), module.__dict__)
    return module


tiny = _tutorial_module()


class TestTutorialBackend(BackendContract):
    @pytest.fixture
    def backend(self) -> Iterator[MemoryBackend]:
        backend = tiny.TinyBackend("test")
        backend.initialize()
        yield backend


def test_the_tutorial_test_module_matches_the_contract_usage() -> None:
    text = _block("# test_tiny.py")
    assert "class TestTinyBackend(BackendContract)" in text and "def backend(self)" in text


def test_the_tutorial_plugin_registers_and_builds(tmp_path: Path) -> None:
    pm = make_plugin_manager(plugins=[("tiny", tiny)])
    assert "tiny" in pm.backends()
    context = ComponentContext(instance_name="notes", data_dir=tmp_path)
    backend = build_component(pm, "backend", "tiny", {}, context=context, path="backends.notes")
    assert isinstance(backend, tiny.TinyBackend) and backend.name == "notes"
