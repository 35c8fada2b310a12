"""The runnable examples of docs/pipeline.md run."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"


def test_pipeline_examples_run(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMROUTE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")  # keep the example about the pipeline, not embeddings
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    runnable = [b for b in blocks if "memroute.open(" in b]
    assert len(runnable) >= 2, "docs/pipeline.md lost its quick-start or its what-observe-remembers example"
    for block in runnable:
        exec(compile(block, str(DOC), "exec"), {})
