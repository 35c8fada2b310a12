"""Fusing the keyword and vector rankings.

The default, **score-aware fusion** (:func:`fuse_scores`), works on normalised scores rather than ranks, and
lets the keyword leg speak only when its match is strong:

* each vector cosine is measured against the query's own candidate distribution, ``(cos - median) / (best -
  median)``, so a static model's low-but-distinctive cosines and a transformer's high ones mean the same;
* a keyword hit counts only by how far its score **stands out** above the keyword leg's median candidate,
  ``min(3, max(0, (score / median - 1) / 3))``: a chat turn sharing one common word with a paraphrased
  question scores near the median and adds nothing, while a task message whose rare words ("commit", "June")
  occur in one memory lifts it even when the vectors missed it;
* ``fused = vector + keyword_weight * keyword``, where ``keyword_weight`` is 1.0 unless the embedding source
  states its own (:attr:`memroute.interfaces.EmbeddingSource.fusion_keyword_weight`: the static model's 1.25,
  MiniLM's 0.5, each chosen on a dev split and kept on held-out data; ``[memory] keyword_weight`` overrides it).

Measured (``memroute bench --quality``; tables in docs/retrieval.md), this is at least as good as each leg on
R@5 in every dev cell — static and transformers, lexical, paraphrased and task questions, with and without 2,000
real chat turns per tenant — where rank fusion (RRF) lost up to 0.29 R@5 to the keyword leg on task questions
with chat distractors, since a leg's rank says nothing about how good its match is.

The older weighted RRF (:func:`fuse`, ``[memory] fusion = "rrf"``) is kept: ``score(d) = Σ_leg w_leg(d) / (k
+ rank_leg(d))``, with a keyword hit weighted by its **coverage** of the query's content words and dropped
below ``MIN_COVERAGE``. Both search the keyword leg without stop words (:func:`keyword_query`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from memroute.models import Memory, SearchHit
from memroute.retrieval.ordering import order_key, order_scored

__all__ = [
    "DEFAULT_KEYWORD_WEIGHT", "KEYWORD_CAP", "KEYWORD_STAND_OUT", "LONG_QUERY_TERMS", "MIN_COVERAGE", "STOP_WORDS",
    "content_terms", "coverage", "fuse", "fuse_scores", "keyword_query",
]

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


DEFAULT_KEYWORD_WEIGHT = 1.0
"""The keyword weight for an embedding source that states no calibrated one."""
KEYWORD_STAND_OUT = 3.0
"""A keyword hit scoring ``1 + KEYWORD_STAND_OUT`` times the leg's median candidate counts fully (1.0).
Re-calibrated with the hub penalty on the dev split (1.5 before): the largest dev R@5 with hybrid at least each
leg in every dev cell and on the bundled synthetic set, for both built-in models (docs/retrieval.md)."""
KEYWORD_CAP = 3.0
"""The most a keyword hit can add (before ``keyword_weight``), however far it stands out."""


def _vector_scale(vector: Sequence[tuple[Memory, float]]) -> tuple[float, float]:
    cosines = [score for _, score in vector]
    median = statistics.median(cosines)
    return median, max(max(cosines) - median, 1e-6)


def fuse_scores(
    keyword: Sequence[tuple[Memory, float]],
    vector: Sequence[tuple[Memory, float]],
    *,
    keyword_weight: float = DEFAULT_KEYWORD_WEIGHT,
    stand_out: float = KEYWORD_STAND_OUT,
    cap: float = KEYWORD_CAP,
) -> list[SearchHit]:
    """Score-aware fusion of the two rankings (each ``(memory, leg score)``, higher better): see the module
    docstring. A memory only the keyword leg found starts from the lowest normalised vector score; a keyword
    hit that does not stand out above the median is left out unless the vector leg found it too. The hit's
    ``score`` is the fused score; ``ranks`` and ``leg_scores`` keep each leg's own rank and raw score."""
    # Two dicts per candidate, not four: the fused score (the sort's key, read through the dict's own
    # __getitem__) and the rest of the hit, its memory and each leg's rank and raw score (filled in by leg).
    scores: dict[str, float] = {}
    parts: dict[str, tuple[Memory, dict[str, int], dict[str, float]]] = {}
    floor = 0.0
    if vector:
        median, spread = _vector_scale(vector)
        for rank, (memory, score) in enumerate(vector, start=1):
            scores[memory.id] = (score - median) / spread
            parts[memory.id] = (memory, {"vector": rank}, {"vector": float(score)})
        floor = min(scores.values())
    if keyword:
        reference = statistics.median(score for _, score in keyword)
        for rank, (memory, score) in enumerate(keyword, start=1):
            strength = min(cap, max(0.0, (score / reference - 1.0) / stand_out)) if reference > 0 else 0.0
            part = parts.get(memory.id)
            if part is None:
                if strength <= 0.0:
                    continue
                scores[memory.id] = floor + keyword_weight * strength
                parts[memory.id] = (memory, {"keyword": rank}, {"keyword": float(score)})
            else:
                scores[memory.id] += keyword_weight * strength
                part[1]["keyword"] = rank
                part[2]["keyword"] = float(score)
                if part[0] is not memory:  # the keyword leg's object wins, as it always did
                    parts[memory.id] = (memory, part[1], part[2])
    hits = []
    # The order by score alone when no two tie (order_scored), not the full key of every candidate.
    for mid in order_scored(list(scores), scores.__getitem__, lambda mid: parts[mid][0]):
        memory, legs, leg = parts[mid]
        hits.append(SearchHit(memory=memory, score=scores[mid], tier="hybrid" if len(legs) == 2
                              else next(iter(legs)), ranks=legs, leg_scores=leg))
    return hits


