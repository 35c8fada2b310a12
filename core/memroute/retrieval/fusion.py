"""Fusing the keyword and vector rankings.

Weighted Reciprocal Rank Fusion: ``score(d) = Σ_leg w_leg(d) / (k + rank_leg(d))``. Plain RRF gives both legs
equal say, and loses to the vector leg when the keyword leg is noisy: a paraphrased question shares one common
word ("weekend", "city") with dozens of unrelated memories, and those partial matches push the right answer
down. Measured on the bundled data set (``tests/bench/quality.py``; numbers in docs/retrieval.md), three
measures make fusion at least as good as its best leg on lexical *and* semantic queries:

* the keyword leg searches the query **without stop words**, so it matches on content words only;
* a keyword hit's weight is its **coverage** — the share of the query's content words it contains — and a hit
  covering less than half of them does not count at all (``MIN_COVERAGE``): a lexical query's answer covers
  most of the query, a semantic query's accidental matches cover one word (long chat messages are measured
  against two words, not all of them: see :func:`coverage`);
* the vector leg has a relevance floor (``min_similarity``, and a window below the best cosine), so a query
  with no relevant memory returns nothing rather than the nearest irrelevant ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memroute.models import Memory, SearchHit
from memroute.retrieval.ordering import order_key

__all__ = ["LONG_QUERY_TERMS", "MIN_COVERAGE", "STOP_WORDS", "content_terms", "coverage", "fuse", "keyword_query"]

MIN_COVERAGE = 0.5
"""A keyword hit must contain at least this share of the query's content words to count in fusion."""

STOP_WORDS = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "anything", "are",
    "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
    "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't",
    "down", "during", "each", "few", "for", "from", "further", "had", "hadn't", "has", "hasn't", "have",
    "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him",
    "himself", "his", "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't",
    "it", "it's", "its", "itself", "know", "let's", "like", "me", "more", "most", "mustn't", "my", "myself",
    "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves",
    "out", "over", "own", "please", "recall", "remember", "same", "shan't", "she", "she'd", "she'll", "she's",
    "should", "shouldn't", "so", "some", "something", "such", "tell", "than", "that", "that's", "the", "their",
    "theirs", "them", "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're",
    "they've", "thing", "things", "this", "those", "through", "to", "too", "under", "until", "up", "use",
    "used", "using", "very", "want", "wants", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've", "were",
    "weren't", "what", "what's", "when", "when's", "where", "where's", "which", "while", "who", "who's", "whom",
    "why", "why's", "with", "won't", "would", "wouldn't", "you", "you'd", "you'll", "you're", "you've", "your",
    "yours", "yourself", "yourselves",
))

_WORD = re.compile(r"[\w']+", re.UNICODE)


def content_terms(text: str) -> set[str]:
    """The content words of ``text``: case-folded, stop words removed, a plural ``s`` stripped."""
    terms = set()
    for word in _WORD.findall(text):
        folded = word.casefold().replace("\u2019", "'")
        if folded not in STOP_WORDS:
            terms.add(folded.rstrip("s") or folded)
    return terms


LONG_QUERY_TERMS = 5
"""A query with more content words than this is a chat message, not a question: see :func:`coverage`."""


def coverage(query_terms: set[str], memory: Memory) -> float:
    """The share of ``query_terms`` that ``memory`` (content and key) contains; 1.0 for an empty query.

    A long message ("plan the billing service: which database, hosting, libraries...") touches several topics,
    and each relevant memory matches only one or two of its words; for such queries a memory matching two
    content words counts fully and one word counts half, instead of a share of every word in the message."""
    if not query_terms:
        return 1.0
    matched = len(query_terms & content_terms(f"{memory.content} {memory.key.replace(':', ' ').replace('_', ' ')}"))
    denominator = len(query_terms) if len(query_terms) <= LONG_QUERY_TERMS else 2
    return min(1.0, matched / denominator)


def keyword_query(text: str) -> str:
    """The query the keyword leg runs: the content words of ``text`` (stop words removed), or ``text``
    itself when it has nothing but stop words."""
    words = _WORD.findall(text)
    content = [w for w in words if w.casefold().replace("\u2019", "'") not in STOP_WORDS]
    return " ".join(content) if content else text


def fuse(
    keyword: Sequence[tuple[Memory, float]],
    vector: Sequence[tuple[Memory, float]],
    *,
    k: int,
    query: str | None = None,
    keyword_weight: float = 1.0,
    vector_weight: float = 1.0,
    min_coverage: float = MIN_COVERAGE,
) -> list[SearchHit]:
    """Weighted RRF over the two rankings (each best first, as ``(memory, leg score)``). With ``query``, keyword
    hits are weighted by their coverage of its content words and dropped below ``min_coverage``; a ranking
    from one leg alone is kept whole (its order is the leg's)."""
    scores: dict[str, float] = {}
    memories: dict[str, Memory] = {}
    ranks: dict[str, dict[str, int]] = {}
    leg_scores: dict[str, dict[str, float]] = {}
    terms = content_terms(query) if query is not None and keyword and vector else set()
    for leg, ranking, weight in (("keyword", keyword, keyword_weight), ("vector", vector, vector_weight)):
        for rank, (memory, score) in enumerate(ranking, start=1):
            contribution = weight / (k + rank)
            if leg == "keyword" and terms:
                share = coverage(terms, memory)
                if share < min_coverage:
                    continue
                contribution *= share
            memories[memory.id] = memory
            scores[memory.id] = scores.get(memory.id, 0.0) + contribution
            ranks.setdefault(memory.id, {})[leg] = rank
            leg_scores.setdefault(memory.id, {})[leg] = float(score)
    ordered = sorted(scores, key=lambda mid: order_key(scores[mid], memories[mid]))
    hits = []
    for mid in ordered:
        legs = ranks[mid]
        tier = "hybrid" if len(legs) == 2 else next(iter(legs))
        hits.append(
            SearchHit(memory=memories[mid], score=scores[mid], tier=tier, ranks=legs, leg_scores=leg_scores[mid])
        )
    return hits
