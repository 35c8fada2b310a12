"""Choose an embedding model's ranking settings on the conversation set's **dev** split.

``python -m memroute.bench.conversation_tuning --model transformers:multilingual-e5-small`` loads the
conversation set (:mod:`memroute.bench.conversations`, turns stored dated and bare) once under ``--root`` (kept
between runs), then asks the dev split's facts questions of every setting of a grid: the centred query on or
off, the hub penalty, the whole question or its content words embedded, and the keyword leg's weight in
fusion. It prints each setting's hybrid and vector-leg recall at k = 5, 10, 25, 50 on dev, best first by
hybrid recall averaged over the k and both ways of storing turns. The test split is never read here. A trial
sets each option directly (the store's ``center`` and ``hub_penalty``, the cached embedder's content-word
queries, ``[memory] keyword_weight``), so any model can be tried on any setting without declaring it; a
winner becomes the model's declared setting only if ``memroute bench --quality`` then shows a gain on the test
split (multilingual-e5-small's dev winner did not, and was dropped: docs/performance.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from memroute.bench.conversations import FORMATS, KS, Question, memories, questions, real_conversations
from memroute.bench.embedding_cache import DEFAULT_CACHE_DIR, VectorCache, cached_embedder
from memroute.bench.quality import embedding_options, load_store, store_name

if TYPE_CHECKING:
    from memroute.service import Memroute

__all__ = ["Variant", "dev_recall", "grid", "load_stores", "main", "open_trial"]

_LOADED = "memroute-bench-loaded.json"


@attrs.frozen(kw_only=True)
class Variant:
    """One setting of the grid."""

    center: bool
    hub_penalty: float
    content_words: bool
    keyword_weight: float

    def label(self) -> str:
        return (f"center={'on' if self.center else 'off'} hub={self.hub_penalty:g} "
                f"query={'content words' if self.content_words else 'whole'} keyword_weight={self.keyword_weight:g}")


def grid(centers: Iterable[bool] = (True, False), hubs: Iterable[float] = (0.0, 0.15, 0.3, 0.5),
         content_words: Iterable[bool] = (False, True),
         keyword_weights: Iterable[float] = (0.5, 0.75, 1.0, 1.5, 2.0)) -> list[Variant]:
    return [Variant(center=c, hub_penalty=h, content_words=w, keyword_weight=k)
            for c, h, w, k in itertools.product(centers, hubs, content_words, keyword_weights)]


def load_stores(cache: VectorCache, model: str, root: Path, per_tenant: int,
                progress: Callable[[str], None] = lambda m: None) -> dict[str, Path]:
    """The data directory of each way of storing turns, loaded once (a marker file says it was, with how many
    turns per tenant)."""
    from memroute.service import Memroute

    conversations = real_conversations()
    paths = {}
    for form in FORMATS:
        path = root / f"conversations-{store_name(model)}-{form}"
        marker = path / _LOADED
        wanted = {"model": model, "form": form, "per_tenant": per_tenant}
        if not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) != wanted:
            overrides = _overrides(path, model)
            with Memroute.open({}, embedder=cached_embedder(cache, {}, **overrides), **overrides) as mem:
                count, seconds = load_store(mem, memories(per_tenant, form, conversations), timeout=7200)
            progress(f"{model}, {form}: loaded {count} turns in {seconds:.0f} s")
            marker.write_text(json.dumps(wanted), encoding="utf-8")
        paths[form] = path
    return paths


def _overrides(path: Path, model: str, vectors: dict[str, Any] | None = None,
               memory: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"data_dir": str(path), "embedding": embedding_options(model), "memory": memory or {},
            "vectors": {"store": "sqlite-vec", **(vectors or {})},
            "backends": {"primary": "main", "fallbacks": [], "instances": {"main": {"type": "sqlite", "options": {}}}}}


def open_trial(cache: VectorCache, model: str, path: Path, variant: Variant) -> Memroute:
    """The loaded store at ``path`` opened under ``variant``: every option of the setting is set, none is left
    to what ``model`` declares (close it, or use it as a context manager)."""
    from memroute.service import Memroute

    overrides = _overrides(path, model, {"center": variant.center, "hub_penalty": variant.hub_penalty},
                           {"keyword_weight": variant.keyword_weight})
    embedder = cached_embedder(cache, {}, query_content_words=variant.content_words, **overrides)
    return Memroute.open({}, embedder=embedder, **overrides)


def dev_recall(cache: VectorCache, model: str, path: Path, variant: Variant,
               asked: list[Question]) -> dict[str, dict[str, float]]:
    """``{"hybrid": {"R@5": ...}, "vector": {...}}`` of ``asked`` on the store at ``path`` under ``variant``."""
    sums = {leg: [0.0] * len(KS) for leg in ("hybrid", "vector")}
    with open_trial(cache, model, path, variant) as mem:
        for question in asked:
            wanted = set(question.evidence)
            for leg, strategy in (("hybrid", "hybrid"), ("vector", "semantic")):
                hits = mem.search(question.text, api_key_id=question.tenant, strategy=strategy, limit=max(KS),
                                  min_score=0.0, record_access=False, now=question.asked).hits
                keys = [hit.memory.key for hit in hits]
                for i, k in enumerate(KS):
                    sums[leg][i] += len(wanted & set(keys[:k])) / len(wanted)
    return {leg: {f"R@{k}": round(acc[i] / len(asked), 3) for i, k in enumerate(KS)} for leg, acc in sums.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m memroute.bench.conversation_tuning", description=__doc__)
    parser.add_argument("--model", default="transformers:multilingual-e5-small")
    parser.add_argument("--turns", type=int, default=2000, help="real chat turns per tenant")
    parser.add_argument("--root", required=True, help="where the loaded stores are kept between runs")
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR))
    parser.add_argument("--keyword-weights", default="0.5,0.75,1,1.5,2")
    parser.add_argument("--hubs", default="0,0.15,0.3,0.5")
    parser.add_argument("--output", default=None, help="also write every setting's figures here (JSON)")
    args = parser.parse_args(argv)
    cache = VectorCache(args.cache_dir)
    paths = load_stores(cache, args.model, Path(args.root), args.turns,
                        lambda message: print(f"... {message}", file=sys.stderr, flush=True))
    asked = [q for q in questions() if q.category == "facts" and q.split == "dev"]
    rows: list[dict[str, Any]] = []
    for variant in grid(hubs=[float(h) for h in args.hubs.split(",")],
                        keyword_weights=[float(w) for w in args.keyword_weights.split(",")]):
        figures = {form: dev_recall(cache, args.model, path, variant, asked) for form, path in paths.items()}
        mean = sum(figures[form]["hybrid"][f"R@{k}"] for form in FORMATS for k in KS) / (len(FORMATS) * len(KS))
        rows.append({"variant": attrs.asdict(variant), "label": variant.label(), "hybrid_mean": round(mean, 4),
                     "figures": figures})
        print(f"{mean:.4f}  {variant.label()}  " + "  ".join(
            f"{form}: " + "/".join(f"{figures[form]['hybrid'][f'R@{k}']:.3f}" for k in KS) for form in FORMATS),
              file=sys.stderr, flush=True)
    rows.sort(key=lambda row: -row["hybrid_mean"])
    print(f"dev split, {len(asked)} facts questions, {args.model}; hybrid R@5/10/25/50 (vector leg in brackets)")
    for row in rows:
        cells = "  ".join(
            f"{form}: " + "/".join(f"{row['figures'][form]['hybrid'][f'R@{k}']:.3f}" for k in KS)
            + " (" + "/".join(f"{row['figures'][form]['vector'][f'R@{k}']:.3f}" for k in KS) + ")" for form in FORMATS)
        print(f"{row['hybrid_mean']:.4f}  {row['label']}  {cells}")
    if args.output:
        Path(args.output).write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
