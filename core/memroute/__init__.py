"""memroute: persistent, per-API-key conversational memory for LLM applications.

Quick start::

    import memroute

    with memroute.open() as mem:
        mem.add(api_key_id="user-1", content="I prefer TypeScript")
        for hit in mem.search("which language?", api_key_id="user-1"):
            print(hit.memory.content, hit.score)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memroute.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    ConflictError,
    DuplicatePluginError,
    EmbeddingError,
    MemrouteError,
    NotFoundError,
    PluginError,
    PluginLoadError,
    UnknownComponentError,
    ValidationError,
    VectorStoreError,
)
from memroute.hookspecs import hookimpl
from memroute.interfaces import (
    BackendCapabilities,
    ComponentContext,
    EmbeddingSource,
    Extractor,
    MemoryBackend,
    Reranker,
    RerankResult,
    VectorStore,
)
from memroute.models import (
    UNSET,
    HealthResult,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    Provenance,
    SearchHit,
    SearchQuery,
    SearchResult,
)
from memroute.specs import (
    PLUGIN_API_VERSION,
    BackendSpec,
    EmbeddingSourceSpec,
    ExtractorSpec,
    RerankerSpec,
    VectorStoreSpec,
)
from memroute.tenancy import end_user_tenant, split_end_user

if TYPE_CHECKING:
    from memroute.aio import _Opening
    from memroute.service import Memroute

__version__ = "0.1.0"

__all__ = [
    "PLUGIN_API_VERSION",
    "UNSET",
    "BackendCapabilities",
    "BackendError",
    "BackendSpec",
    "BackendUnavailableError",
    "ComponentContext",
    "ConfigError",
    "ConflictError",
    "DuplicatePluginError",
    "EmbeddingError",
    "EmbeddingSource",
    "EmbeddingSourceSpec",
    "Extractor",
    "ExtractorSpec",
    "HealthResult",
    "ListFilter",
    "ListPage",
    "Memory",
    "MemoryBackend",
    "MemoryPatch",
    "MemoryType",
    "MemrouteError",
    "NewMemory",
    "NotFoundError",
    "PluginError",
    "PluginLoadError",
    "Provenance",
    "RerankResult",
    "Reranker",
    "RerankerSpec",
    "SearchHit",
    "SearchQuery",
    "SearchResult",
    "UnknownComponentError",
    "ValidationError",
    "VectorStore",
    "VectorStoreError",
    "VectorStoreSpec",
    "__version__",
    "end_user_tenant",
    "hookimpl",
    "open",
    "open_async",
    "split_end_user",
]


def open(config: Any = None, **overrides: Any) -> Memroute:
    """Open memroute: ``config`` is a TOML path, a mapping, a settings object, or ``None`` (``--config`` /
    ``MEMROUTE_CONFIG`` / ``./memroute.toml`` / defaults). Keyword overrides win over file and environment.

    Returns the service object (a context manager); see :class:`memroute.service.Memroute`.
    """
    from memroute.service import Memroute

    return Memroute.open(config, **overrides)


def open_async(config: Any = None, *, max_workers: int | None = None, gil_handoff: float | None = None,
               **overrides: Any) -> _Opening:
    """Open memroute for asyncio: ``mem = await memroute.open_async(...)`` or ``async with
    memroute.open_async(...) as mem:``. The arguments of :func:`open`, plus ``max_workers`` (the size of the
    dedicated thread pool the calls run in; ``None``: sized from what was opened, small when every component
    works in this process) and ``gil_handoff``. See :class:`memroute.aio.AsyncMemroute` and docs/python-api.md.
    """
    from memroute.aio import open_async as _open_async

    return _open_async(config, max_workers=max_workers, gil_handoff=gil_handoff, **overrides)
