"""memroute's testing kit: conformance suites a plugin's tests subclass, and pytest fixtures.

- :class:`BackendContract` — subclass it and override the ``backend`` fixture to yield a fresh backend.
- :class:`EmbeddingSourceContract`, :class:`VectorStoreContract` — the same for those components.
- Fixtures (registered as a pytest plugin): ``plugin_manager``, ``register_plugin``, ``fake_embedding``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BackendContract", "EmbeddingSourceContract", "HashingEmbeddingSource", "VectorStoreContract"]


def __getattr__(name: str) -> Any:
    # Lazy: importing memroute.testing must not import pytest until a contract is used.
    if name == "BackendContract":
        from memroute.testing.backend import BackendContract

        return BackendContract
    if name == "EmbeddingSourceContract":
        from memroute.testing.embedding import EmbeddingSourceContract

        return EmbeddingSourceContract
    if name == "VectorStoreContract":
        from memroute.testing.vectors import VectorStoreContract

        return VectorStoreContract
    if name == "HashingEmbeddingSource":
        from memroute.testing.fakes import HashingEmbeddingSource

        return HashingEmbeddingSource
    raise AttributeError(name)
