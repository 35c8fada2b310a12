"""The typed reports the service returns: frozen attrs values, turned into JSON by one converter
(:func:`memroute.serialization.to_jsonable`). Surfaces (the CLI's ``--json``, next the REST API's schemas)
render these; they never build their own dicts of the same facts."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["CacheStats", "ClearReport", "MaintenanceReport", "MemoryStats"]


@attrs.frozen(kw_only=True)
class MaintenanceReport:
    """The outcome of ``summarize``, ``compact``, ``prune`` or ``prune_all``."""

    action: str
    dry_run: bool
    api_key_id: str | None
    """The tenant; ``None`` for ``prune_all`` (every tenant)."""
    candidates: tuple[str, ...] = ()
    """Ids of the memories the action (would) replace or delete."""
    candidate_tokens: int = 0
    deleted: int = 0
    summary_ids: tuple[str, ...] = ()
    summary_preview: str = ""
    reasons: dict[str, int] = attrs.field(factory=dict)
    """For ``prune``: how many candidates each rule found (``retention``, ``expired``, ``decay``)."""

    @property
    def candidate_count(self) -> int:
        return len(self.candidates)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape ``memroute summarize / compact / prune --json`` prints (``candidate_count`` added)."""
        return {
            "action": self.action, "dry_run": self.dry_run, "api_key_id": self.api_key_id,
            "candidate_count": len(self.candidates), "candidates": list(self.candidates),
            "candidate_tokens": self.candidate_tokens, "deleted": self.deleted,
            "summary_ids": list(self.summary_ids), "summary_preview": self.summary_preview,
            "reasons": dict(self.reasons),
        }


@attrs.frozen(kw_only=True)
class ClearReport:
    """The outcome of ``clear``: which memories of one tenant matched, and how many were really deleted."""

    api_key_id: str
    dry_run: bool
    type: str | None = None
    session_id: str | None = None
    older_than_days: int | None = None
    matched: int = 0
    """How many memories matched the filters (all of them: there is no page cap)."""
    deleted: int = 0
    """How many were deleted (0 in a dry run); a memory deleted concurrently by someone else is not counted."""
    ids: tuple[str, ...] = ()
    """The matching ids, oldest first."""
    tokens: int = 0
    """Their token estimate (``ceil(len / 4)`` each)."""


@attrs.frozen(kw_only=True)
class CacheStats:
    """The embedding cache's counters (process-wide: the cache is shared by every tenant)."""

    hits: int = 0
    misses: int = 0
    size: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return round(self.hits / total, 4) if total else 0.0


@attrs.frozen(kw_only=True)
class MemoryStats:
    """One tenant's list statistics (the reference's ``GET /api/memory`` ``stats`` block)."""

    api_key_id: str
    total: int
    by_type: dict[str, int] = attrs.field(factory=dict)
    """Every memory type, 0 when the tenant has none of it."""
    tokens_used: int = 0
    """Sum of the token estimate ``ceil(len / 4)`` over the tenant's memories."""
    cache: CacheStats = attrs.field(factory=CacheStats)
