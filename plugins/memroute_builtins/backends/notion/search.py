"""Keyword relevance for backends without a ranking index of their own (the Notion backend): the reference
system's ``getRelevanceScore`` (reference §7.3) with its caps, minus its main defect — the metadata haystack is
the metadata *values*, so field names such as ``category`` no longer match every extracted memory."""

from __future__ import annotations

import json
import re
from typing import Any, Final

from memroute.models import Memory

__all__ = ["keyword_score", "query_terms"]

MAX_QUERY_CHARS: Final = 4096
MAX_TERMS: Final = 32
MAX_FILTER_TERMS: Final = 16
"""Terms sent to Notion as ``contains`` filters (two conditions each); the rest only score."""


def _normalise(text: str) -> str:
    return text[:MAX_QUERY_CHARS].strip().casefold()


_WORD = re.compile(r"\w+")


def _terms(query: str) -> list[str]:
    # Words, so punctuation and search syntax ('"TypeScript', 'NEAR(x') never hide a word; text with no word
    # characters at all (an emoji) falls back to its whitespace-separated pieces.
    words = _WORD.findall(query) or query.split()
    return list(dict.fromkeys(words))[:MAX_TERMS]


def query_terms(text: str, limit: int = MAX_FILTER_TERMS) -> list[str]:
    """The distinct terms of a query (words, case-folded), longest first, at most ``limit``."""
    return sorted(_terms(_normalise(text)), key=len, reverse=True)[:limit]


def _values(data: Any) -> list[str]:
    if isinstance(data, dict):
        return [v for item in data.values() for v in _values(item)]
    if isinstance(data, list):
        return [v for item in data for v in _values(item)]
    return [data if isinstance(data, str) else json.dumps(data)]


def keyword_score(memory: Memory, text: str) -> float:
    """+20 per haystack (content, key, metadata values) holding the whole query; +3 per occurrence of each
    term (+6 once for a term in the key). 0 when nothing matches or the query is empty."""
    query = _normalise(text)
    if not query:
        return 0.0
    terms = _terms(query)
    key = memory.key.casefold()
    score = 0.0
    for haystack in (memory.content.casefold(), key, " ".join(_values(memory.metadata)).casefold()):
        if query in haystack:
            score += 20
        for term in terms:
            if haystack is key:
                score += 6 if term in key else 0
            else:
                score += 3 * haystack.count(term)
    return score
