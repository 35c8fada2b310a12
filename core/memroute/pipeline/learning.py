"""How ``observe`` hands a turn to the chain's background extractors (:class:`~memroute.interfaces.BackgroundExtractor`,
such as the ``llm`` extractor) after the offline extractors' facts are stored.

Each gets the turn and a :class:`TenantView`: the service's own add / update / delete / search bound to the
turn's tenant and session, so whatever the extractor decides is written like any other write (validated,
indexed for vector search, replicated) and can only ever touch that tenant's memories.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memroute.interfaces import BackgroundExtractor, Extractor, ObservedTurn
from memroute.models import Memory, MemoryType
from memroute.pipeline.turns import TURN_CATEGORY

if TYPE_CHECKING:
    from memroute.pipeline.ports import MemoryStore

__all__ = ["TenantView", "background_extractors", "background_status", "flush_background", "hand_off",
           "offline_extractors"]

log = logging.getLogger("memroute.pipeline")


_TURN_HEADROOM = 10  # extra hits asked for, so kept messages left out still leave ``limit`` facts


class TenantView:
    """:class:`~memroute.interfaces.TenantMemories` over the service: one tenant, one session."""

    def __init__(self, store: MemoryStore, api_key_id: str, session_id: str | None, *, actor: str) -> None:
        self._store = store
        self._tenant = api_key_id
        self._session = session_id
        self._actor = actor  # every write is recorded in the memory's history under the extractor's name

    @property
    def api_key_id(self) -> str:
        return self._tenant

    def search(self, query: str, *, limit: int) -> list[Memory]:
        # A search on the extractor's behalf is not a use of the memories: no access is counted. The messages
        # observe keeps (the conversation itself) are the record of what was said, not facts to revise: the
        # model is shown facts only, so it can never rewrite or delete a kept message.
        result = self._store.search(query, api_key_id=self._tenant, limit=limit + _TURN_HEADROOM,
                                    record_access=False)
        facts = [hit.memory for hit in result.hits
                 if hit.memory.api_key_id == self._tenant and hit.memory.metadata.get("category") != TURN_CATEGORY]
        return facts[:limit]

    def add(self, *, content: str, key: str, type: MemoryType | str, metadata: Mapping[str, Any]) -> Memory:
        return self._store.add(api_key_id=self._tenant, content=content, key=key, type=type,
                               session_id=self._session, metadata=metadata, actor=self._actor)

    def update(self, memory_id: str, *, content: str, metadata: Mapping[str, Any]) -> Memory | None:
        return self._store.update(memory_id, api_key_id=self._tenant, content=content, metadata=dict(metadata),
                                  actor=self._actor)

    def delete(self, memory_id: str) -> bool:
        return self._store.delete(memory_id, api_key_id=self._tenant, actor=self._actor)


def offline_extractors(chain: Sequence[tuple[str, Extractor]]) -> list[tuple[str, Extractor]]:
    """The extractors of ``chain`` that answer at once (run on the extraction worker)."""
    return [(name, e) for name, e in chain if not isinstance(e, BackgroundExtractor)]


def background_extractors(chain: Sequence[tuple[str, Extractor]]) -> list[tuple[str, BackgroundExtractor]]:
    """The extractors of ``chain`` that take whole turns in the background."""
    return [(name, e) for name, e in chain if isinstance(e, BackgroundExtractor)]


def hand_off(chain: Sequence[tuple[str, Extractor]], store: MemoryStore, *, api_key_id: str,
             session_id: str | None, texts: tuple[tuple[str, str], ...], stored: Sequence[Memory]) -> None:
    """Submit the turn to every background extractor of ``chain``; one that raises is logged and skipped."""
    turn = ObservedTurn(api_key_id=api_key_id, session_id=session_id, texts=texts, stored=tuple(stored))
    for name, extractor in background_extractors(chain):
        try:
            extractor.submit(turn, TenantView(store, api_key_id, session_id, actor=f"extractor:{name}"))
        except Exception:
            log.exception("memroute: background extractor %r refused a turn", name)


def flush_background(chain: Sequence[tuple[str, Extractor]], timeout: float | None) -> bool:
    """Wait for every background extractor of ``chain`` (sharing ``timeout``); True when all finished."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = True
    for _name, extractor in background_extractors(chain):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done = extractor.flush(left) and done
    return done


def background_status(chain: Sequence[tuple[str, Extractor]], api_key_id: str | None = None) -> dict[str, Any]:
    """Each background extractor's :meth:`~memroute.interfaces.BackgroundExtractor.status` (of one tenant with
    ``api_key_id``), by name."""
    out: dict[str, Any] = {}
    for name, extractor in background_extractors(chain):
        try:
            out[name] = extractor.status(api_key_id)
        except Exception as exc:  # a status must never break `memroute status`
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out
