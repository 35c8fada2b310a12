"""The Python example in docs/manager.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "manager.md"


def test_manager_doc_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks, "docs/manager.md lost its Python example"
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})


def test_manager_doc_covers_every_manager_setting():
    import attrs

    from memroute.config.settings import ManagerSettings

    text = DOC.read_text(encoding="utf-8")
    for field in attrs.fields(ManagerSettings):
        assert field.name in text, field.name
