"""The backend against memroute's storage conformance suite: one fixture, every behaviour memroute needs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from memroute.interfaces import MemoryBackend
from memroute.testing import BackendContract

from memroute_jsonl.backend import JsonlBackend, JsonlSettings


def _open(path: Path) -> JsonlBackend:
    # fsync off: the suite checks behaviour, not power-loss durability, and stays fast.
    backend = JsonlBackend("conformance", path, JsonlSettings(fsync=False))
    backend.initialize()
    return backend


class TestJsonlBackend(BackendContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[MemoryBackend]:
        yield _open(tmp_path / "memories.jsonl")

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[MemoryBackend], MemoryBackend]:
        def reopen(old: MemoryBackend) -> MemoryBackend:
            old.close()
            return _open(tmp_path / "memories.jsonl")

        return reopen
