"""pytest fixtures memroute ships (registered through the ``pytest11`` entry point).

- ``plugin_manager``: a fresh plugin manager with every installed entry point loaded.
- ``register_plugin``: ``register_plugin(obj, name=None)`` adds a plugin to that manager for one test.
- ``fake_embedding``: a :class:`~memroute.testing.fakes.HashingEmbeddingSource` (64-d).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memroute.plugins import MemroutePluginManager, make_plugin_manager
from memroute.testing.fakes import HashingEmbeddingSource


@pytest.fixture
def plugin_manager() -> MemroutePluginManager:
    return make_plugin_manager()


@pytest.fixture
def register_plugin(plugin_manager: MemroutePluginManager) -> Iterator[Callable[..., Any]]:
    added: list[str] = []

    def register(plugin: object, name: str | None = None) -> object:
        plugin_name = name or getattr(plugin, "__name__", None) or f"test-plugin-{len(added)}"
        plugin_manager.add_plugin(plugin, name=plugin_name)
        added.append(plugin_name)
        return plugin

    yield register
    for name in added:
        plugin_manager.remove_plugin(name)


@pytest.fixture
def fake_embedding() -> HashingEmbeddingSource:
    return HashingEmbeddingSource(dimensions=64)
