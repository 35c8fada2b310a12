"""Whether a request gets memory at all: the settings gate and the per-request opt-out header."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = [
    "OPT_OUT_HEADERS",
    "OPT_OUT_VALUES",
    "MESSAGE_TIME_HEADERS",
    "SESSION_HEADERS",
    "memory_enabled",
    "message_time_from_headers",
    "opted_out",
    "session_from_headers",
    "should_use_memory",
]

OPT_OUT_HEADERS: Final = ("x-memroute-no-memory", "x-omniroute-no-memory")
"""Headers that turn memory off for one request (the second is the reference system's name)."""
OPT_OUT_VALUES: Final = frozenset({"true", "1", "yes"})
"""Values that mean "opt out", compared trimmed and case-insensitively (reference §6.3)."""
SESSION_HEADERS: Final = ("x-memroute-session-id", "x-omniroute-session-id")
"""Headers that name the conversation's session when the caller passes no ``session_id``."""
MESSAGE_TIME_HEADERS: Final = ("x-memroute-message-time",)
"""The header that says when the request's last user message was said, when ``observe`` gets no ``said_at``
(ISO 8601 with a time zone, or a date; validated by :func:`memroute.pipeline.turns.parse_said_at`)."""


def _header_items(headers: Any) -> Iterable[tuple[Any, Any]]:
    if headers is None:
        return ()
    if isinstance(headers, Mapping):
        return headers.items()
    items = getattr(headers, "items", None)  # requests' CaseInsensitiveDict, http.client messages
    if callable(items):
        return items()
    return headers  # an iterable of (name, value) pairs


def opted_out(headers: Any) -> bool:
    """True when ``headers`` (a mapping, or (name, value) pairs; names case-insensitive) carry an opt-out
    header whose value is ``true``, ``1`` or ``yes``."""
    try:
        for name, value in _header_items(headers):
            if not isinstance(name, str) or name.strip().lower() not in OPT_OUT_HEADERS:
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, (str, bytes)) and _truthy(v) for v in values):
                return True
    except (TypeError, ValueError):
        return False  # headers we cannot read carry no opt-out
    return False


def session_from_headers(headers: Any) -> str | None:
    """The session id a session header carries (trimmed; ``None`` when absent, empty or over 256 characters)."""
    try:
        for name, value in _header_items(headers):
            if isinstance(name, str) and name.strip().lower() in SESSION_HEADERS:
                text = value.decode("latin-1") if isinstance(value, bytes) else value
                if isinstance(text, str) and text.strip() and len(text.strip()) <= 256:
                    return text.strip()
    except (TypeError, ValueError):
        return None
    return None


def message_time_from_headers(headers: Any) -> str | None:
    """The value of an ``x-memroute-message-time`` header (trimmed), or ``None`` when absent or empty."""
    try:
        for name, value in _header_items(headers):
            if isinstance(name, str) and name.strip().lower() in MESSAGE_TIME_HEADERS:
                text = value.decode("latin-1") if isinstance(value, bytes) else value
                if isinstance(text, str) and text.strip():
                    return text.strip()
    except (TypeError, ValueError):
        return None
    return None


def _truthy(value: str | bytes) -> bool:
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return text.strip().lower() in OPT_OUT_VALUES


def memory_enabled(settings: Any) -> bool:
    """The settings gate: memory is on and its token budget is positive (reference §7.2)."""
    return bool(getattr(settings, "enabled", False)) and int(getattr(settings, "max_tokens", 0) or 0) > 0


def should_use_memory(settings: Any, headers: Any = None) -> bool:
    """Both gates: settings on, and the request did not opt out."""
    return memory_enabled(settings) and not opted_out(headers)
