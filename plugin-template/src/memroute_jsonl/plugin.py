"""The plugin: memroute finds this module through the ``memroute`` entry point in ``pyproject.toml`` and
calls its hook implementations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import memroute
from memroute.interfaces import ComponentContext
from memroute.specs import BackendSpec

from memroute_jsonl.backend import JsonlBackend, JsonlSettings


def _factory(settings: JsonlSettings, context: ComponentContext) -> JsonlBackend:
    # Options come already validated into the settings class; the context says where memroute keeps data.
    if settings.path:
        path = Path(settings.path).expanduser()
    else:
        path = context.data_dir / "jsonl" / f"{context.instance_name}.jsonl"
    return JsonlBackend(context.instance_name, path, settings)


@memroute.hookimpl
def memroute_backends() -> Iterator[BackendSpec]:
    """Offer the ``jsonl`` backend: ``[backends.NAME]`` with ``type = "jsonl"`` selects it."""
    yield BackendSpec(
        name="jsonl",
        factory=_factory,
        settings_class=JsonlSettings,
        description="Memories in a JSON-lines file (example third-party backend).",
    )
