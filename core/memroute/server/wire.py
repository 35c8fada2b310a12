"""Turning the service's typed results into JSON for the wire (one place, so every route agrees)."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["jsonable"]


def jsonable(value: Any) -> Any:
    """``value`` as JSON-able data: memroute's converter for attrs reports, plain data unchanged."""
    try:
        from memroute.config.serialization import to_jsonable  # the one converter (issue 8)
    except ImportError:  # until it lands
        from memroute.config.serialization import converter

        return converter.unstructure(value) if attrs.has(type(value)) else value
    return to_jsonable(value)
