"""The relevance a search hit carries: a number in [0, 1] that means the same across queries, tenants and
embedding sources, so one floor (``[memory] min_score``) can apply to every search.

The rank of a hit comes from fusion (:mod:`memroute.retrieval.fusion`), which compares a query's candidates
with each other. The relevance instead says how well the memory matches the message **on its own**, from two
measurements that do not depend on the other candidates:

* ``cosine``: the plain cosine of the message's and the memory's embeddings (not the store's refined score);
* ``coverage``: the share of the message's content words the memory contains (:func:`coverage`'s rule; a
  trailing ``s`` is ignored, so "live" matches "Lives").

A message about several things ("Which database for this project? I prefer Ubuntu servers.") is also split
into its parts (:func:`message_parts`: sentences, and clauses joined by ", and" / ", but" ...), and the
coverage is the best of the whole message's and its parts': a memory that has the words of one part is not
diluted by the words of the others. (The cosine of each part was tried too: on the test split it changed no
answer's fate at the chosen floor and made a search of a two-part message 1.5-3x slower, one more vector
query per part.)

``relevance = 1 / (1 + exp(-(bias + w_cosine * cosine + w_coverage * coverage)))``, a logistic model fitted
per embedding source on the dev split of ``memroute bench --quality`` plus questions with several answers
(:mod:`memroute.bench.relevance_questions`), with answers and non-answers weighted equally
(``python -m memroute.bench.calibrate`` refits it). So 0.5 means the measurements look as much like an
answer's as not, and the score does not move with how many other memories a tenant holds.

Earlier fits also used the *gap* below the best candidate. It told "the answer" from its runner-ups, and so
hid real answers: the second fact an indirect question asks about ("What is my job?" -> "Is a nurse" below
"Works night shifts"), the memory answering one topic of a multi-topic message. A calibration may still
weigh it (the fourth coefficient); the shipped ones do not.
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
    "DEFAULT_CALIBRATION", "DEFAULT_MIN_SCORE", "KEYWORD_CALIBRATION", "MAX_PARTS", "Calibration", "QueryTerms",
    "iter_scored", "message_parts", "score_hits",
]

DEFAULT_MIN_SCORE = 0.18
"""The default relevance floor: the highest that hides at most 3 % of the answers hybrid search ranks in its
top 5 on the dev split (``python -m memroute.bench.calibrate`` chooses it). On the test split's fact stores
it hides 3 of 156 such answers with the static model and 2 of 168 with the transformers one, none of them
an answer to an indirect question or to one part of a multi-topic message, and of an off-topic message's
top 10 it lets 3.7 (static) or 0.8 (transformers) through; the earlier floor, which weighed the gap below
the best candidate, hid 10 and 7 and let about 6 through (docs/retrieval.md, "Score and floor")."""


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


DEFAULT_CALIBRATION = Calibration(bias=-3.34, cosine=11.46, coverage=2.72, gap=0.0)
"""For an embedding source that declares no calibration: the fit for all-MiniLM-L6-v2."""
KEYWORD_CALIBRATION = Calibration(bias=-2.65, cosine=0.0, coverage=5.22, gap=0.0)
"""For results the keyword leg alone served (no embedding source, or the vector tier degraded): coverage and
the bm25 gap, fitted on the same dev split."""


MAX_PARTS = 4
"""The most parts of a message scored on their own (the last ones: a long message usually ends with what it
asks)."""
_PART = re.compile(r"(?<=[.?!;:])\s+|,\s+(?=(?:and|but|also|plus|or)\s)", re.IGNORECASE)


def message_parts(text: str) -> list[str]:
    """The parts of a message that may each be about something else: its sentences, and the clauses of a
    sentence joined by ", and" / ", but" / ", also" / ", plus" / ", or"; those with a content word, the last
    :data:`MAX_PARTS` of them. Empty when the message is one part (it is scored whole)."""
    parts: list[str] = []
    for part in reversed(_PART.split(text)):  # from the end: a pasted document is not read word by word
        if content_terms(part):
            parts.append(part.strip())
            if len(parts) == MAX_PARTS:
                break
    return parts[::-1] if len(parts) > 1 else []


class QueryTerms:
    """The content words of one message, matched against many memories: the share of them a memory contains
    (the rule of :func:`memroute.retrieval.fusion.coverage`: a query of more than
    :data:`~memroute.retrieval.fusion.LONG_QUERY_TERMS` content words counts two matched words as full
    coverage; a query of stop words alone is no keyword evidence, 0.0, where fusion's rule says 1.0), the best
    of the whole message's and each of its :func:`message_parts`'. Built once per search, since a search
    scores up to a hundred candidates; a candidate's words are read only when one of the query's appears in it
    as a substring (the common case is that none does)."""

    def __init__(self, text: str) -> None:
        self.terms = content_terms(text)
        self._sets = [(terms, len(terms) if len(terms) <= LONG_QUERY_TERMS else 2)
                      for terms in (self.terms, *(content_terms(part) for part in message_parts(text))) if terms]

    def coverage(self, memory: Memory) -> float:
        if not self._sets:
            return 0.0
        text = f"{memory.content} {memory.key.replace(':', ' ').replace('_', ' ')}"
        folded = text.casefold().replace("\u2019", "'")
        if not any(term in folded for term in self.terms):
            return 0.0
        words = content_terms(text)
        return max(min(1.0, len(terms & words) / denominator) for terms, denominator in self._sets)


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
