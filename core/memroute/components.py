"""Building configured components from plugin specs (the second phase of plugin configuration)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from memroute.errors import ConfigError, MemrouteError, PluginError
from memroute.interfaces import ComponentContext, EmbeddingSource, Extractor, MemoryBackend, Reranker, VectorStore
from memroute.plugins import MemroutePluginManager
from memroute.settings import ComponentConfig, structure_options

__all__ = ["build_backend", "build_component", "make_context"]

T = TypeVar("T")

_EXPECTED: dict[str, type] = {
    "backend": MemoryBackend,
    "embedding": EmbeddingSource,
    "vector-store": VectorStore,
    "extractor": Extractor,
    "reranker": Reranker,
}


def make_context(pm: MemroutePluginManager, instance_name: str, data_dir: Path,
                 primary: MemoryBackend | None = None) -> ComponentContext:
    return ComponentContext(instance_name=instance_name, data_dir=data_dir, prepare_connection=pm.prepare_connection,
                            primary=primary)


def build_component(
    pm: MemroutePluginManager,
    kind: str,
    name: str,
    options: Mapping[str, Any],
    *,
    context: ComponentContext,
    path: str,
) -> Any:
    """Look up ``name`` among ``kind`` specs, structure ``options`` into its settings class, call its factory.

    Errors: :class:`~memroute.errors.UnknownComponentError` (no such plugin), :class:`ConfigError` (bad
    options, naming ``path.field``), :class:`PluginError` (the factory failed or returned the wrong type).
    """
    spec = pm.component(kind, name)
    settings = structure_options(options, spec.settings_class, path)
    try:
        component = spec.factory(settings, context)
    except MemrouteError:
        raise
    except Exception as exc:
        raise PluginError(f"{kind} {name!r} ({path}) failed to start: {type(exc).__name__}: {exc}") from exc
    expected = _EXPECTED[kind]
    if not isinstance(component, expected):
        raise PluginError(
            f"{kind} plugin {name!r} returned {type(component).__name__}, not a {expected.__name__}"
        )
    return component


def build_backend(pm: MemroutePluginManager, instance: str, config: ComponentConfig, data_dir: Path) -> MemoryBackend:
    """The backend instance ``[backends.<instance>]`` describes."""
    if not isinstance(config, ComponentConfig):
        raise ConfigError(f"backends.{instance}: expected a table with a type", [(f"backends.{instance}", "type")])
    backend = build_component(
        pm, "backend", config.type, config.options,
        context=make_context(pm, instance, data_dir), path=f"backends.{instance}",
    )
    assert isinstance(backend, MemoryBackend)
    return backend
