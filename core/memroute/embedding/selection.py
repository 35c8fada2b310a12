"""Which embedding source serves: ``auto`` resolution and building the configured source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from memroute.config.settings import EmbeddingSettings
from memroute.embedding.cache import CachedEmbeddingSource
from memroute.errors import EmbeddingError, UnknownComponentError
from memroute.interfaces import EmbeddingSource
from memroute.plugins import MemroutePluginManager

__all__ = ["Resolution", "build_embedding_source", "resolve"]


@attrs.frozen(kw_only=True)
class Resolution:
    """The outcome of resolving ``[embedding] source``: the source name to build (``None``: keyword only)
    and a human-readable reason, shown by ``memroute status``."""

    source: str | None
    reason: str
    requested: str = "auto"
    model: str | None = None
    """Filled in by :func:`build_embedding_source` once the source is built."""
    dimensions: int | None = None
    """Known in advance for the bundled models; ``None`` until the first vector for a remote source."""

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "dimensions": self.dimensions,
                "reason": self.reason, "requested": self.requested}


def resolve(settings: EmbeddingSettings, pm: MemroutePluginManager) -> Resolution:
    """Pick the embedding source ``settings`` asks for.

    ``auto``: decided by data on the installed specs (:func:`~memroute.components.choose_auto`): the
    highest ``auto_priority`` whose checks pass. With the built-ins that is ``remote`` when its ``base_url``
    and ``model`` are configured, else ``static`` when ``static_enabled`` (the default: memroute ships its
    weights), else ``transformers`` when ``transformers_enabled`` and its extra is installed, else none
    (keyword only). ``none`` is keyword only. Any other name is an installed source plugin, used as asked
    (the enable flags only steer ``auto``) unless its ``ready`` check fails (``remote`` without an endpoint:
    keyword only, with the reason); an unknown name raises :class:`~memroute.errors.UnknownComponentError`.
    """
    from memroute.components import choose_auto

    requested = (settings.source or "auto").strip()
    installed = pm.embedding_sources()
    if requested == "none":
        return Resolution(source=None, reason="embedding disabled (source = none): keyword retrieval only",
                          requested=requested)
    if requested != "auto":
        if requested not in installed:
            names = ", ".join(sorted(installed)) or "none"
            raise UnknownComponentError(
                f"embedding.source: no embedding source named {requested!r} is installed (installed: {names})",
                [("embedding.source", "unknown component")],
            )
        answer = installed[requested].availability(settings.options.get(requested) or {}, settings, auto=False)
        if not answer.ok:
            return Resolution(source=None, reason=answer.reason, requested=requested)
        return Resolution(source=requested, reason=f"configured (source = {requested})", requested=requested)
    choice = choose_auto(installed, settings.options, settings)
    if choice.spec is None:
        return Resolution(source=None, reason=_join("auto: no embedding source enabled; keyword retrieval only",
                                                    choice.notes), requested=requested)
    return Resolution(source=choice.spec.name, reason=_join(f"auto: {choice.reason}", choice.notes),
                      requested=requested)


def _join(reason: str, notes: tuple[str, ...]) -> str:
    return reason if not notes else f"{reason} ({'; '.join(notes)})"


def build_embedding_source(
    settings: EmbeddingSettings, pm: MemroutePluginManager, data_dir: Path,
) -> tuple[EmbeddingSource | None, Resolution]:
    """The resolved source, built and wrapped in the cache (``cache_max``/``cache_ttl_ms``), with its
    :class:`Resolution`.

    An explicitly selected source that cannot be built raises (configuration is wrong and the user should
    hear it). Under ``auto`` a source that fails to build with an :class:`EmbeddingError` (for example a
    missing optional dependency) leaves retrieval keyword-only, with the error in the reason.
    """
    from memroute.components import build_component, make_context

    resolution = resolve(settings, pm)
    if resolution.source is None:
        return None, resolution
    name = resolution.source
    try:
        inner = build_component(
            pm, "embedding", name, settings.options.get(name) or {},
            context=make_context(pm, name, data_dir), path=f"embedding.{name}",
        )
    except EmbeddingError as exc:
        if resolution.requested != "auto":
            raise
        return None, Resolution(source=None, reason=f"auto: {name} unavailable: {exc}", requested="auto")
    resolution = attrs.evolve(resolution, model=inner.model, dimensions=inner.dimensions)
    if settings.cache_max > 0 and settings.cache_ttl_ms > 0:
        return CachedEmbeddingSource(inner, max_entries=settings.cache_max, ttl_ms=settings.cache_ttl_ms), resolution
    return inner, resolution
