"""``memroute bench --naive``: memroute's hybrid search against a naive recipe, and indexing against the
embedding source's own batch rate — each measured side by side in one run, reported as ratios.

**The naive recipe** is what one would write in an afternoon: one SQLite table of one tenant's memories with
an FTS5 index, an OR query of the question's words ranked by bm25 (top 30), a numpy matrix of the same
embeddings and a cosine top 30, Reciprocal Rank Fusion (k = 60), then the 10 best rows read back. It has no
tenants, no expiry / retention / session filters, no degradation, no provenance and no durable index: the
baseline any real engine should not be much slower than. **numpy brute force** is the vector half alone
(embed the question, one matrix product, top 30). The baselines embed each question without a cache;
memroute's hybrid search runs first on each question and pays the embedding too, so its ``semantic`` timing
(run next) is with the query vector cached.

The memories are real chat turns (the ``chitchat-dataset`` package, ``pip install 'memroute[bench]'``), the
questions the 246 of the quality benchmark (:mod:`memroute.bench.facts`).
"""

from __future__ import annotations

import json
import random
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memroute.bench.quality import chat_distractors, queries
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, utcnow

__all__ = ["NaiveRecipe", "chat_turns", "run_naive_comparison"]

_TENANT = "bench"


def chat_turns(count: int) -> list[str]:
    """``count`` distinct real chat turns (deterministic)."""
    return chat_distractors(count, tenants=[_TENANT], seed=29)[_TENANT]


def _median_ms(samples: Sequence[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


class NaiveRecipe:
    """FTS5 OR query + numpy cosine + RRF over one tenant's memories (see the module docstring)."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray, embed: Callable[[str], np.ndarray]) -> None:
        import apsw

        self.embed = embed
        self.matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        self.db = apsw.Connection(":memory:")
        self.db.execute("CREATE TABLE memories(id INTEGER PRIMARY KEY, content TEXT NOT NULL)")
        self.db.execute("CREATE VIRTUAL TABLE fts USING fts5(content, content='memories', content_rowid='id')")
        with self.db:
            self.db.executemany("INSERT INTO memories(id, content) VALUES (?, ?)", enumerate(texts))
            self.db.execute("INSERT INTO fts(fts) VALUES ('rebuild')")

    @staticmethod
    def match(text: str) -> str:
        import re

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


def run_naive_comparison(
    open_service: Callable[[Path], Any],
    embedder_for: Callable[[Any], Any],
    *,
    sizes: Sequence[int] = (10_000, 100_000),
    query_count: int = 60,
    root: Path,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """For each size: memroute hybrid p50 against the naive recipe and against numpy brute force, on the same
    memories and questions in one run; and indexing against ``embed_batch`` alone, twice: end to end
    (``indexing``: the import, which stores the rows and their keyword index in one transaction, plus the
    flush) and the vector stage alone (``vector_stage``: from the import's commit until ``flush`` returns,
    i.e. reading the flagged rows, embedding, writing vectors and clearing the flags).
    ``embedder_for(service)`` returns the embedding source the service indexes with (for the baselines)."""
    rng = random.Random(11)
    texts = [q.text for q in queries()]
    rng.shuffle(texts)
    texts = texts[:query_count]
    report: dict[str, Any] = {"queries": len(texts), "results": {}}
    turns_all = chat_turns(max(sizes))
    for size in sizes:
        turns = turns_all[:size]
        progress(f"{size} chat-turn memories for one tenant")
        now = utcnow()
        lines = [json.dumps(memory_to_dict(Memory(
            id=str(uuid.UUID(int=i + 1)), api_key_id=_TENANT, key=f"chat:{i}", content=text,
            created_at=now, updated_at=now))) for i, text in enumerate(turns)]
        with open_service(root / f"naive-{size}") as mem:
            embedder = embedder_for(mem)
            embedder.embed("warm up")
            started = time.perf_counter()
            vectors = np.vstack([embedder.embed_batch(turns[i:i + 256]) for i in range(0, len(turns), 256)])
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
            naive = NaiveRecipe(turns, vectors, uncached.embed_query)
            for text in texts[:5]:  # warm every path up
                mem.search(text, api_key_id=_TENANT, strategy="hybrid", limit=10)
                naive.search(text)
            timings: dict[str, list[float]] = {"hybrid": [], "naive": [], "brute_force": [], "semantic": []}
            for text in texts:  # interleaved, so load on the machine hits every contender alike
                for name, call in (
                    ("hybrid", lambda t: mem.search(t, api_key_id=_TENANT, strategy="hybrid", limit=10)),
                    ("semantic", lambda t: mem.search(t, api_key_id=_TENANT, strategy="semantic", limit=10)),
                    ("naive", naive.search),
                    ("brute_force", naive.vector_top),
                ):
                    began = time.perf_counter()
                    call(text)
                    timings[name].append(time.perf_counter() - began)
        p50 = {name: _median_ms(samples) for name, samples in timings.items()}
        report["results"][str(size)] = {
            "p50_ms": p50,
            "hybrid_vs_naive": round(p50["hybrid"] / p50["naive"], 2),
            "hybrid_vs_brute_force": round(p50["hybrid"] / p50["brute_force"], 2),
            "semantic_vs_brute_force": round(p50["semantic"] / p50["brute_force"], 2),
            "embed_batch_per_s": round(embed_rate, 1),
            "indexing_per_s": round(index_rate, 1),
            "indexing_vs_embed_batch": round(index_rate / embed_rate, 2),
            "vector_stage_per_s": round(stage_rate, 1),
            "vector_stage_vs_embed_batch": round(stage_rate / embed_rate, 2),
        }
    return report
