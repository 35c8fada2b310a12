"""docs/manager.md covers every manager setting (its example is run by tests/docs with every other block)."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "manager.md"


def test_manager_doc_covers_every_manager_setting():
    import attrs

    from memroute.config.settings import ManagerSettings

    text = DOC.read_text(encoding="utf-8")
    for field in attrs.fields(ManagerSettings):
        assert field.name in text, field.name
