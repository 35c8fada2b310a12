"""Building configured components from plugin specs (the second phase of plugin configuration)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, overload

import attrs

from memroute.config.settings import ComponentConfig, structure_options
from memroute.errors import ConfigError, MemrouteError, PluginError
from memroute.interfaces import ComponentContext, EmbeddingSource, Extractor, MemoryBackend, Reranker, VectorStore
from memroute.plugins import MemroutePluginManager
from memroute.specs import ComponentSpec, EmbeddingSourceSpec, VectorStoreSpec

__all__ = ["AutoChoice", "build_backend", "build_component", "choose_auto", "make_context"]

T = TypeVar("T")
SpecT = TypeVar("SpecT", EmbeddingSourceSpec, VectorStoreSpec)

_EXPECTED: dict[str, type] = {
    "backend": MemoryBackend,
    "embedding": EmbeddingSource,
    "vector-store": VectorStore,
    "extractor": Extractor,
    "reranker": Reranker,
}


@attrs.frozen(kw_only=True)
class AutoChoice(Generic[SpecT]):
    """What ``auto`` chose (``spec`` ``None``: nothing could serve), why, and what it noticed on the way."""

    spec: SpecT | None
    reason: str
    notes: tuple[str, ...] = ()


def choose_auto(
    specs: Mapping[str, SpecT], options: Mapping[str, Mapping[str, Any]], section: Any
) -> AutoChoice[SpecT]:
    """``auto`` selection, decided by data on the specs: the installed specs with an ``auto_priority``,
    highest first (ties by name); the first whose checks pass serves. Core names no component here."""
    candidates = sorted((s for s in specs.values() if s.auto_priority is not None),
                        key=lambda s: (-(s.auto_priority or 0), s.name))
    notes: list[str] = []
    for spec in candidates:
        answer = spec.availability(options.get(spec.name) or {}, section, auto=True)
        if answer.ok:
            return AutoChoice(spec=spec, reason=f"{spec.name}: {answer.reason}", notes=tuple(notes))
        if answer.mention and answer.reason:
            notes.append(f"{spec.name}: {answer.reason}")
    return AutoChoice(spec=None, reason="nothing available", notes=tuple(notes))


def make_context(pm: MemroutePluginManager, instance_name: str, data_dir: Path,
                 primary: MemoryBackend | None = None) -> ComponentContext:
    return ComponentContext(instance_name=instance_name, data_dir=data_dir, prepare_connection=pm.prepare_connection,
                            primary=primary)


@overload
def build_component(pm: MemroutePluginManager, kind: Literal["backend"], name: str, options: Mapping[str, Any], *,
                    context: ComponentContext, path: str) -> MemoryBackend: ...
@overload
def build_component(pm: MemroutePluginManager, kind: Literal["embedding"], name: str, options: Mapping[str, Any], *,
                    context: ComponentContext, path: str) -> EmbeddingSource: ...
@overload
def build_component(pm: MemroutePluginManager, kind: Literal["vector-store"], name: str, options: Mapping[str, Any],
                    *, context: ComponentContext, path: str) -> VectorStore: ...
@overload
def build_component(pm: MemroutePluginManager, kind: Literal["extractor"], name: str, options: Mapping[str, Any], *,
                    context: ComponentContext, path: str) -> Extractor: ...
@overload
def build_component(pm: MemroutePluginManager, kind: Literal["reranker"], name: str, options: Mapping[str, Any], *,
                    context: ComponentContext, path: str) -> Reranker: ...


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
    The result is typed by ``kind`` (``"backend"`` → :class:`MemoryBackend`, ...), and checked at run time:
    a factory that returns something else is a plugin error.

    Errors: :class:`~memroute.errors.UnknownComponentError` (no such plugin), :class:`ConfigError` (bad
    options, naming ``path.field``), :class:`PluginError` (the factory failed or returned the wrong type).
    """
    spec = pm.component(kind, name)
    return _build(spec, options, context=context, path=path)


def _build(spec: ComponentSpec[T], options: Mapping[str, Any], *, context: ComponentContext, path: str) -> T:
    settings = structure_options(options, spec.settings_class, path)
    try:
        component = spec.factory(settings, context)
    except MemrouteError:
        raise
    except Exception as exc:
        raise PluginError(f"{spec.kind} {spec.name!r} ({path}) failed to start: {type(exc).__name__}: {exc}") from exc
    expected = _EXPECTED[spec.kind]
    if not isinstance(component, expected):
        raise PluginError(
            f"{spec.kind} plugin {spec.name!r} returned {type(component).__name__}, not a {expected.__name__}"
        )
    return component


def build_backend(pm: MemroutePluginManager, instance: str, config: ComponentConfig, data_dir: Path) -> MemoryBackend:
    """The backend instance ``[backends.<instance>]`` describes."""
    if not isinstance(config, ComponentConfig):
        raise ConfigError(f"backends.{instance}: expected a table with a type", [(f"backends.{instance}", "type")])
    options = config.options
    if config.db_path is not None:
        spec = pm.component("backend", config.type)
        if spec.path_option is None:
            raise ConfigError(
                f"MEMROUTE_DB: the primary backend {instance!r} (type {config.type!r}) keeps no database file; "
                f"unset MEMROUTE_DB and configure [backends.{instance}] instead",
                [("MEMROUTE_DB", "not supported by the primary backend")],
            )
        options = {**options, spec.path_option: config.db_path}
    return build_component(
        pm, "backend", config.type, options,
        context=make_context(pm, instance, data_dir), path=f"backends.{instance}",
    )
