"""The frozen records discovery hooks yield: one per component a plugin provides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

__all__ = [
    "PLUGIN_API_VERSION",
    "SUPPORTED_API_VERSIONS",
    "BackendSpec",
    "ComponentSpec",
    "EmbeddingSourceSpec",
    "EmptySettings",
    "ExtractorSpec",
    "RerankerSpec",
    "VectorStoreSpec",
]

PLUGIN_API_VERSION: Final = 1
"""The plugin API this memroute implements. A spec declares the version it was written for."""
SUPPORTED_API_VERSIONS: Final = frozenset({1})


@attrs.frozen(kw_only=True)
class EmptySettings:
    """Settings class for a component that takes no options."""


def _check_name(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value or not all(c.isalnum() or c in "-_." for c in value):
        raise ValueError(f"component name must be a non-empty identifier-like string, got {value!r}")


@attrs.frozen(kw_only=True)
class ComponentSpec:
    """Common fields of every spec.

    ``factory(settings, context)`` builds the component: ``settings`` is an instance of
    ``settings_class`` structured from the user's options; ``context`` is a
    :class:`~memroute.interfaces.ComponentContext`.
    """

    name: str = attrs.field(validator=_check_name)
    """The name configuration uses (``type = "..."`` / ``source = "..."`` / ``store = "..."``)."""
    factory: Callable[..., Any]
    settings_class: type = EmptySettings
    api_version: int = PLUGIN_API_VERSION
    description: str = ""

    kind = "component"


@attrs.frozen(kw_only=True)
class BackendSpec(ComponentSpec):
    """A storage backend. The factory returns a :class:`~memroute.interfaces.MemoryBackend`."""

    kind = "backend"


@attrs.frozen(kw_only=True)
class EmbeddingSourceSpec(ComponentSpec):
    """An embedding source. The factory returns an :class:`~memroute.interfaces.EmbeddingSource`."""

    kind = "embedding"


@attrs.frozen(kw_only=True)
class VectorStoreSpec(ComponentSpec):
    """A vector store. The factory returns a :class:`~memroute.interfaces.VectorStore`."""

    kind = "vector-store"


@attrs.frozen(kw_only=True)
class ExtractorSpec(ComponentSpec):
    """A fact extractor. The factory returns an :class:`~memroute.interfaces.Extractor`."""

    kind = "extractor"


@attrs.frozen(kw_only=True)
class RerankerSpec(ComponentSpec):
    """A reranker. The factory returns a :class:`~memroute.interfaces.Reranker`."""

    kind = "reranker"
