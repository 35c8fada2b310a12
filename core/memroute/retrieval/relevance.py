"""The relevance a search hit carries: a number in [0, 1] that means the same across queries, tenants and
embedding sources, so one floor (``[memory] min_score``) can apply to every search.

The rank of a hit comes from fusion (:mod:`memroute.retrieval.fusion`), which compares a query's candidates
with each other and so says nothing about how good the best of them is. The relevance is instead an
estimate of the probability that the hit is the memory the question asks for, from three measurements that
mean the same for every query:

* ``cosine``: the plain cosine of the query's and the memory's embeddings (not the store's refined score);
* ``coverage``: the share of the query's content words the memory contains (:func:`coverage`'s rule; a
  trailing ``s`` is ignored, so "live" matches "Lives");
* ``gap``: how far the memory's ranking score is below the best candidate's (the vector leg's score; for a
  keyword-only result, ``1 - bm25 / best bm25``): a memory far below the best is seldom the answer.

``relevance = 1 / (1 + exp(-(bias + w_cosine * cosine + w_coverage * coverage + w_gap * gap)))``, a logistic
model fitted per embedding source on the dev split of ``memroute bench --quality`` (the candidates of each
question labelled by whether they are its answer; ``python -m memroute.bench.calibrate`` refits it), and
checked on the test split: of the test hits scored
0.8 to 1.0, 98-100 % were the answer; of those under 0.2, 2-4 % (docs/retrieval.md, "Score and floor").
A cosine means different things to different models, so each source states its own coefficients
(:attr:`memroute.interfaces.EmbeddingSource.relevance_calibration`); a source that states none gets
:data:`DEFAULT_CALIBRATION`, fitted for all-MiniLM-L6-v2, whose cosines are in the range most sentence
embedding models share.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence

import attrs

from memroute.models import Memory, SearchHit
from memroute.retrieval.fusion import LONG_QUERY_TERMS, content_terms

__all__ = [
    "DEFAULT_CALIBRATION", "DEFAULT_MIN_SCORE", "KEYWORD_CALIBRATION", "Calibration", "QueryTerms", "iter_scored",
    "score_hits",
]

DEFAULT_MIN_SCORE = 0.02
"""The default relevance floor. On the quality benchmark's test split it keeps 97-99 % of the answers that
hybrid search ranks in its top 5 (both built-in sources, with and without 2,000 chat turns per tenant) and
returns about 3.5 memories of a top 10, instead of all ten. (0.05 kept 94 %, and dropped a memory a long
task message matches on one word of several: "when should I deploy?" among other topics, "Never deploy on
Fridays".)"""


@attrs.frozen(kw_only=True)
class Calibration:
    """The coefficients of the logistic relevance model (see the module docstring)."""

    bias: float
    cosine: float
    coverage: float
    gap: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Calibration:
        """A calibration from ``(bias, cosine, coverage, gap)``, the form an embedding source declares."""
        bias, cosine, coverage, gap = (float(v) for v in values)
        return cls(bias=bias, cosine=cosine, coverage=coverage, gap=gap)

    def most(self, *, cosine: float, gap: float) -> float:
        """The highest relevance any coverage could give with this ``cosine`` and ``gap`` (a hit below the
        floor even so needs no coverage computed)."""
        return self.relevance(cosine=cosine, coverage=1.0 if self.coverage > 0 else 0.0, gap=gap)

    def relevance(self, *, cosine: float, coverage: float, gap: float) -> float:
        """The probability-scaled relevance, strictly between 0 and 1."""
        z = self.bias + self.cosine * cosine + self.coverage * coverage + self.gap * gap
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


DEFAULT_CALIBRATION = Calibration(bias=-1.96, cosine=3.49, coverage=2.03, gap=-23.21)
"""For an embedding source that declares no calibration: the fit for all-MiniLM-L6-v2."""
KEYWORD_CALIBRATION = Calibration(bias=-2.61, cosine=0.0, coverage=4.83, gap=-13.69)
"""For results the keyword leg alone served (no embedding source, or the vector tier degraded): coverage and
the bm25 gap, fitted on the same dev split."""


class QueryTerms:
    """The content words of one query, matched against many memories: the share of them a memory contains
    (the rule of :func:`memroute.retrieval.fusion.coverage`: a query of more than
    :data:`~memroute.retrieval.fusion.LONG_QUERY_TERMS` content words counts two matched words as full
    coverage; a query of stop words alone is no keyword evidence, 0.0, where fusion's rule says 1.0). Compiled
    once per search, since a search scores up to a hundred candidates."""

    def __init__(self, text: str) -> None:
        self.terms = sorted(content_terms(text), key=len, reverse=True)
        self._denominator = len(self.terms) if len(self.terms) <= LONG_QUERY_TERMS else 2
        self._pattern = re.compile(
            r"(?<![\w'])(" + "|".join(re.escape(term) for term in self.terms) + r")s*(?![\w'])", re.IGNORECASE,
        ) if self.terms else None

    def coverage(self, memory: Memory) -> float:
        if self._pattern is None:
            return 0.0
        text = f"{memory.content} {memory.key.replace(':', ' ').replace('_', ' ')}"
        folded = text.casefold()
        if not any(term in folded for term in self.terms):  # the common case among candidates, and cheap
            return 0.0
        matched = {match.group(1).casefold() for match in self._pattern.finditer(text)}
        return min(1.0, len(matched) / self._denominator)


def score_hits(hits: Sequence[SearchHit], text: str, calibration: Calibration | None, *,
               cosines: dict[str, float], vector_best: float | None, fused: bool = False) -> list[SearchHit]:
    """``hits`` (in their rank order, which is kept) with ``score`` set to their relevance; see
    :func:`iter_scored`."""
    return list(iter_scored(hits, text, calibration, cosines=cosines, vector_best=vector_best, fused=fused))


def iter_scored(hits: Sequence[SearchHit], text: str, calibration: Calibration | None, *,
                cosines: dict[str, float], vector_best: float | None, fused: bool = False,
                floor: float = 0.0) -> Iterator[SearchHit]:
    """``hits`` (in their rank order, which is kept) with ``score`` set to their relevance, those below
    ``floor`` left out, computed as they are taken: a search that stops at its limit scores only the hits it
    looked at, and a hit that no coverage could lift over the floor is left out before its coverage, most of
    the cost, is computed. Their ``coverage`` and ``cosine`` join ``leg_scores``, and with ``fused`` the score
    they came with (fusion's) is kept as ``leg_scores["fused"]``.
    ``cosines`` holds the vector leg's plain cosines by memory id and ``vector_best`` its best ranking score
    (``None``, with ``calibration`` ignored: the keyword leg alone served, and :data:`KEYWORD_CALIBRATION`
    applies)."""
    if not hits:
        return
    terms = QueryTerms(text)
    if vector_best is None:
        best = max((hit.leg_scores.get("keyword", 0.0) for hit in hits), default=0.0)
        for hit in hits:
            keyword = hit.leg_scores.get("keyword", 0.0)
            share = terms.coverage(hit.memory)
            gap = 1.0 - keyword / best if best > 0 else 1.0
            if floor > 0 and KEYWORD_CALIBRATION.most(cosine=0.0, gap=gap) < floor:
                continue
            relevance = KEYWORD_CALIBRATION.relevance(cosine=0.0, coverage=share, gap=gap)
            if relevance >= floor:
                yield _with(hit, relevance, {"coverage": share}, fused)
        return
    model = calibration or DEFAULT_CALIBRATION
    lowest_cosine = min(cosines.values(), default=0.0)
    lowest_score = min((hit.leg_scores["vector"] for hit in hits if "vector" in hit.leg_scores), default=vector_best)
    for hit in hits:
        cosine = cosines.get(hit.memory.id, lowest_cosine)  # a keyword-only find: as far as the farthest vector
        gap = vector_best - hit.leg_scores.get("vector", lowest_score)
        if floor > 0 and model.most(cosine=cosine, gap=gap) < floor:
            continue  # far below the best: no coverage lifts it over the floor
        share = terms.coverage(hit.memory)
        relevance = model.relevance(cosine=cosine, coverage=share, gap=gap)
        if relevance >= floor:
            yield _with(hit, relevance, {"cosine": cosine, "coverage": share}, fused)


def _with(hit: SearchHit, relevance: float, extra: dict[str, float], fused: bool) -> SearchHit:
    if fused:
        extra = {"fused": hit.score, **extra}
    return SearchHit(memory=hit.memory, score=relevance, tier=hit.tier, ranks=hit.ranks,
                     leg_scores={**hit.leg_scores, **extra})
