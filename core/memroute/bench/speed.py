"""``memroute bench --naive``: memroute against a naive recipe on the workloads a memory system has, each side by
side in one run, reported as ratios.

**The naive recipe** is what one would write in an afternoon: one SQLite table of one tenant's memories with
an FTS5 index, an OR query of the question's words ranked by bm25 (top 30), a numpy matrix of the same
embeddings and a cosine top 30, Reciprocal Rank Fusion (k = 60), then the 10 best rows read back. An add
embeds the text, inserts the row and its FTS5 entry, and appends the vector to the matrix (grown by doubling).
It has no tenants, no expiry / retention / session filters, no degradation, no provenance, no history and no
durable index: the baseline any real engine should not be much slower than. **numpy brute force** is the vector
half alone (embed the question, one matrix product, top 30). The baselines embed each question without a cache.

The workloads, for each size (one tenant of real chat turns):

- **indexing**: a bulk import of the turns (``import_jsonl`` + ``flush``) against the embedding source's own
  ``embed_batch`` on the same turns;
- **first searches**: the first ``first`` questions right after that import, before any warm-up, interleaved
  with the naive recipe's first questions on its freshly built index (what a user meets after importing);
- **warm searches**: the questions again after a warm-up, interleaved with the naive recipe and numpy brute
  force (memroute's ``semantic`` timing runs after its ``hybrid`` one, so it finds the query vector cached);
- **chat loop**: ``turns`` turns of a conversation on top of the stored ones. Each turn stores the previous
  message and retrieves for the new one: memroute's ``observe`` (``wait=True``) then ``augment`` (the
  product path: the memory gate, the kept message, its history, the injected block; ``[memory] enabled`` must be
  on), memroute's ``add`` then
  ``search`` (the same work as the recipe's), and the recipe's add then search, interleaved per turn.

Then **where the time goes**: the same calls again under :mod:`cProfile` (after the timings, so the profiler
never slows a timed call), the functions with the most own time for each memroute workload.

The memories are real chat turns (the ``chitchat-dataset`` package, ``pip install 'memroute[bench]'``), the
questions the 246 of the quality benchmark (:mod:`memroute.bench.facts`).
"""

from __future__ import annotations

import cProfile
import json
import pstats
import random
import re
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memroute.bench.quality import chat_distractors, queries
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, utcnow

__all__ = ["NaiveRecipe", "chat_turns", "run_naive_comparison"]

_TENANT = "bench"
_REPLY = "Sounds good, tell me more."


def chat_turns(count: int) -> list[str]:
    """``count`` distinct real chat turns (deterministic)."""
    return chat_distractors(count, tenants=[_TENANT], seed=29)[_TENANT]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _p50_p95(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": _ms(statistics.median(ordered)),
            "p95_ms": _ms(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))])}


class NaiveRecipe:
    """FTS5 OR query + numpy cosine + RRF over one tenant's memories (see the module docstring)."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray, embed: Callable[[str], np.ndarray]) -> None:
        import apsw

        self.embed = embed
        self.n = len(texts)
        self._matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        self.db = apsw.Connection(":memory:")
        self.db.execute("CREATE TABLE memories(id INTEGER PRIMARY KEY, content TEXT NOT NULL)")
        self.db.execute("CREATE VIRTUAL TABLE fts USING fts5(content, content='memories', content_rowid='id')")
        with self.db:
            self.db.executemany("INSERT INTO memories(id, content) VALUES (?, ?)", enumerate(texts))
            self.db.execute("INSERT INTO fts(fts) VALUES ('rebuild')")

    @property
    def matrix(self) -> np.ndarray:
        return self._matrix[:self.n]

    def add(self, text: str) -> None:
        """Store one memory: the row, its FTS5 entry and its vector (the matrix grows by doubling)."""
        vector = self.embed(text)
        with self.db:
            self.db.execute("INSERT INTO memories(id, content) VALUES (?, ?)", (self.n, text))
            self.db.execute("INSERT INTO fts(rowid, content) VALUES (?, ?)", (self.n, text))
        if self.n == self._matrix.shape[0]:
            grown = np.empty((max(64, 2 * self.n), self._matrix.shape[1]), dtype=np.float32)
            grown[:self.n] = self._matrix[:self.n]
            self._matrix = grown
        self._matrix[self.n] = vector
        self.n += 1

    @staticmethod
    def match(text: str) -> str:
        words = dict.fromkeys(w.casefold() for w in re.findall(r"\w+", text))
        return " OR ".join(f'"{w}"' for w in words)

    def vector_top(self, text: str, k: int = 30) -> list[int]:
        scores = self.matrix @ self.embed(text)
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        return [int(i) for i in top[np.argsort(-scores[top])]]

    def search(self, text: str, limit: int = 10, k: int = 30, rrf_k: int = 60) -> list[str]:
        fused: dict[int, float] = {}
        for rank, row in enumerate(self.vector_top(text, k), start=1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (rrf_k + rank)
        match = self.match(text)
        if match:
            rows = self.db.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?", (match, k))
            for rank, (row,) in enumerate(rows, start=1):
                fused[row] = fused.get(row, 0.0) + 1.0 / (rrf_k + rank)
        best = sorted(fused, key=lambda row: (-fused[row], row))[:limit]
        marks = ",".join("?" * len(best))
        return [r[0] for r in self.db.execute(f"SELECT content FROM memories WHERE id IN ({marks})", best)]


def _interleaved(items: Iterable[Any], contenders: Sequence[tuple[str, Callable[[Any], Any]]]
                 ) -> dict[str, list[float]]:
    """Each item through every contender in turn (so load on the machine hits them alike): seconds per call."""
    timings: dict[str, list[float]] = {name: [] for name, _ in contenders}
    for item in items:
        for name, call in contenders:
            began = time.perf_counter()
            call(item)
            timings[name].append(time.perf_counter() - began)
    return timings


def _top_costs(call: Callable[[Any], Any], items: Sequence[Any], top: int = 8) -> list[dict[str, Any]]:
    """``call`` on each of ``items`` under cProfile: the ``top`` functions by own time, in ms per call, with
    their share of the whole."""
    profiler = cProfile.Profile()
    profiler.enable()
    for item in items:
        call(item)
    profiler.disable()
    count = max(1, len(items))
    stats = pstats.Stats(profiler)
    own: dict[str, float] = {}
    for (path, line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line}({name})" if path != "~" else name
        own[where] = own.get(where, 0.0) + row[2]
    total = sum(own.values()) or 1.0
    return [{"function": where, "ms_per_call": _ms(seconds / count), "share": round(seconds / total, 3)}
            for where, seconds in sorted(own.items(), key=lambda item: -item[1])[:top]]


def _request(text: str) -> dict[str, Any]:
    return {"model": "bench", "messages": [{"role": "user", "content": text}]}


def _chat_loop(mem: Any, naive: NaiveRecipe, turns: Sequence[str], profile: bool) -> dict[str, Any]:
    """The chat loop (see the module docstring): each turn stores the previous message, then retrieves for the
    new one. ``turns`` is split three ways so no contender stores a text another already stored."""
    if not mem.memory_settings().enabled:
        raise ValueError("the chat loop needs [memory] enabled = true (observe and augment do nothing without it)")
    third = len(turns) // 3
    product, plain, recipe = turns[:third], turns[third:2 * third], turns[2 * third:3 * third]
    injected: list[int] = []

    def observe_augment(i: int) -> None:
        mem.observe(_request(product[i - 1]), {"choices": [{"message": {"role": "assistant", "content": _REPLY}}]},
                    api_key_id=_TENANT, wait=True)
        injected.append(mem.explain_augment(_request(product[i]), api_key_id=_TENANT, preview=False).count)

    def add_search(i: int) -> None:
        mem.add(api_key_id=_TENANT, content=plain[i - 1])
        mem.search(plain[i], api_key_id=_TENANT, strategy="hybrid", limit=10)

    def naive_turn(i: int) -> None:
        naive.add(recipe[i - 1])
        naive.search(recipe[i])

    warm = min(5, third // 4)
    _interleaved(range(1, 1 + warm), [("a", observe_augment), ("b", add_search), ("c", naive_turn)])
    measured = range(1 + warm, third - (warm if profile else 0))
    timings = _interleaved(measured, [("observe_augment", observe_augment), ("add_search", add_search),
                                      ("naive", naive_turn)])
    report: dict[str, Any] = {"turns": len(measured), **{name: _p50_p95(samples) for name, samples in timings.items()},
                              "memories_injected_per_turn": statistics.median(injected)}
    for name in ("observe_augment", "add_search"):
        report[f"{name}_vs_naive_p50"] = round(report[name]["p50_ms"] / report["naive"]["p50_ms"], 2)
    if profile:
        tail = range(third - warm, third)
        report["where_the_time_goes"] = {
            "observe_augment": _top_costs(observe_augment, tail),
            "add_search": _top_costs(add_search, tail),
        }
    return report


def run_naive_comparison(
    open_service: Callable[[Path], Any],
    embedder_for: Callable[[Any], Any],
    *,
    sizes: Sequence[int] = (10_000, 100_000),
    query_count: int = 60,
    first: int = 10,
    turns: int = 60,
    profile: bool = True,
    root: Path,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """For each size, the workloads of the module docstring, each against its baseline in the same run.

    ``indexing`` is measured end to end (the import, which stores the rows and their keyword index in one
    transaction, plus the flush) and as the vector stage alone (``vector_stage``: from the import's commit until
    ``flush`` returns, i.e. reading the flagged rows, embedding, writing vectors and clearing the flags).
    ``embedder_for(service)`` returns the embedding source the service indexes with (for the baselines)."""
    rng = random.Random(11)
    texts = [q.text for q in queries()]
    rng.shuffle(texts)
    texts = texts[:query_count]
    if first > len(texts):
        raise ValueError(f"first ({first}) exceeds the questions ({len(texts)})")
    report: dict[str, Any] = {"queries": len(texts), "first_searches": first, "results": {}}
    loop_turns = 3 * turns
    turns_all = chat_turns(max(sizes) + loop_turns)
    conversation, turns_all = turns_all[-loop_turns:], turns_all[:-loop_turns]
    for size in sizes:
        stored = turns_all[:size]
        progress(f"{size} chat-turn memories for one tenant")
        now = utcnow()
        lines = [json.dumps(memory_to_dict(Memory(
            id=str(uuid.UUID(int=i + 1)), api_key_id=_TENANT, key=f"chat:{i}", content=text,
            created_at=now, updated_at=now))) for i, text in enumerate(stored)]
        with open_service(root / f"naive-{size}") as mem:
            embedder = embedder_for(mem)
            embedder.embed("warm up")
            started = time.perf_counter()
            vectors = np.vstack([embedder.embed_batch(stored[i:i + 256]) for i in range(0, len(stored), 256)])
            embed_rate = size / (time.perf_counter() - started)
            started = time.perf_counter()
            mem.import_jsonl(lines)
            imported = time.perf_counter()
            if not mem.flush(timeout=3600):
                raise RuntimeError("indexing did not finish")
            finished = time.perf_counter()
            index_rate = size / (finished - started)
            stage_rate = size / (finished - imported)
            # The baselines embed every question afresh (no cache); memroute's hybrid search runs first on each
            # question, so it too pays the embedding (its semantic search after it finds the vector cached).
            uncached = getattr(embedder, "inner", embedder)
            naive = NaiveRecipe(stored, vectors, uncached.embed_query)

            def hybrid(text: str) -> Any:
                return mem.search(text, api_key_id=_TENANT, strategy="hybrid", limit=10)

            def semantic(text: str) -> Any:
                return mem.search(text, api_key_id=_TENANT, strategy="semantic", limit=10)

            progress(f"{size}: first searches, warm searches")
            cold = _interleaved(texts[:first], [("hybrid", hybrid), ("naive", naive.search)])
            for text in texts[first:first + 5]:  # warm every path up
                hybrid(text)
                naive.search(text)
            timings = _interleaved(texts, [("hybrid", hybrid), ("semantic", semantic), ("naive", naive.search),
                                           ("brute_force", naive.vector_top)])
            warm = {name: _p50_p95(samples) for name, samples in timings.items()}
            first_searches = {name: {"first_ms": _ms(samples[0]), **_p50_p95(samples)}
                              for name, samples in cold.items()}
            progress(f"{size}: chat loop, {turns} turns")
            chat = _chat_loop(mem, naive, conversation, profile)
            where: dict[str, Any] = {}
            if profile:
                where["warm_hybrid"] = _top_costs(hybrid, texts[:20])
        result: dict[str, Any] = {
            "first_searches": first_searches,
            "first_searches_vs_naive_p50": round(first_searches["hybrid"]["p50_ms"]
                                                 / first_searches["naive"]["p50_ms"], 2),
            "first_search_vs_naive": round(first_searches["hybrid"]["first_ms"]
                                           / first_searches["naive"]["first_ms"], 2),
            "warm": warm,
            "hybrid_vs_naive": round(warm["hybrid"]["p50_ms"] / warm["naive"]["p50_ms"], 2),
            "hybrid_vs_naive_p95": round(warm["hybrid"]["p95_ms"] / warm["naive"]["p95_ms"], 2),
            "hybrid_vs_brute_force": round(warm["hybrid"]["p50_ms"] / warm["brute_force"]["p50_ms"], 2),
            "semantic_vs_brute_force": round(warm["semantic"]["p50_ms"] / warm["brute_force"]["p50_ms"], 2),
            "chat_loop": {key: value for key, value in chat.items() if key != "where_the_time_goes"},
            "embed_batch_per_s": round(embed_rate, 1),
            "indexing_per_s": round(index_rate, 1),
            "indexing_vs_embed_batch": round(index_rate / embed_rate, 2),
            "vector_stage_per_s": round(stage_rate, 1),
            "vector_stage_vs_embed_batch": round(stage_rate / embed_rate, 2),
        }
        if profile:
            result["where_the_time_goes"] = {**where, **chat["where_the_time_goes"]}
        report["results"][str(size)] = result
    return report
