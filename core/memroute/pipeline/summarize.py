"""Pure helpers for summarization and compaction (reference §11, with §17.13 fixed): which memories to
compact, and an English summary that keeps each memory's facts instead of "the first three sentences"."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from memroute.models import Memory, estimate_tokens

__all__ = ["GROUP_TITLES", "build_summary", "condense", "group_of", "select_for_compaction"]

MAX_LINE_CHARS: Final = 300
"""Each memory keeps up to this many characters in a summary (whole sentences where possible)."""

GROUP_TITLES: Final[dict[str, str]] = {
    # the everyday extractor's categories, then what the user said (kept messages)
    "identity": "Who they are", "family": "Family and relationships", "work": "Work", "place": "Where they live",
    "health": "Health", "diet": "Diet", "pets": "Pets", "possessions": "Possessions", "languages": "Languages",
    "study": "Study", "skills": "Skills", "hobbies": "Hobbies", "likes": "Likes and dislikes",
    "routines": "Routines", "plans": "Plans", "dates": "Dates", "assistant": "How they want answers",
    "conversation": "What they said",
    # the regex extractor's categories, then types
    "preference": "Preferences",
    "aversion": "Dislikes and things avoided",
    "decision": "Decisions",
    "pattern": "Habits",
    "factual": "Facts",
    "episodic": "Events",
    "procedural": "Procedures",
    "semantic": "Knowledge",
    "summary": "Earlier summaries",
}
"""Section titles, in the order sections appear; unknown categories come after, titled by name."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def condense(content: str, max_chars: int = MAX_LINE_CHARS) -> str:
    """``content`` on one line, cut to ``max_chars``: whole sentences when the first one fits, else whole
    words, with ``…`` when something was cut."""
    text = " ".join(content.split())
    if len(text) <= max_chars:
        return text
    kept = ""
    for sentence in _SENTENCE_END.split(text):
        candidate = f"{kept} {sentence}".strip()
        if len(candidate) > max_chars - 1:
            break
        kept = candidate
    if not kept:
        kept = text[: max_chars - 1].rsplit(" ", 1)[0] or text[: max_chars - 1]
    return kept.rstrip() + "…"


def group_of(memory: Memory) -> str:
    """The summary section of ``memory``: its extraction category when it has one, else its type."""
    category = memory.metadata.get("category") if isinstance(memory.metadata, dict) else None
    if isinstance(category, str) and category.strip():
        return category.strip().lower()
    return memory.type.value


def build_summary(
    memories: Sequence[Memory], *, older_than_days: int | None = None, max_line_chars: int = MAX_LINE_CHARS
) -> str:
    """An English summary of ``memories``: a header (count, age, date range), then one section per
    category/type with one line per distinct fact (repeats counted, not repeated)."""
    if not memories:
        return ""
    groups: dict[str, dict[str, list[Any]]] = {}
    for memory in sorted(memories, key=lambda m: m.created_at):
        line = condense(memory.content, max_line_chars)
        seen = groups.setdefault(group_of(memory), {})
        entry = seen.setdefault(line.casefold(), [line, 0])
        entry[1] += 1
    first = min(m.created_at for m in memories).date().isoformat()
    last = max(m.created_at for m in memories).date().isoformat()
    span = first if first == last else f"{first} to {last}"
    age = f" older than {older_than_days} days" if older_than_days is not None else ""
    noun = "memory" if len(memories) == 1 else "memories"
    lines = [f"Summary of {len(memories)} {noun}{age} ({span})."]
    order = [g for g in GROUP_TITLES if g in groups] + sorted(g for g in groups if g not in GROUP_TITLES)
    for group in order:
        lines.append(f"{GROUP_TITLES.get(group, group.capitalize())}:")
        for text, count in groups[group].values():
            lines.append(f"- {text}" + (f" (mentioned {count} times)" if count > 1 else ""))
    return "\n".join(lines)


def select_for_compaction(memories: Sequence[Memory], max_tokens: int) -> tuple[list[Memory], list[Memory]]:
    """Split ``memories`` into (kept, to compact): walking newest first, a memory is kept while the kept ones
    fit ``max_tokens`` (``ceil(len/4)`` each); one that does not fit is marked for compaction and the walk
    goes on, so later, smaller memories can still be kept (reference §11)."""
    kept: list[Memory] = []
    compact: list[Memory] = []
    total = 0
    for memory in sorted(memories, key=lambda m: m.created_at, reverse=True):
        tokens = estimate_tokens(memory.content)
        if total + tokens <= max_tokens:
            kept.append(memory)
            total += tokens
        else:
            compact.append(memory)
    return kept, compact
