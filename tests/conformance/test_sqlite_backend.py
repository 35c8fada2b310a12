"""The SQLite backend against the storage backend conformance suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memroute.interfaces import MemoryBackend
from memroute.testing import BackendContract
from memroute_builtins.backends.sqlite.backend import SqliteBackend


def _open(path: Path) -> SqliteBackend:
    backend = SqliteBackend("conformance", path)
    backend.initialize()
    return backend


class TestSqliteBackend(BackendContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[MemoryBackend]:
        yield _open(tmp_path / "conformance.db")

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[MemoryBackend], MemoryBackend]:
        def reopen(old: MemoryBackend) -> MemoryBackend:
            old.close()
            return _open(tmp_path / "conformance.db")

        return reopen
