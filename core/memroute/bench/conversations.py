"""``memroute bench --quality``, second set: evidence recall on long two-person conversations.

Four tenants, each one long conversation between two friends (:data:`memroute.bench.dialogues.DIALOGUES`):
25 dated sessions of real chat turns from the ``chitchat-dataset`` package (2,000 turns per tenant by
default, disjoint between tenants), with the turns in which one of them says something worth remembering
placed in their sessions, and 100 questions about the two people, each labelled with the turns that answer
it (48 in :mod:`memroute.bench.dialogues`, 52 more in :mod:`memroute.bench.more_dialogues`). Every turn is
one memory, stored one of two ways: **dated**, ``(7 January 2024) Maya said, "..."`` (as the LoCoMo paper
stores turns), or **bare**, the turn's text alone (what an episodic memory of user messages holds); either way
with the metadata ``observe`` writes, ``said_at`` (its session's date) and ``speaker``. Questions fall in a
**dev** or a **test** half (alternating within each tenant and batch, in the order of a hash): tune on dev,
report test.

Two more categories (:mod:`memroute.bench.cue_dialogues`), reported apart so the first set's figures stay
comparable: ``time`` questions, which name when something was said ("last week", "in September"), each asked
at its own moment, and ``person`` questions, which name who said it; each against a *confuser* turn that only
the time or the person tells apart.

Legs, each through the public service on the same stored data, with no relevance floor (``min_score=0``):
``keyword`` (BM25 alone: FTS5 through memroute's keyword leg), ``cosine`` (plain cosine: the store's ranking
refinements off, the whole question embedded), ``rrf`` (the naive recipe: Reciprocal Rank Fusion, k = 60, of
those two rankings), ``hybrid`` (memroute's) and ``hybrid-plain`` (memroute's without reading time and people in
the question, ``[memory] question_cues = false``; the three baselines are run without it too). R@k: the share
of a question's evidence turns among the top k, averaged over questions.
"""

from __future__ import annotations

import random
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from memroute.bench.cue_dialogues import CUE_QUESTIONS, CUE_TURNS
from memroute.bench.dialogues import DIALOGUES
from memroute.bench.more_dialogues import MORE_QUESTIONS, MORE_TURNS
from memroute.bench.quality import embedding_options, load_store, store_name
from memroute.errors import ConfigError
from memroute.models import Memory, utcnow

__all__ = ["CATEGORIES", "FORMATS", "KS", "LEGS", "Question", "questions", "run_conversations", "summary"]

LEGS = ("keyword", "cosine", "rrf", "hybrid-plain", "hybrid")
CATEGORIES = ("facts", "time", "person")
"""``facts``: the 100 questions of :mod:`memroute.bench.dialogues` and :mod:`memroute.bench.more_dialogues` (each
names a person, none a time); ``time`` and ``person``: the questions
of :mod:`memroute.bench.cue_dialogues`."""
FORMATS = ("dated", "bare")
KS = (5, 10, 25, 50)
SESSIONS = 25
RRF_K = 60
FIRST_SESSION = datetime(2024, 1, 7, 19, 0, tzinfo=UTC)
_NAMESPACE = uuid.UUID("0b6f5a3e-8c1d-4e2f-9a7b-5d3c2e1f0a99")


@attrs.frozen(kw_only=True)
class Question:
    tenant: str
    text: str
    evidence: tuple[str, ...]
    split: str
    category: str = "facts"
    asked: datetime = attrs.field(factory=lambda: _session_date(SESSIONS))
    """When the question is asked (its time words are relative to it): after the last session, or for a
    ``time`` question its own moment."""


def questions() -> list[Question]:
    """Every question, with its split: each tenant's questions of one category and batch, ordered by a hash of
    tenant and text, alternate between ``dev`` and ``test``."""
    out = []
    for tenant, (_, _, asked) in DIALOGUES.items():
        # Each batch apart, so a later batch never moves a question of an earlier one to the other side.
        for batch in (asked, MORE_QUESTIONS.get(tenant, ())):
            ordered = sorted(batch, key=lambda q: zlib.crc32(f"{tenant}/{q[0]}".encode()))
            out += [Question(tenant=tenant, text=text, evidence=evidence, split=("dev", "test")[i % 2])
                    for i, (text, evidence) in enumerate(ordered)]
    for tenant, cued in CUE_QUESTIONS.items():
        for category in CATEGORIES[1:]:
            kept = sorted((q for q in cued if q[2] == category),
                          key=lambda q: zlib.crc32(f"{tenant}/{q[0]}".encode()))
            out += [Question(tenant=tenant, text=text, evidence=evidence, split=("dev", "test")[i % 2],
                             category=category, asked=_asked(*when))
                    for i, (text, evidence, _, when) in enumerate(kept)]
    return out


def _asked(session: int, days: int) -> datetime:
    """Noon, ``days`` after the date of ``session``."""
    return _session_date(session).replace(hour=12, minute=0) + timedelta(days=days)


def real_conversations(seed: int = 29) -> list[list[str]]:
    """The real two-person conversations of ``chitchat-dataset``, each a list of turns, shuffled."""
    try:
        import chitchat_dataset
    except ImportError:
        raise ConfigError("the quality benchmark needs the chitchat-dataset package: "
                          "pip install 'memroute[bench]'") from None
    conversations = []
    for conversation in chitchat_dataset.ConversationDataset():
        turns = [" ".join(turn.split()) for turn in conversation]
        turns = [turn for turn in turns if 2 <= len(turn) <= 400]
        if len(turns) >= 4:
            conversations.append(turns)
    random.Random(seed).shuffle(conversations)
    return conversations


def _session_date(session: int) -> datetime:
    return FIRST_SESSION + timedelta(days=14 * session)


def render(text: str, speaker: str, session: int, form: str) -> str:
    """A turn as stored: ``dated`` with its session's date and speaker, ``bare`` as said."""
    if form == "bare":
        return text
    return f'({_session_date(session):%-d %B %Y}) {speaker} said, "{text}"'


def memories(per_tenant: int, form: str, conversations: list[list[str]]) -> Iterator[Memory]:
    """Every tenant's turns as memories: ``per_tenant`` real turns in :data:`SESSIONS` sessions (whole
    conversations, the speakers taking turns), each evidence turn placed in the middle of its session.
    Memories are created in session order over the last 20 days (inside the default retention); each says
    when it was said (``metadata.said_at``: its session's date, 30 seconds a turn from 19:00) and by whom
    (``metadata.speaker``), as ``observe`` records a message."""
    now = utcnow()
    start = now - timedelta(days=20)
    step = timedelta(days=19) / SESSIONS
    used = 0
    for tenant, (speakers, evidence, _) in DIALOGUES.items():
        turns: list[tuple[str, str]] = []  # (speaker, text)
        while len(turns) < per_tenant:
            if used >= len(conversations):
                raise ConfigError("not enough real conversations for that many turns per tenant")
            conversation = conversations[used]
            first = used % 2
            turns += [(speakers[(first + i) % 2], text) for i, text in enumerate(conversation)]
            used += 1
        turns = turns[:per_tenant]
        size = -(-len(turns) // SESSIONS) if turns else 0
        sessions: list[list[tuple[str, str, str]]] = [
            [(f"turn:{index}", speaker, text) for index, (speaker, text) in
             enumerate(turns[s * size:(s + 1) * size], start=s * size)] for s in range(SESSIONS)]
        placed = (*evidence, *MORE_TURNS.get(tenant, ()), *CUE_TURNS.get(tenant, ()))
        for key, speaker, session, text in placed:
            rows = sessions[session]
            rows.insert(len(rows) // 2, (key, speaker, text))
        for session, rows in enumerate(sessions):
            for position, (key, speaker, text) in enumerate(rows):
                moment = start + session * step + timedelta(seconds=30 * position)
                said = _session_date(session) + timedelta(seconds=30 * position)
                yield Memory(id=str(uuid.uuid5(_NAMESPACE, f"{tenant}/{key}")), api_key_id=tenant, key=key,
                             content=render(text, speaker, session, form), created_at=moment, updated_at=moment,
                             metadata={"said_at": said.isoformat(), "speaker": speaker})


def naive_rrf(*rankings: list[str], k: int = RRF_K) -> list[str]:
    """Reciprocal Rank Fusion of ``rankings`` (each best first): ``Σ 1 / (k + rank)``, ties by first seen."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda key: -scores[key])


def evaluate(rank: Callable[[str, Question], list[str]], asked: Iterable[Question]) -> dict[str, Any]:
    """``{split: {leg: {"R@k": recall, ..., "n": questions}}}`` over ``asked``, for the rankings ``rank(leg,
    question)`` returns (memory keys, best first)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for question in asked:
        wanted = set(question.evidence)
        for leg in LEGS:
            ranking = rank(leg, question)
            for split in (question.split, "all"):
                acc = sums.setdefault((split, leg), [0.0] * (len(KS) + 1))
                acc[-1] += 1
                for i, k in enumerate(KS):
                    acc[i] += len(wanted & set(ranking[:k])) / len(wanted)
    report: dict[str, Any] = {}
    for (split, leg), acc in sorted(sums.items()):
        n = acc[-1]
        report.setdefault(split, {})[leg] = {**{f"R@{k}": round(acc[i] / n, 3) for i, k in enumerate(KS)},
                                             "n": int(n)}
    return report


PLAIN_OPTIONS: dict[str, dict[str, Any]] = {"static": {"query_content_words": False}}
PLAIN_VECTORS: dict[str, Any] = {"center": False, "hub_penalty": 0.0}


NO_CUES: dict[str, Any] = {"question_cues": False}


def measure(open_service: Callable[..., Any], data_dir: Path, embedding: dict[str, Any], form: str,
            per_tenant: int, conversations: list[list[str]],
            progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Load one store (every tenant's turns, stored as ``form``) and evaluate every leg on every question: the
    ``facts`` questions' figures at the top of the report, the other categories' under ``categories``."""
    depth = max(KS)
    with open_service(data_dir, embedding) as mem:
        count, loaded = load_store(mem, memories(per_tenant, form, conversations), timeout=3600)
        progress(f"{form}: loaded {count} turns in {loaded:.1f} s")
        plain_embedding = {**embedding, **PLAIN_OPTIONS.get(str(embedding.get("source")), {})}
        with open_service(data_dir, {"source": "none"}, None, NO_CUES) as keyword_only, \
                open_service(data_dir, plain_embedding, PLAIN_VECTORS, NO_CUES) as plain, \
                open_service(data_dir, embedding, None, NO_CUES) as uncued:

            def keys(service: Any, question: Question, strategy: str, expected: tuple[str, ...]) -> list[str]:
                result = service.search(question.text, api_key_id=question.tenant, strategy=strategy,
                                        limit=depth, min_score=0.0, record_access=False, now=question.asked)
                if tuple(result.provenance.legs) != expected:
                    raise RuntimeError(f"a leg did not run as such: {result.provenance}")
                return [hit.memory.key for hit in result.hits]

            def rank(leg: str, question: Question) -> list[str]:
                if leg == "keyword":
                    return keys(keyword_only, question, "hybrid", ("keyword",))
                if leg == "cosine":
                    return keys(plain, question, "semantic", ("vector",))
                if leg == "rrf":
                    return naive_rrf(rank("keyword", question), rank("cosine", question))
                if leg == "hybrid-plain":
                    return keys(uncued, question, "hybrid", ("keyword", "vector"))
                return keys(mem, question, "hybrid", ("keyword", "vector"))

            started = time.perf_counter()
            asked = questions()
            report = evaluate(rank, [q for q in asked if q.category == "facts"])
            report["categories"] = {category: evaluate(rank, [q for q in asked if q.category == category])
                                    for category in CATEGORIES[1:]}
            report["seconds"] = {"load": round(loaded, 1), "queries": round(time.perf_counter() - started, 1)}
    return report


def run_conversations(
    open_service: Callable[..., Any],
    *,
    models: Iterable[str] = ("static", "transformers"),
    per_tenant: int = 2000,
    root: Path,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """The whole set: for each embedding source (or ``source:model``) and each way of storing a turn, one store
    and every leg.
    ``open_service(data_dir, embedding_options, vector_options=None, memory_options=None)`` as for
    :func:`memroute.bench.quality.run_quality` (``memory_options``: ``[memory]`` settings for that service)."""
    conversations = real_conversations()
    report: dict[str, Any] = {"questions": len(questions()), "tenants": len(DIALOGUES),
                              "turns_per_tenant": per_tenant, "results": {}}
    for model in models:
        for form in FORMATS:
            progress(f"conversations: {model}, turns stored {form}")
            report["results"].setdefault(model, {})[form] = measure(
                open_service, root / f"conversations-{store_name(model)}-{form}", embedding_options(model), form,
                per_tenant, conversations, progress)
    return report


def summary(report: dict[str, Any], split: str = "test", category: str = "facts") -> str:
    """One Markdown table of one split of one category: a row per (source, storage, leg), R@k across."""
    out = ["| embeddings | turns stored | leg | " + " | ".join(f"R@{k}" for k in KS) + " |",
           "|---|---|---|" + "---|" * len(KS)]
    names = {"keyword": "BM25 alone", "cosine": "plain cosine", "rrf": "naive RRF",
             "hybrid-plain": "memroute hybrid, question's words only", "hybrid": "**memroute hybrid**"}
    for model, by_form in report["results"].items():
        for form, result in by_form.items():
            for leg in LEGS:
                cell = (result if category == "facts" else result["categories"][category])[split][leg]
                out.append(f"| {model} | {form} | {names[leg]} | "
                           + " | ".join(f"{cell[f'R@{k}']:.3f}" for k in KS) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    """``python -m memroute.bench.conversations``: the conversation set alone (``memroute bench --quality`` runs
    it after the facts set), its vectors read through the benchmarks' disk cache."""
    import argparse
    import json
    import sys
    import tempfile

    from memroute.bench.embedding_cache import DEFAULT_CACHE_DIR, VectorCache, bench_opener

    parser = argparse.ArgumentParser(prog="python -m memroute.bench.conversations", description=__doc__)
    parser.add_argument("--models", default="static,transformers")
    parser.add_argument("--turns", type=int, default=2000, help="real chat turns per tenant")
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR),
                        help="where embedded texts are kept between runs ('' for no cache)")
    parser.add_argument("--output", default=None, help="also write the JSON report here")
    args = parser.parse_args(argv)
    cache = VectorCache(args.cache_dir) if args.cache_dir else None
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    with tempfile.TemporaryDirectory(prefix="memroute-conversations-") as tmp:
        report = run_conversations(bench_opener(cache, {}, backends={
            "primary": "main", "fallbacks": [], "instances": {"main": {"type": "sqlite", "options": {}}}}),
            models=models, per_tenant=args.turns, root=Path(tmp),
            progress=lambda message: print(f"... {message}", file=sys.stderr, flush=True))
    if cache is not None:
        report["embedding_cache"] = {"hits": cache.hits, "misses": cache.misses}
    for split in ("test", "dev"):
        print(f"\nConversations, facts questions, {split} split\n" + summary(report, split))
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
