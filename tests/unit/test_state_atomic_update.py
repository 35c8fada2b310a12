"""Read-modify-write of a deployment state value is atomic: two processes (here two independent store opens on
one ``state.db``, in two threads, and two real processes) changing different settings at the same instant both
take effect; the one that comes second waits and sees the first one's change."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from memroute.config.settings import MemorySettings
from memroute.deployment.state import RuntimeMemorySettings, SqliteStateStore, StateStore


def _merge(field: str, value: Any) -> Callable[[Any], dict[str, Any]]:
    return lambda current: {**(current or {}), field: value}


def test_a_concurrent_update_waits_and_sees_the_first_one(tmp_path):
    one, two = SqliteStateStore(tmp_path / "state.db"), SqliteStateStore(tmp_path / "state.db")
    first_has_read = threading.Event()

    def slow(current: Any) -> dict[str, Any]:
        first_has_read.set()
        time.sleep(0.3)  # the window in which a get-then-put would let the other update be overwritten
        return {**(current or {}), "a": 1}

    worker = threading.Thread(target=one.update_value, args=("settings", "memory", slow))
    worker.start()
    assert first_has_read.wait(5)
    stored = two.update_value("settings", "memory", _merge("b", 2))  # blocks until the first commits
    worker.join(5)
    assert stored == {"a": 1, "b": 2}
    assert one.get_value("settings", "memory") == two.get_value("settings", "memory") == {"a": 1, "b": 2}
    one.close()
    two.close()


def test_a_failing_change_stores_nothing_and_releases_the_lock(tmp_path):
    store = SqliteStateStore(tmp_path / "state.db", busy_timeout_ms=500)
    store.put_value("settings", "memory", {"a": 1})

    def broken(_current: Any) -> Any:
        raise ValueError("no")

    with pytest.raises(ValueError):
        store.update_value("settings", "memory", broken)
    assert store.get_value("settings", "memory") == {"a": 1}
    other = SqliteStateStore(tmp_path / "state.db", busy_timeout_ms=500)
    assert other.update_value("settings", "memory", _merge("b", 2)) == {"a": 1, "b": 2}  # not left locked
    store.close()
    other.close()


class _SlowStore(StateStore):
    """A real SQLite store whose update holds its transaction open a little, so another update arrives
    while it is between its read and its write."""

    def __init__(self, inner: SqliteStateStore, read: threading.Event) -> None:
        self.inner, self.read = inner, read

    @property
    def keys(self) -> Any:
        return self.inner.keys

    def get_value(self, namespace: str, name: str) -> Any | None:
        return self.inner.get_value(namespace, name)

    def put_value(self, namespace: str, name: str, value: Any) -> None:
        self.inner.put_value(namespace, name, value)

    def update_value(self, namespace: str, name: str, change: Callable[[Any], Any]) -> Any:
        def slow(current: Any) -> Any:
            self.read.set()
            time.sleep(0.3)
            return change(current)

        return self.inner.update_value(namespace, name, slow)

    def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        return self.inner.try_lease(name, holder, ttl_s)

    def release_lease(self, name: str, holder: str) -> None:
        self.inner.release_lease(name, holder)

    def ping(self) -> None:
        self.inner.ping()


def test_runtime_settings_changed_by_two_processes_at_once_keep_both(tmp_path):
    read = threading.Event()
    slow_store = _SlowStore(SqliteStateStore(tmp_path / "state.db"), read)
    other_store = SqliteStateStore(tmp_path / "state.db")
    one = RuntimeMemorySettings(MemorySettings(), lambda: slow_store)
    two = RuntimeMemorySettings(MemorySettings(), lambda: other_store)
    worker = threading.Thread(target=one.update, args=({"maxTokens": 321},))
    worker.start()
    assert read.wait(5)
    two.update({"strategy": "semantic"})
    worker.join(5)
    for process in (one, two):
        settings = process.current(fresh=True)
        assert (settings.max_tokens, settings.strategy) == (321, "semantic")
    slow_store.inner.close()
    other_store.close()


_WRITER = """
import sys
from memroute.deployment.state import SqliteStateStore
store = SqliteStateStore(sys.argv[1])
field = sys.argv[2]
for i in range(1, 41):
    store.update_value("settings", "memory", lambda current: {**(current or {}), field: i})
store.close()
"""


def test_two_processes_hammering_different_fields_lose_nothing(tmp_path):
    path = str(tmp_path / "state.db")
    SqliteStateStore(path).close()  # schema first, so neither process races to create it
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, path, field]) for field in ("a", "b")]
    assert [p.wait(60) for p in procs] == [0, 0]
    store = SqliteStateStore(path)
    assert store.get_value("settings", "memory") == {"a": 40, "b": 40}
    store.close()
