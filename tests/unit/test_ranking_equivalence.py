"""Cheaper ranking and reads, same results: the score-only sort (:func:`memroute.retrieval.ordering.order_scored`),
the one-entry-per-memory score fusion and the manager's read scope against the implementations they replaced,
on random inputs full of ties and end to end (the bench's synthetic memories on the embedded default, with
updates, deletes and access counts moving between searches), hit for hit, score for score, rank for rank."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import memroute
from memroute.bench.engine import synthetic_contents
from memroute.models import Memory, SearchHit, SearchQuery, require_id, require_ids, utcnow
from memroute.retrieval import engine as engine_module
from memroute.retrieval import fusion
from memroute.retrieval.ordering import order_key, order_pairs


def reference_order_pairs(pairs: Any) -> list[tuple[Memory, float]]:
    """``order_pairs`` before the score-only sort."""
    return sorted(pairs, key=lambda pair: order_key(pair[1], pair[0]))


def reference_fuse_scores(keyword: Sequence[tuple[Memory, float]], vector: Sequence[tuple[Memory, float]], *,
                          keyword_weight: float = fusion.DEFAULT_KEYWORD_WEIGHT,
                          stand_out: float = fusion.KEYWORD_STAND_OUT,
                          cap: float = fusion.KEYWORD_CAP) -> list[SearchHit]:
    """``fuse_scores`` before the one-entry-per-memory rewrite, verbatim."""
    scores: dict[str, float] = {}
    memories: dict[str, Memory] = {}
    ranks: dict[str, dict[str, int]] = {}
    leg_scores: dict[str, dict[str, float]] = {}
    floor = 0.0
    if vector:
        cosines = [score for _, score in vector]
        median = statistics.median(cosines)
        spread = max(max(cosines) - median, 1e-6)
        for rank, (memory, score) in enumerate(vector, start=1):
            scores[memory.id] = (score - median) / spread
            memories[memory.id] = memory
            ranks[memory.id] = {"vector": rank}
            leg_scores[memory.id] = {"vector": float(score)}
        floor = min(scores.values())
    if keyword:
        reference = statistics.median(score for _, score in keyword)
        for rank, (memory, score) in enumerate(keyword, start=1):
            strength = min(cap, max(0.0, (score / reference - 1.0) / stand_out)) if reference > 0 else 0.0
            if memory.id not in scores and strength <= 0.0:
                continue
            scores[memory.id] = scores.get(memory.id, floor) + keyword_weight * strength
            memories[memory.id] = memory
            ranks.setdefault(memory.id, {})["keyword"] = rank
            leg_scores.setdefault(memory.id, {})["keyword"] = float(score)
    ordered = sorted(scores, key=lambda mid: order_key(scores[mid], memories[mid]))
    hits = []
    for mid in ordered:
        legs = ranks[mid]
        tier = "hybrid" if len(legs) == 2 else next(iter(legs))
        hits.append(SearchHit(memory=memories[mid], score=scores[mid], tier=tier, ranks=legs,
                              leg_scores=leg_scores[mid]))
    return hits


def exact(hits: Sequence[SearchHit]) -> list[tuple[Any, ...]]:
    """Everything a hit says, floats by their repr (so -0.0, NaN and the last bit all count)."""
    return [(id(h.memory), h.memory.id, repr(h.score), h.tier, list(h.ranks.items()),
             [(leg, repr(value)) for leg, value in h.leg_scores.items()]) for h in hits]


def memories(rng: random.Random, count: int) -> list[Memory]:
    base = utcnow()
    return [Memory(id=f"m{rng.randrange(10_000):05d}-{index}", api_key_id="t", key=f"k{index}", content="x",
                   created_at=base - timedelta(seconds=rng.choice((0, 1, 2))),
                   updated_at=base) for index in range(count)]


def scores(rng: random.Random, count: int) -> list[float]:
    # Few distinct values, so ties (and -0.0 against 0.0) are common; now and then no tie at all.
    if rng.random() < 0.3:
        return [rng.random() for _ in range(count)]
    return [rng.choice((0.5, 0.25, 0.0, -0.0, 1.0, 0.75)) for _ in range(count)]


@pytest.mark.parametrize("seed", range(200))
def test_order_pairs_is_the_full_key_sort(seed: int) -> None:
    rng = random.Random(seed)
    pool = memories(rng, rng.randrange(0, 40))
    pairs = list(zip(pool, scores(rng, len(pool)), strict=True))
    if pairs and seed % 5 == 0:
        pairs.append(pairs[0])  # a duplicate
    if pairs and seed % 7 == 0:
        pairs[rng.randrange(len(pairs))] = (pool[0], math.nan)
    rng.shuffle(pairs)
    got = order_pairs(iter(pairs))  # an iterator, as the engine used to pass
    want = reference_order_pairs(pairs)
    assert [(id(m), repr(s)) for m, s in got] == [(id(m), repr(s)) for m, s in want]
    assert [(id(m), repr(s)) for m, s in order_pairs(pairs)] == [(id(m), repr(s)) for m, s in want]


@pytest.mark.parametrize("seed", range(300))
def test_fuse_scores_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    pool = memories(rng, 60)
    vector = [(m, s) for m, s in zip(rng.sample(pool, rng.randrange(0, 40)), scores(rng, 40), strict=False)]
    keyword_pool = rng.sample(pool, rng.randrange(0, 40))
    keyword = [(m, abs(s) * 10) for m, s in zip(keyword_pool, scores(rng, 40), strict=False)]
    if keyword and seed % 4 == 0:  # another object for the same memory (the keyword leg's copy wins)
        twin = keyword[0][0]
        keyword[0] = (Memory.trusted(**{f: getattr(twin, f) for f in (
            "id", "api_key_id", "session_id", "type", "key", "content", "metadata", "created_at", "updated_at",
            "expires_at")}), keyword[0][1])
    if vector and seed % 9 == 0:
        vector.append(vector[0])  # a duplicate candidate
    weight = rng.choice((0.5, 1.0, 2.0))
    assert exact(fusion.fuse_scores(keyword, vector, keyword_weight=weight)) == exact(
        reference_fuse_scores(keyword, vector, keyword_weight=weight))


def dump(result: Any) -> list[Any]:
    return [[(h.memory.id, repr(h.score), h.tier, sorted(h.ranks.items()),
              sorted((k, repr(v)) for k, v in h.leg_scores.items()), h.memory.access_count) for h in result.hits],
            result.provenance]


def test_searches_return_what_the_replaced_ranking_returned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many budgeted and plain searches on the bench's data, with writes between them: the engine as it is and
    the engine with the replaced functions put back return the same, field for field."""
    questions = ["what does the user think about the billing service?", "marathon training plan", "coffee",
                 "which language for the dashboard", "trip to Lisbon", "database migration decision", "note 17",
                 "code review habits", "how is the data pipeline going", "team offsite plans", "python tests"]
    with memroute.open({}, data_dir=str(tmp_path), embedding={"source": "static"}) as mem:
        for index, content in enumerate(synthetic_contents(300)):
            mem.add(api_key_id="t", content=content, key=f"note:{index}")
        for index, content in enumerate(list(synthetic_contents(12, seed=5))):  # twins: equal scores in both legs
            for twin in "ab":
                mem.add(api_key_id="t", content=content.split(" (note")[0], key=f"twin:{twin}{index}")
        mem.add(api_key_id="other", content="User loves the billing service marathon", key="foreign")
        assert mem.flush(timeout=60)
        engine = mem._engine
        rng = random.Random(3)
        compared = 0
        for number in range(90):
            question = questions[number % len(questions)] + (f" ({number})" if number % 2 else "")
            for max_tokens, limit, strategy in ((1000, 100, "hybrid"), (400, 100, "hybrid"), (None, 20, "hybrid"),
                                                (None, 10, "semantic"), (1500, 100, "hybrid")):
                query = SearchQuery(api_key_id="t", text=question, strategy=strategy, limit=limit)
                deeper = dict(engine._deeper)
                new = dump(engine.search(query, max_tokens=max_tokens))
                engine._deeper.clear()
                engine._deeper.update(deeper)
                with monkeypatch.context() as patched:
                    patched.setattr(engine_module, "order_pairs", reference_order_pairs)
                    patched.setattr(engine_module, "fuse_scores", reference_fuse_scores)
                    patched.setattr(mem._manager, "read_scope", _no_scope)
                    old = dump(engine.search(query, max_tokens=max_tokens))
                assert new == old, (question, max_tokens, limit, strategy)
                assert all(hit[0] != mem.get_by_key("foreign", api_key_id="other").id for hit in new[0])
                compared += 1
            target = mem.get_by_key(f"note:{rng.randrange(300)}", api_key_id="t")
            if target is not None and number % 4 == 1:
                mem.update(target.id, api_key_id="t", content=target.content + " billing marathon")
            elif target is not None and number % 4 == 2:
                mem.delete(target.id, api_key_id="t")
            elif target is not None and number % 4 == 3:
                mem.update(target.id, api_key_id="t", metadata={"n": number})
                mem.record_access([target.id], api_key_id="t")
            mem.flush(timeout=60)
        assert compared == 450


class _no_scope:  # stands in for MemoryManager.read_scope
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_read_scope_checks_the_outbox_once_per_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within a search the primary is found in sync once (not at every read); the next search checks again, so
    entries another process journaled meanwhile are seen at once."""
    with memroute.open({}, data_dir=str(tmp_path), embedding={"source": "static"},
                       memory={"enabled": True, "max_tokens": 1000}) as mem:
        for index, content in enumerate(synthetic_contents(40)):
            mem.add(api_key_id="t", content=content, key=f"note:{index}")
        assert mem.flush(timeout=60)
        manager = mem._manager
        checks: list[str] = []
        pending = manager.outbox.pending
        monkeypatch.setattr(manager.outbox, "pending", lambda name: checks.append(name) or pending(name))
        body = {"messages": [{"role": "user", "content": "what does the user think about the billing service?"}]}
        assert mem.explain_augment(body, api_key_id="t", preview=False, record_access=False).count
        assert checks == [manager.primary.name]  # data version, keyword leg, vector candidates' memories: one check
        checks.clear()
        mem.search("marathon training plan", api_key_id="t", record_access=False)
        assert checks == [manager.primary.name]
        checks.clear()
        manager.get_many(["no-such-id"], api_key_id="t")
        manager.get_many(["no-such-id"], api_key_id="t")
        assert checks == [manager.primary.name] * 2  # outside a scope: every read checks
        # Behind (another process's entries for it): checked at every read, so catching up is seen at once.
        monkeypatch.setattr(manager.outbox, "pending", lambda name: checks.append(name) or 1)
        checks.clear()
        with manager.read_scope():
            manager.get_many(["no-such-id"], api_key_id="t")
            manager.get_many(["no-such-id"], api_key_id="t")
        assert checks == [manager.primary.name] * 2


class _Text(str):
    pass


@pytest.mark.parametrize("values", [
    [], ["a", "b"], ["a", ""], ["a", "x\x00y"], ["a", " \t"], ["a", " a "], ["é", "a"], ["a" * 256], ["a" * 257],
    ["a", 3], [None], ["a", "\ud800"], [_Text("a")], ["a", b"b"], ["\u3000"], ["a b", "c"],
])
def test_require_ids_accepts_and_refuses_what_require_id_does(values: list[Any]) -> None:
    def outcome(check: Any) -> tuple[str, str] | None:
        try:
            check()
        except Exception as exc:
            return type(exc).__name__, str(exc)
        return None

    def one_by_one() -> None:
        for value in values:
            require_id(value)

    assert outcome(lambda: require_ids(values)) == outcome(one_by_one)
