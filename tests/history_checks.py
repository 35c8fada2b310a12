"""History checks shared by the SQLite and PostgreSQL integration tests (tests/integration/test_history.py,
tests/integration/test_postgres_history.py): the same behaviour through ``memroute.open`` on either backend."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any


def events(mem: Any, memory_id: str, tenant: str) -> list[tuple[str, str, str | None, str | None]]:
    """``(event, actor, old content, new content)`` of each entry of a memory's history, oldest first."""
    report = mem.history(memory_id, api_key_id=tenant)
    return [(e.event.value, e.actor, e.old_content, e.new_content) for e in report.entries]


def check_concurrent_adds_record_their_own_entries(mem: Any) -> None:
    """Adds of two tenants from eight threads are written together by the group commit (the batch switching
    tenants between items): each memory gets its own entry, by its own actor, readable only by its tenant."""

    def add(i: int) -> Any:
        tenant = "alice" if i % 2 else "bob"
        return mem.add(api_key_id=tenant, content=f"note {i}", key=f"k{i}", actor=f"worker-{i}")

    with ThreadPoolExecutor(8) as pool:
        stored = list(pool.map(add, range(40)))
    for i, memory in enumerate(stored):
        assert events(mem, memory.id, memory.api_key_id) == [("created", f"worker-{i}", None, f"note {i}")]
        other = "bob" if memory.api_key_id == "alice" else "alice"
        assert mem.history(memory.id, api_key_id=other) is None
