"""The frozen records discovery hooks yield: one per component a plugin provides."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Generic, TypeVar

import attrs

from memroute.interfaces import ComponentContext, EmbeddingSource, Extractor, MemoryBackend, Reranker, VectorStore

__all__ = [
    "PLUGIN_API_VERSION",
    "SUPPORTED_API_VERSIONS",
    "Availability",
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

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class EmptySettings:
    """Settings class for a component that takes no options."""


@attrs.frozen(kw_only=True)
class Availability:
    """A component's answer to "can you serve with this configuration?" (an ``auto`` choice, or a check on
    an explicit one)."""

    ok: bool
    reason: str = ""
    """Why, in words ``memroute status`` shows (``"remote endpoint configured"``, ``"enabled but not
    installed (pip install ...)"``)."""
    mention: bool = True
    """When not ``ok``: whether ``auto``'s reason should mention it. A component that was simply not asked
    for (disabled, nothing configured) says ``False``; one that was asked for but cannot serve says ``True``."""


Check = Callable[[Mapping[str, Any], Any], Availability]
"""``check(options, section)``: the component's own options table and the whole section's settings
(``[embedding]`` → :class:`~memroute.config.settings.EmbeddingSettings`, ``[vectors]`` →
:class:`~memroute.config.settings.VectorSettings`)."""


def _check_name(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value or not all(c.isalnum() or c in "-_." for c in value):
        raise ValueError(f"component name must be a non-empty identifier-like string, got {value!r}")


@attrs.frozen(kw_only=True)
class ComponentSpec(Generic[T]):
    """Common fields of every spec; ``T`` is the component type the factory returns.

    ``factory(settings, context)`` builds the component: ``settings`` is an instance of
    ``settings_class`` structured from the user's options; ``context`` is a
    :class:`~memroute.interfaces.ComponentContext`.
    """

    name: str = attrs.field(validator=_check_name)
    """The name configuration uses (``type = "..."`` / ``source = "..."`` / ``store = "..."``)."""
    factory: Callable[[Any, ComponentContext], T]
    settings_class: type = EmptySettings
    api_version: int = PLUGIN_API_VERSION
    description: str = ""

    kind: ClassVar[str] = "component"


@attrs.frozen(kw_only=True)
class BackendSpec(ComponentSpec[MemoryBackend]):
    """A storage backend. The factory returns a :class:`~memroute.interfaces.MemoryBackend`."""

    path_option: str | None = None
    """The option that holds the backend's database file, which the ``MEMROUTE_DB`` shortcut sets on the
    primary (sqlite: ``path``). ``None``: the backend has no such file and refuses the shortcut."""

    kind: ClassVar[str] = "backend"


@attrs.frozen(kw_only=True)
class _SelectableSpec(ComponentSpec[T]):
    """A spec ``auto`` can choose (embedding sources and vector stores)."""

    auto_priority: int | None = None
    """Takes part in ``auto`` when set: among the installed specs with a priority, the highest whose
    checks pass serves (ties: by name). ``None``: only used when configured by name."""
    auto_check: Check | None = None
    """Extra condition for ``auto`` only (an enable flag, an optional dependency being installed)."""
    ready: Check | None = None
    """What the component needs configured to serve at all (an endpoint): checked for ``auto`` and for an
    explicit choice. When it fails on an explicit choice, retrieval runs without the component and says why."""

    def availability(self, options: Mapping[str, Any], section: Any, *, auto: bool) -> Availability:
        """Run the checks that apply (``ready``, then ``auto_check`` under ``auto``); the first failure wins."""
        passed = Availability(ok=True, reason="installed" if auto else "configured")
        for check in (self.ready, self.auto_check if auto else None):
            if check is not None:
                answer = check(options, section)
                if not answer.ok:
                    return answer
                if answer.reason:
                    passed = answer
        return passed


@attrs.frozen(kw_only=True)
class EmbeddingSourceSpec(_SelectableSpec[EmbeddingSource]):
    """An embedding source. The factory returns an :class:`~memroute.interfaces.EmbeddingSource`."""

    kind: ClassVar[str] = "embedding"


@attrs.frozen(kw_only=True)
class VectorStoreSpec(_SelectableSpec[VectorStore]):
    """A vector store. The factory returns a :class:`~memroute.interfaces.VectorStore`."""

    quantizations: frozenset[str] | None = None
    """The ``[vectors] quantization`` values the store can index (``None``: any). memroute refuses another
    one when the store is built, naming the field; the store reads the value from the bound signature."""

    kind: ClassVar[str] = "vector-store"


@attrs.frozen(kw_only=True)
class ExtractorSpec(ComponentSpec[Extractor]):
    """A fact extractor. The factory returns an :class:`~memroute.interfaces.Extractor`."""

    kind: ClassVar[str] = "extractor"


@attrs.frozen(kw_only=True)
class RerankerSpec(ComponentSpec[Reranker]):
    """A reranker. The factory returns a :class:`~memroute.interfaces.Reranker`."""

    kind: ClassVar[str] = "reranker"
