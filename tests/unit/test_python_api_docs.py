"""The examples in docs/python-api.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def _example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/python-api.md has no '{name}' example"
    return match.group(1)


def test_the_async_example_runs(tmp_path, capsys):
    exec(compile(_example("async"), str(DOC), "exec"), {"DATA_DIR": str(tmp_path / "d"), "__name__": "doc"})
    out = capsys.readouterr().out
    assert "lang I prefer TypeScript" in out and "rejected:" in out
