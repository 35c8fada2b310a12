"""What the parts of the service share: the state :class:`~memroute.service.Memroute` builds in its
constructor (settings, components, locks), declared once so that each part (:mod:`.deployment`,
:mod:`.conversation`) is typed against it, and the two helpers every part reads through."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memroute.reports import RetrievalPreview

if TYPE_CHECKING:
    from memroute.config.limits import InputLimits
    from memroute.config.settings import MemrouteSettings
    from memroute.deployment.group_commit import GroupCommit
    from memroute.deployment.state import RuntimeMemorySettings, StateStore
    from memroute.models import Memory, SearchHit, SearchResult
    from memroute.pipeline.conversation import Conversation
    from memroute.plugins import MemroutePluginManager
    from memroute.retrieval.engine import RetrievalEngine
    from memroute.retrieval.runtime_vectors import VectorSwitch
    from memroute.routing.manager import MemoryManager
    from memroute.service.quota import TenantQuotas

__all__ = ["ServiceBase"]


class ServiceBase:
    """The service's state (set by ``Memroute.__init__``); not used on its own."""

    settings: MemrouteSettings
    plugins: MemroutePluginManager
    data_dir: Path
    state_dir: Path
    _limits: InputLimits
    _quotas: TenantQuotas
    _closed: bool
    _lock: threading.RLock
    _adds: GroupCommit[Any, Memory]
    _manager: MemoryManager
    _engine: RetrievalEngine
    _vector_switch: VectorSwitch | None
    _pipeline: Conversation | None
    _state: StateStore | None
    _runtime: RuntimeMemorySettings | None

    def extraction_status(self, api_key_id: str | None = None) -> dict[str, Any]:
        """Defined by :class:`~memroute.service.conversation.ConversationMethods`."""
        raise NotImplementedError

    @property
    def _retrieval(self) -> RetrievalEngine:
        switch = self._vector_switch
        if switch is not None:
            switch.poll()  # one clock read unless the runtime vector settings are due a re-read
        return self._engine

    def _preview_of(self, query: str, tenant: str, hits: Sequence[SearchHit], result: SearchResult,
                    max_tokens: int | None, limit: int) -> RetrievalPreview:
        return RetrievalPreview.from_hits(query=query, api_key_id=tenant, hits=hits, provenance=result.provenance,
                                          embedding=self._retrieval.resolution, max_tokens=max_tokens, limit=limit)
