"""Building the retrieval engine from settings: the embedding source (``[embedding]``) and the vector store
(``[vectors]``), each a plugin component."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import attrs

from memroute.components import build_component, make_context
from memroute.config.settings import MemrouteSettings
from memroute.errors import ConfigError, MemrouteError
from memroute.interfaces import EmbeddingSource, MemoryBackend, Reranker, VectorStore
from memroute.plugins import MemroutePluginManager
from memroute.retrieval.engine import RetrievalEngine
from memroute.routing.manager import MemoryManager

__all__ = ["build_reranker", "build_retrieval", "build_vector_store"]

log = logging.getLogger("memroute.retrieval")


def build_vector_store(
    settings: MemrouteSettings, pm: MemroutePluginManager, data_dir: Path, primary: MemoryBackend | None = None
) -> tuple[VectorStore | None, str | None]:
    """The configured vector store, or ``(None, reason)``. ``auto`` is decided by data on the installed
    specs (the highest ``auto_priority`` whose checks pass: sqlite-vec with the built-ins). ``primary``
    reaches the store through its context (a store may share the primary's database).

    ``[vectors] quantization`` is not pushed into the store's options: a store reads it from the signature
    it is bound to (its own ``quantization`` option, when it has one, overrides). A value the store's spec
    does not list in ``quantizations`` is a :class:`ConfigError` naming the field.
    """
    from memroute.components import choose_auto

    name = settings.vectors.store
    if name == "none":
        return None, "vector store disabled ([vectors] store = \"none\")"
    if name == "auto":
        choice = choose_auto(pm.vector_stores(), settings.vectors.options, settings.vectors)
        if choice.spec is None:
            notes = f" ({'; '.join(choice.notes)})" if choice.notes else ""
            return None, f"auto: no vector store available{notes}"
        name = choice.spec.name
    spec = pm.component("vector-store", name)
    quantization = settings.vectors.quantization
    if spec.quantizations is not None and quantization not in spec.quantizations:
        supported = ", ".join(sorted(spec.quantizations))
        raise ConfigError(
            f"vectors.quantization: the {name} vector store indexes {supported}, not {quantization!r}",
            [("vectors.quantization", "unsupported by the vector store")],
        )
    options: dict[str, Any] = dict(settings.vectors.options.get(name, {}))
    store = build_component(pm, "vector-store", name, options, context=make_context(pm, name, data_dir, primary),
                            path=f"vectors.{name}")
    return store, None


def build_reranker(settings: MemrouteSettings, pm: MemroutePluginManager, data_dir: Path) -> Reranker:
    """The ``[rerank]`` reranker. A reranker whose settings have a ``model`` field and were given none gets
    ``[memory] rerank_provider_model``."""
    name = settings.rerank.reranker
    options: dict[str, Any] = dict(settings.rerank.options.get(name, {}))
    spec = pm.component("reranker", name)
    field_names = {f.name for f in attrs.fields(spec.settings_class)} if attrs.has(spec.settings_class) else set()
    model = settings.memory.rerank_provider_model
    if "model" in field_names and not options.get("model") and model:
        options["model"] = model
    return build_component(pm, "reranker", name, options, context=make_context(pm, name, data_dir),
                           path=f"rerank.{name}")


def build_retrieval(
    manager: MemoryManager,
    settings: MemrouteSettings,
    pm: MemroutePluginManager,
    data_dir: Path,
    *,
    embedder: EmbeddingSource | None = None,
    vector_store: VectorStore | None = None,
) -> RetrievalEngine:
    """The engine for these settings. An embedding source that cannot be resolved leaves retrieval keyword-only
    (visibly: status and every search's provenance say why); a broken vector store configuration is an error."""
    resolution: dict[str, Any] | None = None
    if embedder is None and settings.embedding.source == "none":
        resolution = {"source": None, "model": None, "dimensions": None,
                      "reason": 'embedding disabled ([embedding] source = "none")'}
    elif embedder is None:
        from memroute.embedding import build_embedding_source

        embedder, resolved = build_embedding_source(settings.embedding, pm, data_dir)
        resolution = resolved.to_dict()
    if embedder is not None and vector_store is None:
        try:
            vector_store, _reason = build_vector_store(settings, pm, data_dir, manager.primary)
        except MemrouteError:
            if embedder is not None:
                embedder.close()
            raise
    reranker = None
    if settings.memory.rerank_enabled:
        try:
            reranker = build_reranker(settings, pm, data_dir)
        except MemrouteError:
            for component in (embedder, vector_store):
                if component is not None:
                    component.close()
            raise
    return RetrievalEngine(
        manager,
        reranker=reranker,
        rerank_candidates=settings.rerank.candidates,
        memory_settings=settings.memory,
        embedder=embedder,
        vector_store=vector_store,
        index_path=data_dir / "index.db",
        resolution=resolution,
        prepare=pm.prepare_connection,
        quantization=settings.vectors.quantization,
    )
