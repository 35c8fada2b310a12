"""The examples in docs/retrieval.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "retrieval.md"


def _example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/retrieval.md has no '{name}' example"
    return match.group(1)


def test_the_score_and_floor_example_runs(capsys):
    exec(compile(_example("score"), str(DOC), "exec"), {"__name__": "doc"})
    out = capsys.readouterr().out
    assert out.startswith("Prefers Rust for CLIs 0.") and "'cosine'" in out and "'coverage'" in out


def test_the_time_and_people_example_runs(capsys):
    exec(compile(_example("time-and-people"), str(DOC), "exec"), {"__name__": "doc"})
    assert capsys.readouterr().out == "2026-03-11 1.0\n"
