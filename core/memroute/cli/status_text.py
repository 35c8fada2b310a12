"""``memroute status`` as text a person reads: one line a part, the figures an operator looks for first
(``--json`` keeps the whole report, every key)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memroute.reports import StatusReport

__all__ = ["status_lines"]


def _state(part: Mapping[str, Any]) -> str:
    """``available`` or ``unavailable``, with the engine's reason when it gives one (why ``auto`` chose what
    it chose, or what is missing)."""
    state = "available" if part.get("available", True) else "unavailable"
    reason = part.get("reason")
    return f"{state} ({reason})" if reason else state


def _join(*items: str | None) -> str:
    return ", ".join(item for item in items if item)


def status_lines(report: StatusReport) -> list[str]:
    """The report as aligned ``label  value`` lines."""
    memory = report.memory
    backends = report.backends
    keyword, embedding, vectors = report.keyword, report.embedding, report.vector_store
    fusion, rerank = report.fusion, report.rerank
    rows: list[tuple[str, str]] = [
        ("data dir", report.data_dir),
        ("state dir", report.state_dir),
        ("memory", _join("enabled" if memory.enabled else "disabled (augment and observe do nothing)",
                         f"strategy {memory.strategy}", f"max_tokens {memory.max_tokens}",
                         f"retention {memory.retention_days} days")),
        ("backends", _join(f"primary {backends.primary}",
                           f"fallbacks {', '.join(backends.fallbacks)}" if backends.fallbacks else "no fallbacks")),
    ]
    health = report.health
    for backend in health.backends if health is not None else ():
        state = "ok" if backend.ok else f"FAILING: {backend.error}"
        rows.append((f"  {backend.name}", _join(f"{backend.type} {backend.role}",
                                                f"{state} ({backend.latency_ms:.1f} ms)",
                                                f"breaker {backend.breaker}", f"{backend.pending} pending")))
    rows += [
        ("keyword", _join(str(keyword.get("backend") or "none"),
                          f"served by {keyword['served_by']}" if keyword.get("served_by") else None,
                          _state(keyword))),
        ("embedding", _join(" ".join(str(x) for x in (embedding.get("source"), embedding.get("model")) if x) or "none",
                            f"{embedding['dimensions']} dimensions" if embedding.get("dimensions") else None,
                            _state(embedding))),
        ("vectors", _join(str(vectors.get("backend") or "none"),
                          f"{vectors['rows']} rows" if vectors.get("rows") is not None else None,
                          f"{vectors.get('pending_reindex', 0)} waiting to be embedded",
                          _state(vectors))),
        ("fusion", _join(str(fusion.get("method") or "none"),
                         f"keyword_weight {fusion['keyword_weight']}" if "keyword_weight" in fusion else None,
                         f"min_similarity {fusion['min_similarity']}" if "min_similarity" in fusion else None)),
        ("rerank", _join(str(rerank.get("reranker")), _state(rerank)) if rerank.get("enabled")
         else f"off ({rerank['reason']})" if rerank.get("reason") else "off"),
    ]
    if health is not None:
        outbox = health.outbox
        owed = ", ".join(f"{target} {count}" for target, count in outbox.by_target.items())
        rows.append(("outbox", _join(f"depth {outbox.depth}", f"owed to {owed}" if owed else None,
                                     f"oldest {outbox.oldest_age_s:.1f} s" if outbox.oldest_age_s is not None else None,
                                     f"{len(outbox.failing)} failing" if outbox.failing else None,
                                     f"{outbox.dead_letters} dead letters")))
    width = max(len(label) for label, _ in rows)
    return [f"{label:<{width}}  {value}" for label, value in rows]
