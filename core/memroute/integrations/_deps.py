"""Importing a framework an integration needs, or saying which ``pip install`` brings it."""

from __future__ import annotations

import importlib
from types import ModuleType

from memroute.errors import MissingDependencyError

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """``module``, imported; :class:`~memroute.errors.MissingDependencyError` naming ``pip install
    'memroute[extra]'`` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(f"memroute's {extra} integration needs {module.split('.')[0]}: "
                                     f"pip install 'memroute[{extra}]'") from exc
