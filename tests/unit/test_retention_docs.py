"""docs/pipeline.md's retention example means what the page says (every block also runs in tests/docs)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"


def test_the_retention_example_configures_per_type_windows_and_deletion(tmp_path):
    from memroute.config.settings import load_settings

    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    example = next(b for b in blocks if "[memory.types.episodic]" in b)
    path = tmp_path / "memroute.toml"
    path.write_text(example, encoding="utf-8")
    memory = load_settings(str(path), environ={}).memory
    assert memory.window_days("factual") == 0 and memory.delete_after("factual") == 0
    assert memory.window_days("episodic") == 90 and memory.delete_after("episodic") == 365
    assert memory.search_windows() == (None, {"episodic": 90}) and memory.deletes_by_age
