"""Every hook has a documented section (datasette's rule: a hook without docs fails the build)."""

from __future__ import annotations

import inspect
from pathlib import Path

from memroute import hookspecs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins" / "hooks.md"


def _hook_names() -> list[str]:
    return [name for name, obj in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("memroute_")]


def test_every_hook_has_a_section_in_the_hooks_page():
    text = DOCS.read_text(encoding="utf-8")
    missing = [name for name in _hook_names() if f"## {name}\n" not in text]
    assert not missing, f"hooks without a section in docs/plugins/hooks.md: {missing}"


def test_every_hook_has_a_docstring_with_an_example():
    for name in _hook_names():
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert "Example::" in doc, f"{name} has no example in its docstring"


def test_the_hooks_page_documents_no_hook_that_does_not_exist():
    text = DOCS.read_text(encoding="utf-8")
    documented = [line[3:].strip() for line in text.splitlines() if line.startswith("## memroute_")]
    assert sorted(documented) == sorted(_hook_names())
