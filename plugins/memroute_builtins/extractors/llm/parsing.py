"""Reading the model's answers: what is valid is kept, everything else is dropped and counted, never stored.

A candidate fact needs non-empty content (at most :data:`MAX_FACT_CHARS`), one of the four memory types and a
category. An operation needs a candidate number that exists and has no operation yet, an event of ``add``,
``update``, ``delete`` or ``none``, and for ``update`` / ``delete`` a memory reference that was shown with that
candidate (an id the model was not shown, another tenant's included, is refused), plus new content for
``update``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from memroute.models import MemoryType

from .prompts import MEMORY_TYPES

__all__ = ["MAX_FACT_CHARS", "Candidate", "Operation", "Parsed", "parse_facts", "parse_operations"]

MAX_FACT_CHARS: Final = 500
_CATEGORY_CHARS: Final = 40

Event = Literal["add", "update", "delete", "none"]


@attrs.frozen(kw_only=True)
class Candidate:
    content: str
    type: MemoryType
    category: str


@attrs.frozen(kw_only=True)
class Operation:
    candidate: int
    event: Event
    memory: str | None = None
    """The reference (``m1``) of the memory shown with the candidate that ``update`` / ``delete`` act on."""
    content: str | None = None


@attrs.frozen(kw_only=True)
class Parsed:
    """Valid items, and how many were dropped, by why (``invalid_fact``, ``invalid_operation``,
    ``unknown_memory``, ...)."""

    items: tuple[Any, ...] = ()
    dropped: dict[str, int] = attrs.field(factory=dict)


def _text(value: object, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    cleaned = " ".join(value.replace("\x00", " ").split())
    return cleaned if cleaned and len(cleaned) <= limit else None


def _drop(dropped: dict[str, int], reason: str) -> None:
    dropped[reason] = dropped.get(reason, 0) + 1


def parse_facts(answer: Mapping[str, Any] | None, *, limit: int) -> Parsed:
    """Step 1's candidates (at most ``limit``; more count as ``too_many``)."""
    dropped: dict[str, int] = {}
    facts = answer.get("facts") if isinstance(answer, Mapping) else None
    if not isinstance(facts, list):
        return Parsed(dropped={"invalid_answer": 1})
    kept: list[Candidate] = []
    seen: set[str] = set()
    for item in facts:
        if not isinstance(item, Mapping):
            _drop(dropped, "invalid_fact")
            continue
        content = _text(item.get("content"), MAX_FACT_CHARS)
        kind = item.get("type")
        category = _text(item.get("category"), _CATEGORY_CHARS)
        if content is None or kind not in MEMORY_TYPES or category is None:
            _drop(dropped, "invalid_fact")
            continue
        if content.casefold() in seen:
            continue
        if len(kept) >= limit:
            _drop(dropped, "too_many")
            continue
        seen.add(content.casefold())
        kept.append(Candidate(content=content, type=MemoryType(kind), category=category.casefold()))
    return Parsed(items=tuple(kept), dropped=dropped)


def parse_operations(answer: Mapping[str, Any] | None, shown: Sequence[Sequence[str]]) -> Parsed:
    """Step 2's operations. ``shown[i]`` are the memory references shown with candidate ``i``. A candidate
    without a valid operation gets none (nothing is stored for it); a memory is acted on at most once."""
    dropped: dict[str, int] = {}
    operations = answer.get("operations") if isinstance(answer, Mapping) else None
    if not isinstance(operations, list):
        return Parsed(dropped={"invalid_answer": 1})
    kept: list[Operation] = []
    decided: set[int] = set()
    touched: set[str] = set()
    for item in operations:
        if not isinstance(item, Mapping):
            _drop(dropped, "invalid_operation")
            continue
        number, event, ref = item.get("candidate"), item.get("event"), item.get("memory")
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < len(shown) \
                or number in decided or event not in ("add", "update", "delete", "none"):
            _drop(dropped, "invalid_operation")
            continue
        content = None
        if event in ("update", "delete"):
            if not isinstance(ref, str) or ref not in shown[number] or ref in touched:
                _drop(dropped, "unknown_memory")
                continue
            if event == "update":
                content = _text(item.get("content"), MAX_FACT_CHARS)
                if content is None:
                    _drop(dropped, "invalid_operation")
                    continue
            touched.add(ref)
        decided.add(number)
        kept.append(Operation(candidate=number, event=event, memory=ref if event in ("update", "delete") else None,
                              content=content))
    return Parsed(items=tuple(kept), dropped=dropped)
