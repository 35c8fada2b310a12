"""The indexer reaches the primary's reindex markers through a declared capability and the manager (breaker,
operation timeout, worker thread), not around it."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import attrs
import pytest

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendUnavailableError, PluginError
from memroute.interfaces import BackendCapabilities
from memroute.models import Memory
from memroute.routing.calls import CircuitOpenError
from memroute.routing.manager import MemoryManager
from memroute.testing.memory import InMemoryBackend


class MarkedBackend(InMemoryBackend):
    """Keeps a set of ids needing a vector; ``hang`` makes marker calls block until released."""

    capabilities = attrs.evolve(InMemoryBackend.capabilities, reindex_markers=True)

    def __init__(self, name: str = "marked") -> None:
        super().__init__(name)
        self.flagged: list[Memory] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        self.threads: set[str] = set()

    def _enter(self) -> None:
        self.threads.add(threading.current_thread().name)
        if self.hang.is_set():
            self.release.wait(5)

    def pending_reindex(self, limit: int = 100, api_key_id: str | None = None) -> list[Memory]:
        self._enter()
        return self.flagged[:limit]

    def count_pending_reindex(self, api_key_id: str | None = None) -> int:
        self._enter()
        return len(self.flagged)

    def mark_indexed(self, memories: Iterable[Memory | str]) -> int:
        self._enter()
        ids = {m if isinstance(m, str) else m.id for m in memories}
        before = len(self.flagged)
        self.flagged = [m for m in self.flagged if m.id not in ids]
        return before - len(self.flagged)

    def mark_all_for_reindex(self) -> int:
        self._enter()
        return 0


def _manager(primary: InMemoryBackend, **settings: float) -> MemoryManager:
    options = {"health_interval_s": 0, "operation_timeout_s": 0.2, "breaker_failures": 1, **settings}
    return MemoryManager(primary, settings=ManagerSettings(**options), replay_in_background=False)


def test_markers_are_called_on_the_backends_worker_thread_through_the_manager():
    backend = MarkedBackend()
    with _manager(backend) as manager:
        markers = manager.reindex_markers()
        assert markers is not None and markers is not backend
        assert markers.count_pending_reindex() == 0 and markers.pending_reindex() == []
        assert all(name.startswith("memroute-marked") for name in backend.threads)  # the runner, not the caller


def test_a_hung_marker_call_times_out_and_opens_the_breaker():
    backend = MarkedBackend()
    with _manager(backend) as manager:
        markers = manager.reindex_markers()
        assert markers is not None
        backend.hang.set()
        with pytest.raises(BackendUnavailableError, match=r"count_pending_reindex timed out after 0.2s"):
            markers.count_pending_reindex()
        assert manager.breaker("marked").state == "open"
        with pytest.raises(CircuitOpenError):
            markers.pending_reindex()
        backend.release.set()


def test_no_markers_without_the_capability_and_a_false_declaration_is_a_plugin_error():
    with _manager(InMemoryBackend("plain")) as manager:
        assert manager.reindex_markers() is None

    class Liar(InMemoryBackend):
        capabilities = BackendCapabilities(reindex_markers=True)

    with _manager(Liar("liar")) as manager, pytest.raises(PluginError, match="declares reindex_markers"):
        manager.reindex_markers()


def test_the_sqlite_primary_serves_the_indexer_through_the_manager(tmp_path):
    import memroute
    from memroute.routing.manager import _ManagedMarkers

    with memroute.open({"backends": {"main": {"type": "sqlite", "path": str(tmp_path / "m.db")}},
                        "embedding": {"source": "static"}}) as mem:
        indexer = mem._retrieval.indexer
        assert isinstance(indexer.markers, _ManagedMarkers)
        mem.add(api_key_id="alice", content="I like green tea", key="tea")
        assert mem.flush(timeout=30)
        assert indexer.markers.count_pending_reindex() == 0
