"""``memroute bench --indexing``: how fast memories become searchable, against the embedding source's own
``embed_batch`` rate on the same texts, for each embedding source, side by side in one run.

For each source and each write path — ``import`` (``import_jsonl`` of the texts, then ``flush()``) and ``add``
(one ``add()`` per text, then ``flush()``; the background indexer embeds while the adds run) — a fresh service
on the embedded default engine (SQLite backend, sqlite-vec) indexes ``count`` real chat turns (the
``chitchat-dataset`` package, ``pip install 'memroute[bench]'``). The same source object the service indexes
with (behind its query cache) embeds the same texts in batches of 256 as the baseline. The work is split into
``rounds`` chunks and the two contenders alternate per chunk (baseline first in even rounds, indexing first in
odd ones), so load from other processes on the machine hits both alike; each rate is the texts over the sum of
its chunks' times. ``flush()`` returns only when every memory has its vector, so the indexing time is the
time until all of them are searchable by vector.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memroute.config.serialization import memory_to_dict
from memroute.embedding.cache import uncached
from memroute.interfaces import EmbeddingSource
from memroute.models import Memory, utcnow

__all__ = ["MODES", "TARGET_RATIO", "run_indexing_comparison"]

MODES = ("import", "add")
TARGET_RATIO = 0.9
"""Indexing at least this fraction of the source's own ``embed_batch`` rate (issue 13)."""

_TENANT = "bench"
_BATCH = 256


def _embed_all(source: EmbeddingSource, texts: Sequence[str]) -> None:
    for start in range(0, len(texts), _BATCH):
        source.embed_batch(texts[start:start + _BATCH])


def _lines(texts: Sequence[str], offset: int) -> list[str]:
    now = utcnow()
    return [json.dumps(memory_to_dict(Memory(
        id=str(uuid.UUID(int=offset + i + 1)), api_key_id=_TENANT, key=f"chat:{offset + i}", content=text,
        created_at=now, updated_at=now))) for i, text in enumerate(texts)]


def _timed_embed(source: EmbeddingSource, texts: Sequence[str]) -> float:
    began = time.perf_counter()
    _embed_all(source, texts)
    return time.perf_counter() - began


def _timed_index(mem: Any, mode: str, texts: Sequence[str], lines: Sequence[str]) -> tuple[float, float]:
    """Seconds until every text is indexed (``flush()`` returned), and of those, seconds writing them."""
    began = time.perf_counter()
    if mode == "import":
        mem.import_jsonl(lines)
    else:
        for text in texts:
            mem.add(api_key_id=_TENANT, content=text)
    written = time.perf_counter()
    if not mem.flush(timeout=3600):
        raise RuntimeError(f"indexing did not finish ({mode})")
    return time.perf_counter() - began, written - began


def _measure(open_service: Callable[[Path, EmbeddingSource], Any], source: EmbeddingSource, mode: str,
             texts: Sequence[str], rounds: int, path: Path) -> dict[str, Any]:
    baseline = uncached(source)
    chunk = -(-len(texts) // rounds)
    with open_service(path, source) as mem:
        baseline.embed_batch(["warm up", "the model loads on first use"])
        mem.search("warm up", api_key_id=_TENANT, limit=1)
        embed_s = index_s = write_s = 0.0
        for number, start in enumerate(range(0, len(texts), chunk)):
            part = texts[start:start + chunk]
            lines = _lines(part, start) if mode == "import" else []
            if number % 2 == 0:
                embed_s += _timed_embed(baseline, part)
                took, wrote = _timed_index(mem, mode, part, lines)
            else:
                took, wrote = _timed_index(mem, mode, part, lines)
                embed_s += _timed_embed(baseline, part)
            index_s += took
            write_s += wrote
        searchable = len(mem.search(texts[0], api_key_id=_TENANT, strategy="semantic", limit=1).hits)
    embed_rate, index_rate = len(texts) / embed_s, len(texts) / index_s
    return {
        "embed_batch_per_s": round(embed_rate, 1),
        "indexing_per_s": round(index_rate, 1),
        "indexing_vs_embed_batch": round(index_rate / embed_rate, 2),
        "write_s": round(write_s, 3),
        "flush_s": round(index_s - write_s, 3),
        "embed_batch_s": round(embed_s, 3),
        "target_met": index_rate / embed_rate >= TARGET_RATIO,
        "searchable": searchable > 0,
    }


def run_indexing_comparison(
    open_service: Callable[[Path, EmbeddingSource], Any],
    build_source: Callable[[str], EmbeddingSource | str],
    *,
    sources: Sequence[str] = ("static", "transformers"),
    count: int = 2000,
    rounds: int = 4,
    modes: Sequence[str] = MODES,
    root: Path,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """The report: per source, per mode, both rates and their ratio (see the module docstring).
    ``build_source(name)`` returns a fresh embedding source, or a string saying why it is unavailable (that
    source is then reported as skipped). ``open_service(path, source)`` opens a fresh service indexing with it."""
    from memroute.bench.speed import chat_turns

    texts = chat_turns(count)
    report: dict[str, Any] = {"count": count, "rounds": rounds, "target_ratio": TARGET_RATIO,
                              "load_average_before": [round(x, 2) for x in os.getloadavg()], "results": {}}
    for name in sources:
        results: dict[str, Any] = {}
        for mode in modes:
            source = build_source(name)
            if isinstance(source, str):
                results = {"skipped": source}
                break
            progress(f"{name}: {mode} of {count} chat turns, {rounds} rounds")
            results[mode] = _measure(open_service, source, mode, texts, rounds, root / f"{name}-{mode}")
        report["results"][name] = results
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return report
