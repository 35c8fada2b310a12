"""docs/getting-started.md's first-memories example finds what it searches for (tests/docs runs it; this checks
that its search loop prints the memory rather than nothing, as it did when its query fell under the relevance
floor)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def test_the_search_loop_prints_the_updated_memory(capsys):
    block = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)[0]
    exec(compile(block, str(DOC), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("Lives in Porto since 2024 ") for line in lines), lines
