"""The retrieval-quality harness: loads the data set into a fresh memroute (the real SQLite backend, the
named embedding source, sqlite-vec), runs every query through each leg and reports R@1, R@5 and MRR@10 for
keyword, vector and hybrid, split by lexical and semantic queries."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval_dataset as dataset

import memroute
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, SearchQuery, new_memory_id, utcnow
from memroute.retrieval.fusion import keyword_query

LEGS = ("keyword", "vector", "hybrid")


def load(mem: memroute.service.Memroute) -> None:
    now = utcnow()
    lines = []
    for tenant in dataset.TENANTS:
        rows = [(f.key, f.content) for f in dataset.facts() if f.tenant == tenant]
        rows += list(dataset.distractors(tenant))
        for key, content in rows:
            memory = Memory(id=new_memory_id(), api_key_id=tenant, key=key, content=content, created_at=now,
                            updated_at=now)
            lines.append(json.dumps(memory_to_dict(memory)))
    mem.import_jsonl(lines)
    assert mem.flush(timeout=600), "indexing did not finish"


def ranked_keys(mem: memroute.service.Memroute, leg: str, query: dataset.Query) -> list[str]:
    if leg == "keyword":
        # The keyword leg on its own (an internal measurement: the public search fuses the legs).
        served = mem._manager.search(SearchQuery(api_key_id=query.tenant, text=keyword_query(query.text),
                                                 strategy="hybrid", limit=10))
        return [h.memory.key for h in served.hits]
    strategy = "semantic" if leg == "vector" else "hybrid"
    result = mem.search(query.text, api_key_id=query.tenant, strategy=strategy, limit=10)
    assert not result.provenance.degraded, result.provenance
    return [h.memory.key for h in result.hits]


def evaluate(mem: memroute.service.Memroute) -> dict[str, dict[str, dict[str, float]]]:
    """``{kind: {leg: {R@1, R@5, MRR}}}`` for kind in lexical, semantic, all."""
    sums: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: {"R@1": 0.0, "R@5": 0.0, "MRR": 0.0, "n": 0})
    for query in dataset.queries():
        for leg in LEGS:
            keys = ranked_keys(mem, leg, query)
            rank = keys.index(query.answer_key) + 1 if query.answer_key in keys else None
            for kind in (query.kind, "all"):
                acc = sums[(kind, leg)]
                acc["n"] += 1
                if rank is not None:
                    acc["R@1"] += rank == 1
                    acc["R@5"] += rank <= 5
                    acc["MRR"] += 1.0 / rank
    report: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (kind, leg), acc in sums.items():
        n = acc.pop("n")
        report[kind][leg] = {metric: round(value / n, 3) for metric, value in acc.items()}
    return dict(report)


def run(source: str, data_dir: Path, **embedding: Any) -> dict[str, Any]:
    with memroute.open({}, data_dir=str(data_dir), embedding={"source": source, **embedding},
                       vectors={"store": "sqlite-vec"}) as mem:
        load(mem)
        return evaluate(mem)


def table(report: dict[str, Any]) -> str:
    lines = ["| queries | leg | R@1 | R@5 | MRR@10 |", "|---|---|---|---|---|"]
    for kind in ("lexical", "semantic", "all"):
        for leg in LEGS:
            m = report[kind][leg]
            lines.append(f"| {kind} | {leg} | {m['R@1']:.3f} | {m['R@5']:.3f} | {m['MRR']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python tests/bench/quality.py static|transformers
    import tempfile

    for name in sys.argv[1:] or ["static"]:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(name, Path(tmp))
        print(f"## {name}\n\n{table(result)}\n")
