"""Consolidation: a new fact is checked against what the tenant already holds before it is stored, so one
thing said twice is one memory, and a newer statement replaces an older one while the history keeps both.

Three outcomes, decided by :func:`decide`:

- **supersede**: a memory with the same key (a slot, such as ``profile:location``) says something else ("Lives
  in Berlin" after "Lives in Lisbon"): the memory takes the new content, and its history records
  ``superseded`` with the old content.
- **restate**: no memory has the key, but one of the same type says nearly the same (cosine similarity of the
  tenant's own embedding vectors at least ``[extraction] restate_similarity``, default 0.8): that memory is
  updated in place (content, key and metadata of the new fact; history ``updated``) instead of a second one
  being stored ("I prefer TypeScript" next to ``TypeScript for everything``).
- **create**: anything else (also the same key with the same content: the upsert leaves it as it was).

Everything goes through the :class:`~memroute.pipeline.ports.MemoryStore` port (the service), so vectors,
replication and history follow every change.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from memroute.errors import MemrouteError
from memroute.models import HistoryEvent, Memory, MemoryType

if TYPE_CHECKING:
    from memroute.pipeline.ports import MemoryStore

__all__ = ["Decision", "decide", "write"]

log = logging.getLogger("memroute.pipeline")

CANDIDATES = 5
"""How many of the tenant's nearest memories a fact is compared with."""


@attrs.frozen(kw_only=True)
class Decision:
    """What to do with one new fact: ``create`` it, or change ``target`` (``restate`` / ``supersede``)."""

    action: Literal["create", "restate", "supersede"]
    target: Memory | None = None
    similarity: float | None = None
    """The cosine similarity that made a ``restate`` (``None`` otherwise)."""


def same_text(a: str, b: str) -> bool:
    """Equal once case, Unicode form, spacing and a final full stop are set aside."""
    def norm(text: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip(".!")
    return norm(a) == norm(b)


def decide(store: MemoryStore, api_key_id: str, *, key: str, content: str, type: MemoryType,
           restate_similarity: float, opposite_key: str | None = None) -> Decision:
    """How a fact (``key``, ``content``, ``type``) of ``api_key_id`` consolidates with what the tenant holds."""
    existing = store.get_by_key(key, api_key_id=api_key_id)
    if existing is not None:
        return Decision(action="create") if same_text(existing.content, content) else \
            Decision(action="supersede", target=existing)
    try:
        result = store.search(content, api_key_id=api_key_id, strategy="semantic", limit=CANDIDATES,
                              record_access=False, type=type)
    except MemrouteError as exc:  # a failing search must not cost the fact: it is stored as a new memory
        log.warning("memroute: consolidation could not search (%s); the fact is stored as new", exc)
        return Decision(action="create")
    for hit in result.hits:
        cosine = hit.leg_scores.get("vector")
        if cosine is None or hit.memory.key in (key, opposite_key):
            continue
        if cosine >= restate_similarity:
            return Decision(action="restate", target=hit.memory, similarity=round(float(cosine), 4))
    return Decision(action="create")


def write(store: MemoryStore, api_key_id: str, decision: Decision, *, key: str, content: str, type: MemoryType,
          session_id: str | None, metadata: Mapping[str, Any], actor: str) -> Memory:
    """Carry out ``decision`` for the fact through the store; the memory as stored."""
    target = decision.target
    if decision.action == "restate" and target is not None:
        merged = {**target.metadata, **metadata, "restated_by": actor}
        if decision.similarity is not None:
            merged["restate_similarity"] = decision.similarity
        updated = store.update(target.id, api_key_id=api_key_id, actor=actor, history_event=HistoryEvent.UPDATED,
                               content=content, key=key, metadata=merged)
        if updated is not None:
            return updated
        # deleted meanwhile: store the fact as new
    event = HistoryEvent.SUPERSEDED if decision.action == "supersede" else None
    return store.add(api_key_id=api_key_id, content=content, key=key, type=type, session_id=session_id,
                     metadata=metadata, actor=actor, history_event=event)
