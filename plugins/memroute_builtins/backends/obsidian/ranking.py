"""Keyword ranking for backends without a full-text index: BM25 over one tenant's candidate memories.

Used by the Obsidian backend; nothing in it is Obsidian-specific (``plugin_hits`` are the ids a remote
search also matched).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Final

from memroute.models import Memory

__all__ = ["PLUGIN_BONUS", "rank", "tokens"]

_WORD = re.compile(r"\w+", re.UNICODE)
_K1, _B = 1.2, 0.75
PLUGIN_BONUS: Final = 0.25
"""Added (times the best keyword score, or 1) when the plugin's fuzzy search also matched a note."""


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def rank(text: str, memories: Sequence[Memory], plugin_hits: set[str]) -> list[tuple[Memory, float]]:
    """BM25 over the tenant's candidates (content and key; metadata is left out so its keys do not pollute
    scores), a phrase bonus for the whole query as a substring (scripts without spaces), and a bonus for
    matching memories (by id) the plugin's search matched too. Only memories with a keyword match are returned, best
    first."""
    terms = list(dict.fromkeys(tokens(text)))
    phrase = text.casefold().strip()
    docs = [tokens(m.content + " " + m.key) for m in memories]
    avg = sum(len(d) for d in docs) / len(docs) if docs else 1.0
    df = Counter(t for d in docs for t in set(d) if t in terms)
    n = len(docs)
    scores = []
    for memory, doc in zip(memories, docs, strict=True):
        tf = Counter(t for t in doc if t in df)
        score = 0.0
        for term, freq in tf.items():
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * freq * (_K1 + 1) / (freq + _K1 * (1 - _B + _B * len(doc) / (avg or 1.0)))
        if phrase and phrase in (memory.content + "\n" + memory.key).casefold():
            score += 0.5 if len(terms) != 1 else 0.1
        scores.append(score)
    best = max(scores, default=0.0) or 1.0
    ranked = []
    for memory, score in zip(memories, scores, strict=True):
        # The plugin's index lags behind writes (it may still hold a note's old text), so its matches only
        # reorder what memroute's own scoring found in the current text; they never add a memory alone.
        if score > 0 and memory.id in plugin_hits:
            score += PLUGIN_BONUS * best
        if score > 0:
            ranked.append((memory, score))
    ranked.sort(key=lambda pair: (-pair[1], -pair[0].updated_at.timestamp(), pair[0].id))
    return ranked
