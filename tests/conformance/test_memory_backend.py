"""The in-memory test backend (memroute.testing.memory) against the storage backend conformance suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memroute.interfaces import MemoryBackend
from memroute.testing import BackendContract
from memroute.testing.faults import FaultyBackend
from memroute.testing.memory import InMemoryBackend


class TestInMemoryBackend(BackendContract):
    @pytest.fixture
    def backend(self) -> Iterator[MemoryBackend]:
        backend = InMemoryBackend("conformance")
        backend.initialize()
        yield backend
        backend.close()


class TestFaultyBackendPassThrough(BackendContract):
    """With no fault commanded, the fault injector is transparent."""

    @pytest.fixture
    def backend(self) -> Iterator[MemoryBackend]:
        backend = FaultyBackend(InMemoryBackend("conformance"))
        backend.initialize()
        yield backend
        backend.close()
