"""The plugin as memroute sees it (discovered through its entry point, configured by name) and the parts
of the file format the conformance suite cannot know about: the torn last line and compaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from memroute.components import build_component
from memroute.errors import BackendError, ConfigError
from memroute.interfaces import ComponentContext
from memroute.models import ListFilter, NewMemory
from memroute.plugins import make_plugin_manager

from memroute_jsonl.backend import JsonlBackend, JsonlSettings


def test_memroute_discovers_the_plugin_by_its_entry_point(tmp_path: Path) -> None:
    pm = make_plugin_manager()
    info = next(i for i in pm.infos() if i.name == "jsonl" and i.kind == "backend")
    assert info.status == "ok" and info.distribution == "memroute-jsonl"
    context = ComponentContext(instance_name="notes", data_dir=tmp_path)
    backend = build_component(pm, "backend", "jsonl", {}, context=context, path="backends.notes")
    assert isinstance(backend, JsonlBackend)
    assert backend.path == tmp_path / "jsonl" / "notes.jsonl"


def test_bad_options_name_the_field(tmp_path: Path) -> None:
    pm = make_plugin_manager()
    context = ComponentContext(instance_name="notes", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="compact_min_lines"):
        build_component(pm, "backend", "jsonl", {"compact_min_lines": -1}, context=context, path="backends.notes")
    with pytest.raises(ConfigError, match="colour"):
        build_component(pm, "backend", "jsonl", {"colour": "red"}, context=context, path="backends.notes")


def test_a_torn_last_line_is_ignored_and_a_corrupt_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    backend = JsonlBackend("t", path)
    backend.initialize()
    kept = backend.create(NewMemory(api_key_id="k", key="a", content="kept"))
    backend.close()
    with path.open("a", encoding="utf-8") as log:
        log.write('{"op": "put", "memory": {"id": "half')  # a crash in the middle of a write
    reopened = JsonlBackend("t", path)
    reopened.initialize()
    assert reopened.get(kept.id) is not None and reopened.list(ListFilter(api_key_id="k")).total == 1
    reopened.close()
    path.write_text('{"op": "explode"}\n', encoding="utf-8")
    with pytest.raises(BackendError, match="line 1 is corrupt"):
        JsonlBackend("t", path).initialize()


def test_compaction_keeps_exactly_the_live_memories(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    backend = JsonlBackend("t", path, JsonlSettings(fsync=False, compact_min_lines=10))
    backend.initialize()
    for i in range(30):
        backend.create(NewMemory(api_key_id="k", key=f"key-{i % 3}", content=f"version {i}"))
    assert len(path.read_text(encoding="utf-8").splitlines()) < 10  # compacted along the way
    backend.close()
    reopened = JsonlBackend("t", path)
    reopened.initialize()
    page = reopened.list(ListFilter(api_key_id="k", order_by="created_at", order_dir="asc"))
    assert sorted(m.content for m in page.data) == ["version 27", "version 28", "version 29"]
