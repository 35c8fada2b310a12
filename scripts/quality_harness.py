"""A numpy harness for tuning retrieval on the quality benchmark's dev split (not shipped, not a test).

``python scripts/quality_harness.py build static`` embeds every memory and question once (through the
configured embedding source, as the indexer does) and records the keyword leg's real candidates (the
engine's own keyword leg over the real SQLite backend) into ``/tmp/memroute-qh``; ``evaluate`` then ranks
with numpy exactly as the sqlite-vec store's matrix tier does and fuses with the engine's own fusion, so an
idea can be tried on dev in a second. The service's numbers (``memroute bench --quality``) are the ones
reported; this reproduces them to the question.
"""

from __future__ import annotations

import json
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import memroute
from memroute.bench.quality import _memories, chat_distractors, queries
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, SearchQuery, new_memory_id, utcnow
from memroute.retrieval.fusion import keyword_query

CACHE = Path("/tmp/memroute-qh")
KEYWORD_DEPTH = 50


def _held_out(count: int) -> tuple[list[Memory], list[dict[str, Any]]]:
    distractors = chat_distractors(2000) if count else {}
    chosen = {t: d[:count] for t, d in distractors.items()}
    memories = list(_memories(chosen))
    qs = [{"tenant": q.tenant, "text": q.text, "kind": q.kind, "answer": q.answer_key, "split": q.split}
          for q in queries()]
    return memories, qs


def _synthetic() -> tuple[list[Memory], list[dict[str, Any]]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "bench"))
    import retrieval_dataset as dataset

    now = utcnow()
    memories = []
    for tenant in dataset.TENANTS:
        rows = [(f.key, f.content) for f in dataset.facts() if f.tenant == tenant]
        rows += list(dataset.distractors(tenant))
        memories += [Memory(id=new_memory_id(), api_key_id=tenant, key=k, content=c, created_at=now, updated_at=now)
                     for k, c in rows]
    qs = [{"tenant": q.tenant, "text": q.text, "kind": q.kind, "answer": q.answer_key, "split": "synthetic"}
          for q in dataset.queries()]
    return memories, qs


def build(model: str, name: str) -> None:
    memories, qs = _synthetic() if name == "synthetic" else _held_out(int(name))
    with tempfile.TemporaryDirectory() as tmp, memroute.open({}, data_dir=tmp, embedding={"source": "none"}) as mem:
        mem.import_jsonl([json.dumps(memory_to_dict(m)) for m in memories])
        engine = mem._retrieval
        for q in qs:
            query = SearchQuery(api_key_id=q["tenant"], text=q["text"], strategy="hybrid", limit=10)
            _, hits = engine._keyword_leg(query, KEYWORD_DEPTH)
            q["keyword"] = [(m.id, s) for m, s in hits]
    with tempfile.TemporaryDirectory() as tmp, memroute.open({}, data_dir=tmp, embedding={"source": model}) as mem:
        embedder = mem._retrieval.embedder
        vectors = embedder.embed_batch([m.content for m in memories])
        texts = [q["text"] for q in qs]
        plain = embedder.embed_batch(texts)
        refined = embedder.embed_batch([keyword_query(t) for t in texts]) if embedder.query_content_words else plain
    for q, p, r in zip(qs, plain, refined, strict=True):
        q["plain"], q["refined"] = p, r
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / f"{model}-{name}.pkl", "wb") as f:
        pickle.dump({"memories": memories, "vectors": vectors, "queries": qs}, f)


def load(model: str, name: str) -> dict[str, Any]:
    with open(CACHE / f"{model}-{name}.pkl", "rb") as f:
        return pickle.load(f)


def grid(model: str, penalty: float, promote_at: int = 512) -> None:
    """Hybrid R@5 hits per split for each (keyword weight, stand-out, cap), with the hub penalty as the
    sqlite-vec store applies it (large tier only), and how many cells of each split have hybrid below a leg.
    The shipped values were chosen by: no dev or synthetic cell below a leg, then the most dev hits, then the
    highest dev MRR. Needs ``build MODEL 0 2000 synthetic`` first."""
    import itertools

    from memroute.retrieval.fusion import fuse_scores
    from memroute_builtins.vectors.hubness import hub_shrink

    prepared = {}
    for name in ("0", "2000", "synthetic"):
        data = load(model, name)
        by_tenant = tenants(data)
        by_id = {m.id: m for m in data["memories"]}
        terms = {t: hub_term(vs) * hub_shrink(len(vs)) if len(vs) > promote_at else 0.0
                 for t, (_, vs) in by_tenant.items()}
        items = []
        for q in data["queries"]:
            memories, vectors = by_tenant[q["tenant"]]
            scores = vector_scores(vectors, q["refined"]) - penalty * terms[q["tenant"]]
            order = np.argsort(-scores, kind="stable")[:KEYWORD_DEPTH]
            items.append((q, [(memories[i], float(scores[i])) for i in order],
                          [(by_id[i], s) for i, s in q["keyword"]]))
        prepared[name] = items
    for weight, stand_out, cap in itertools.product((0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0), (1.0, 1.5, 2.0, 3.0),
                                                    (0.5, 1.0, 2.0, 3.0)):
        cells: dict[tuple[str, str, str, str], list[float]] = {}
        for name, items in prepared.items():
            for q, vpairs, kpairs in items:
                fused = [h.memory.key for h in fuse_scores(kpairs, vpairs, keyword_weight=weight, stand_out=stand_out,
                                                           cap=cap)[:10]]
                for leg, keys in (("hybrid", fused), ("vector", [m.key for m, _ in vpairs[:10]]),
                                  ("keyword", [m.key for m, _ in kpairs[:10]])):
                    rank = keys.index(q["answer"]) + 1 if q["answer"] in keys else None
                    acc = cells.setdefault((name, q["split"], q["kind"], leg), [0, 0.0])
                    acc[0] += rank is not None and rank <= 5
                    acc[1] += 1 / rank if rank else 0.0
        line = [f"w={weight} stand_out={stand_out} cap={cap}"]
        for split in ("dev", "test", "synthetic"):
            keys = [c for c in cells if c[1] == split and c[3] == "hybrid"]
            below = sum(cells[c][0] < max(cells[(*c[:3], "vector")][0], cells[(*c[:3], "keyword")][0]) for c in keys)
            line.append(f"{split}: below a leg {below}, hits {sum(cells[c][0] for c in keys)}, "
                        f"MRR sum {sum(cells[c][1] for c in keys):.1f}")
        print(" | ".join(line), flush=True)


# --- evaluation ---------------------------------------------------------------------------------------

def tenants(data: dict[str, Any]) -> dict[str, tuple[list[Memory], np.ndarray]]:
    out: dict[str, tuple[list[Memory], list[int]]] = {}
    for i, m in enumerate(data["memories"]):
        out.setdefault(m.api_key_id, ([], []))
        out[m.api_key_id][0].append(m)
        out[m.api_key_id][1].append(i)
    return {t: (ms, data["vectors"][idx]) for t, (ms, idx) in out.items()}


def center(vectors: np.ndarray, prior: int = 10) -> np.ndarray:
    n = vectors.shape[0]
    return vectors.mean(axis=0) * (n / (n + prior))


def vector_scores(vectors: np.ndarray, q: np.ndarray, *, centre: bool = True, over: float = 1.0) -> np.ndarray:
    if centre:
        p = q - over * center(vectors)
        q = p / np.linalg.norm(p)
    return vectors @ q


def hub_term(vectors: np.ndarray, k: int = 10, centre: bool = True, sample: int | None = None) -> np.ndarray:
    """Each memory's mean cosine to its k nearest other memories (with centre: the centred vectors)."""
    v = vectors
    if centre:
        v = vectors - center(vectors)
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
    ref = v if sample is None or sample >= len(v) else v[np.random.RandomState(0).choice(len(v), sample, False)]
    sims = v @ ref.T
    if ref is v:
        np.fill_diagonal(sims, -np.inf)
    kk = min(k, sims.shape[1] - 1)
    if kk <= 0:
        return np.zeros(len(v))
    top = np.partition(sims, sims.shape[1] - kk, axis=1)[:, sims.shape[1] - kk:]
    return top.mean(axis=1)


def evaluate(data: dict[str, Any], *, fuse: Any, vector: Any, legs: tuple[str, ...] = ("vector", "hybrid"),
             depth: int = 50) -> dict[tuple[str, str, str], list[float]]:
    """``{(split, kind, leg): [R@1, R@5, MRR, n]}``. ``vector(tenant, vectors, q) -> scores``;
    ``fuse(keyword_pairs, vector_pairs) -> hits``."""
    by_tenant = tenants(data)
    by_id = {m.id: m for m in data["memories"]}
    prepared = {t: vector.prepare(t, vs) if hasattr(vector, "prepare") else None for t, (_, vs) in by_tenant.items()}
    sums: dict[tuple[str, str, str], list[float]] = {}
    for q in data["queries"]:
        memories, vectors = by_tenant[q["tenant"]]
        scores = vector(prepared[q["tenant"]], vectors, q)
        order = np.argsort(-scores, kind="stable")[:depth]
        vpairs = [(memories[i], float(scores[i])) for i in order]
        kpairs = [(by_id[mid], s) for mid, s in q["keyword"]]
        ranked = {}
        if "vector" in legs:
            ranked["vector"] = [m.key for m, _ in vpairs[:10]]
        if "hybrid" in legs:
            ranked["hybrid"] = [h.memory.key for h in fuse(kpairs, vpairs)[:10]]
        if "keyword" in legs:
            ranked["keyword"] = [m.key for m, _ in kpairs[:10]]
        for leg, keys in ranked.items():
            rank = keys.index(q["answer"]) + 1 if q["answer"] in keys else None
            for split in (q["split"], "all"):
                for kind in (q["kind"], "all"):
                    acc = sums.setdefault((split, kind, leg), [0.0, 0.0, 0.0, 0])
                    acc[3] += 1
                    if rank is not None:
                        acc[0] += rank == 1
                        acc[1] += rank <= 5
                        acc[2] += 1 / rank
    return sums


def r5(sums: dict[tuple[str, str, str], list[float]], split: str, kind: str, leg: str) -> float:
    acc = sums[(split, kind, leg)]
    return acc[1] / acc[3]


if __name__ == "__main__":  # build MODEL 0 2000 synthetic | grid MODEL PENALTY
    command, model, *names = sys.argv[1:]
    if command == "build":
        for n in names:
            build(model, n)
            print("built", model, n, flush=True)
    elif command == "grid":
        grid(model, float(names[0]))
