"""``memroute bench --quality``: retrieval quality on a production-like, held-out set.

Four tenants, 25 or 26 facts each as users state them (:mod:`memroute.bench.facts`), 246 questions (lexical,
paraphrased, and *task* openers a model would get at the start of a task), and real chat turns as
distractors: 2,000 per tenant by default, drawn (deterministically, disjoint between tenants) from the
``chitchat-dataset`` package (MIT; ``pip install 'memroute[bench]'``; never vendored). Each fact, with its
questions, falls in the ``dev`` or the ``test`` split (a hash of tenant and key): fusion is calibrated on dev
and the docs report test.

Everything runs through the public service on a fresh data directory: the ``vector`` leg is
``search(strategy="semantic")``, ``hybrid`` is ``search(strategy="hybrid")``, the ``keyword`` leg is the
same store opened with ``[embedding] source = "none"`` (hybrid then degrades, visibly, to the keyword leg), and
``cosine``, the plain-cosine baseline, is the semantic search of the same store opened with its ranking
refinements off (no centring, no hub penalty, the whole question embedded).
Every search passes a ``limit``, no budget and ``min_score=0`` (no relevance floor), so what is measured is
the plain ranking. R@k: the answer is
in the top k; MRR@10: mean reciprocal rank of the answer within the top 10.
"""

from __future__ import annotations

import json
import random
import time
import uuid
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs

from memroute.bench.facts import FACTS, TASKS
from memroute.config.serialization import memory_to_dict
from memroute.errors import ConfigError
from memroute.models import Memory, utcnow

__all__ = ["KINDS", "LEGS", "Query", "chat_distractors", "queries", "run_quality", "summary", "tables"]

LEGS = ("cosine", "keyword", "vector", "hybrid")
"""``cosine`` is the floor any system should reach: plain cosine over the same stored vectors, the whole
question embedded (the store opened with ``center = false`` and ``hub_penalty = 0``, the source with
``query_content_words = false`` where it has that option)."""
KINDS = ("lexical", "paraphrased", "task", "all")
_NAMESPACE = uuid.UUID("6f1c7d2e-3b9a-4c55-9a4e-2d8f0b7e1a11")


@attrs.frozen(kw_only=True)
class Query:
    tenant: str
    text: str
    kind: str
    answer_key: str
    split: str


def split_of(tenant: str, key: str) -> str:
    """``dev`` or ``test`` for a fact (its questions all fall on the same side): each tenant's facts, ordered
    by a hash of tenant and key, alternate between the two, so the halves are equal and fixed."""
    return _SPLITS[(tenant, key)]


def _splits() -> dict[tuple[str, str], str]:
    out = {}
    for tenant, facts in FACTS.items():
        ordered = sorted((zlib.crc32(f"{tenant}/{key}".encode()), key) for key, *_ in facts)
        out.update({(tenant, key): ("dev", "test")[i % 2] for i, (_, key) in enumerate(ordered)})
    return out


_SPLITS = _splits()


def queries() -> list[Query]:
    out = []
    for tenant, facts in FACTS.items():
        for key, _statement, lexical, paraphrased in facts:
            split = split_of(tenant, key)
            out.append(Query(tenant=tenant, text=lexical, kind="lexical", answer_key=key, split=split))
            out.append(Query(tenant=tenant, text=paraphrased, kind="paraphrased", answer_key=key, split=split))
        for text, key in TASKS[tenant]:
            out.append(Query(tenant=tenant, text=text, kind="task", answer_key=key, split=split_of(tenant, key)))
    return out


def chat_distractors(per_tenant: int, tenants: Iterable[str] = tuple(FACTS), seed: int = 13) -> dict[str, list[str]]:
    """``per_tenant`` distinct real chat turns for each tenant (disjoint between tenants, deterministic)."""
    try:
        import chitchat_dataset
    except ImportError:
        raise ConfigError("the quality benchmark needs the chitchat-dataset package: "
                          "pip install 'memroute[bench]'") from None
    names = list(tenants)
    seen: set[str] = set()
    turns = []
    for message in chitchat_dataset.MessageDataset():
        text = " ".join(message.split())
        if 20 <= len(text) <= 400 and text.casefold() not in seen:
            seen.add(text.casefold())
            turns.append(text)
    if per_tenant * len(names) > len(turns):
        raise ConfigError(f"only {len(turns)} usable chat turns; ask for fewer distractors per tenant")
    random.Random(seed).shuffle(turns)
    return {name: turns[i * per_tenant:(i + 1) * per_tenant] for i, name in enumerate(names)}


def _memories(distractors: dict[str, list[str]]) -> Iterator[Memory]:
    """Facts and distractors with deterministic ids and creation times spread over the last 20 days (so no
    recency tie-break favours either)."""
    now = utcnow()
    rng = random.Random(5)
    for tenant, facts in FACTS.items():
        rows = [(key, statement) for key, statement, _, _ in facts]
        rows += [(f"chat:{i}", turn) for i, turn in enumerate(distractors.get(tenant, ()))]
        for key, content in rows:
            moment = now - timedelta(seconds=rng.randrange(20 * 86_400))
            yield Memory(id=str(uuid.uuid5(_NAMESPACE, f"{tenant}/{key}")), api_key_id=tenant, key=key,
                         content=content, created_at=moment, updated_at=moment)


def _rank(keys: list[str], answer: str) -> int | None:
    return keys.index(answer) + 1 if answer in keys else None


def evaluate(search: Callable[[str, Query], list[str]], selected: list[Query]) -> dict[str, Any]:
    """``{split: {kind: {leg: {R@1, R@5, MRR, n}}}}`` for the legs ``search(leg, query)`` ranks."""
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for query in selected:
        for leg in LEGS:
            rank = _rank(search(leg, query), query.answer_key)
            for split in (query.split, "all"):
                for kind in (query.kind, "all"):
                    acc = sums[(split, kind, leg)]
                    acc[3] += 1
                    if rank is not None:
                        acc[0] += rank == 1
                        acc[1] += rank <= 5
                        acc[2] += 1.0 / rank
    report: dict[str, Any] = {}
    for (split, kind, leg), (r1, r5, mrr, n) in sorted(sums.items()):
        report.setdefault(split, {}).setdefault(kind, {})[leg] = {
            "R@1": round(r1 / n, 3), "R@5": round(r5 / n, 3), "MRR": round(mrr / n, 3), "n": int(n)}
    return report


PLAIN_OPTIONS: dict[str, dict[str, Any]] = {"static": {"query_content_words": False}}
"""Per embedding source, the options that turn its query refinements off (for the ``cosine`` baseline)."""
PLAIN_VECTORS: dict[str, Any] = {"center": False, "hub_penalty": 0.0}
"""The sqlite-vec options that turn its ranking refinements off (for the ``cosine`` baseline)."""


def load_store(mem: Any, memories: Iterable[Memory], *, timeout: float) -> tuple[int, float]:
    """Import ``memories`` into ``mem`` through its JSONL import and wait until every vector is written: how
    many, and the seconds it took (the benchmarks' load time)."""
    lines = [json.dumps(memory_to_dict(m)) for m in memories]
    started = time.perf_counter()
    mem.import_jsonl(lines)
    if not mem.flush(timeout=timeout):
        raise RuntimeError("indexing did not finish")
    return len(lines), time.perf_counter() - started


def measure(open_service: Callable[..., Any], data_dir: Path, embedding: dict[str, Any], per_tenant: int,
            distractors: dict[str, list[str]], progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Load one store (facts plus ``per_tenant`` distractors each) and evaluate every leg on every query."""
    chosen = {tenant: turns[:per_tenant] for tenant, turns in distractors.items()}
    selected = queries()
    with open_service(data_dir, embedding) as mem:
        count, loaded = load_store(mem, _memories(chosen), timeout=1800)
        progress(f"loaded {count} memories in {loaded:.1f} s")
        plain_embedding = {**embedding, **PLAIN_OPTIONS.get(str(embedding.get("source")), {})}
        with open_service(data_dir, {"source": "none"}) as keyword_only, \
                open_service(data_dir, plain_embedding, PLAIN_VECTORS) as plain:

            def search(leg: str, query: Query) -> list[str]:
                service = {"keyword": keyword_only, "cosine": plain}.get(leg, mem)
                strategy = "semantic" if leg in ("vector", "cosine") else "hybrid"
                result = service.search(query.text, api_key_id=query.tenant, strategy=strategy, limit=10,
                                        min_score=0.0)
                expected = ("keyword",) if leg == "keyword" else ("vector",) if leg in ("vector", "cosine") else (
                    "keyword", "vector")
                if tuple(result.provenance.legs) != expected:
                    raise RuntimeError(f"{leg} leg did not run as such: {result.provenance}")
                return [hit.memory.key for hit in result.hits]

            started = time.perf_counter()
            report = evaluate(search, selected)
            report["seconds"] = {"load": round(loaded, 1), "queries": round(time.perf_counter() - started, 1)}
    return report


def embedding_options(name: str) -> dict[str, Any]:
    """The ``[embedding]`` options a benchmark's model name stands for: an embedding source (``static``), or a
    source and one of its models (``transformers:all-MiniLM-L6-v2``)."""
    source, _, model = name.partition(":")
    return {"source": source, **({"model": model} if model else {})}


def store_name(name: str) -> str:
    """A model name as a directory name."""
    return name.replace(":", "-").replace("/", "-")


def run_quality(
    open_service: Callable[..., Any],
    *,
    models: Iterable[str] = ("static", "transformers"),
    per_tenant: int = 2000,
    root: Path,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """The whole benchmark: for each embedding source (or ``source:model``, :func:`embedding_options`), a store
    without distractors and one with
    ``per_tenant`` chat turns per tenant. ``open_service(data_dir, embedding_options, vector_options=None)``
    opens the engine (``vector_options``: the sqlite-vec store's, e.g. ``{"center": False}``)."""
    distractors = chat_distractors(per_tenant) if per_tenant else {}
    report: dict[str, Any] = {"queries": len(queries()), "tenants": len(FACTS), "distractors_per_tenant": per_tenant,
                              "results": {}}
    for model in models:
        for count in sorted({0, per_tenant}):
            progress(f"{model}, {count} chat distractors per tenant")
            report["results"].setdefault(model, {})[str(count)] = measure(
                open_service, root / f"{store_name(model)}-{count}", embedding_options(model), count, distractors,
                progress)
    return report


def tables(report: dict[str, Any], split: str = "test") -> str:
    """Markdown tables of one split: a row per (distractors, kind, leg)."""
    out = []
    for model, by_count in report["results"].items():
        out.append(f"### {model} ({split} split)\n")
        out.append("| distractors / tenant | queries | leg | R@1 | R@5 | MRR@10 |")
        out.append("|---|---|---|---|---|---|")
        for count, result in by_count.items():
            for kind in KINDS:
                for leg in LEGS:
                    m = result[split][kind][leg]
                    out.append(f"| {count} | {kind} ({m['n']}) | {leg} | {m['R@1']:.3f} | {m['R@5']:.3f} | "
                               f"{m['MRR']:.3f} |")
        out.append("")
    return "\n".join(out)


def summary(report: dict[str, Any], split: str = "test") -> str:
    """One Markdown table of one split: R@5 of the plain-cosine baseline and of each leg, and hybrid's R@1 /
    MRR, a row per cell."""
    out = ["| embeddings | distractors / tenant | questions | plain cosine R@5 | keyword R@5 | vector R@5 | "
           "**hybrid R@5** | hybrid R@1 | hybrid MRR@10 | vector MRR@10 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for model, by_count in report["results"].items():
        for count, result in by_count.items():
            for kind in KINDS:
                cell = result[split][kind]
                out.append(f"| {model} | {count} | {kind} ({cell['hybrid']['n']}) | {cell['cosine']['R@5']:.3f} | "
                           f"{cell['keyword']['R@5']:.3f} | "
                           f"{cell['vector']['R@5']:.3f} | **{cell['hybrid']['R@5']:.3f}** | "
                           f"{cell['hybrid']['R@1']:.3f} | {cell['hybrid']['MRR']:.3f} | "
                           f"{cell['vector']['MRR']:.3f} |")
    return "\n".join(out)
