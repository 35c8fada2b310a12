"""The configured size limits of one memory (``[limits]``), checked before any backend is called.

The models carry fixed ceilings (1,000,000 characters of content, 1 MiB and 32 levels of metadata) that no
configuration can raise; :class:`InputLimits` applies the deployment's own, lower, limits on top. A 10 MB
metadata string used to be accepted and copied into every backend and the outbox.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from memroute.config.settings import LimitsSettings
from memroute.errors import ValidationError

__all__ = ["InputLimits", "json_depth"]


def json_depth(value: object) -> int:
    """How deeply a JSON value nests (a flat object is 1, a scalar 0), counted without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item)
    return deepest


@attrs.frozen
class InputLimits:
    """Checks content and metadata against ``[limits]``; every problem is a :class:`ValidationError`."""

    settings: LimitsSettings = attrs.field(factory=LimitsSettings)

    def check(self, *, content: Any = None, metadata: Any = None, where: str = "") -> None:
        """Check the fields given (``None`` = not part of this write). ``where`` prefixes the field names
        (``"line 12: "`` for an import)."""
        limits = self.settings
        if isinstance(content, str) and len(content) > limits.max_content_chars:
            raise ValidationError(
                f"{where}content: {len(content)} characters, more than the limit of {limits.max_content_chars} "
                "([limits] max_content_chars)", [(f"{where}content", "too long")],
            )
        if isinstance(metadata, Mapping) and metadata:
            depth = json_depth(metadata)
            if depth > limits.max_metadata_depth:
                raise ValidationError(
                    f"{where}metadata: nested {depth} levels deep, more than the limit of "
                    f"{limits.max_metadata_depth} ([limits] max_metadata_depth)", [(f"{where}metadata", "too deep")],
                )
            size = len(json.dumps(metadata, ensure_ascii=False).encode("utf-8"))
            if size > limits.max_metadata_bytes:
                raise ValidationError(
                    f"{where}metadata: {size} bytes as JSON, more than the limit of {limits.max_metadata_bytes} "
                    "([limits] max_metadata_bytes)", [(f"{where}metadata", "too large")],
                )
