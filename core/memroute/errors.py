"""The one error tree of memroute.

Every error memroute raises derives from :class:`MemrouteError`. Third-party exceptions never leak out of
a public call: they are wrapped (``raise BackendError(...) from exc``) so callers catch one family.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AuthenticationError",
    "BackendError",
    "BackendUnavailableError",
    "ConfigError",
    "ConflictError",
    "DuplicatePluginError",
    "EmbeddingError",
    "ExtractionError",
    "FieldProblem",
    "MemrouteError",
    "MissingDependencyError",
    "NotFoundError",
    "PermissionDeniedError",
    "PluginError",
    "QuotaExceededError",
    "PluginLoadError",
    "RerankError",
    "UnknownComponentError",
    "ValidationError",
    "VectorStoreError",
]


class MemrouteError(Exception):
    """Root of every error memroute raises."""


FieldProblem = tuple[str, str]
"""``(field path, what is wrong with it)``: one entry of a field-level error."""


class _FieldErrors(MemrouteError):
    """An error that can name the fields at fault, for surfaces that report them one by one."""

    def __init__(self, message: str, problems: Sequence[FieldProblem] = ()) -> None:
        self.problems: tuple[FieldProblem, ...] = tuple(problems)
        if self.problems and message.endswith(":"):
            message = message + " " + "; ".join(f"{path}: {why}" for path, why in self.problems)
        super().__init__(message)


class ConfigError(_FieldErrors):
    """Configuration that cannot be used: the message names the field path and the problem."""


class ValidationError(_FieldErrors, ValueError):
    """Bad input to a public call (an empty api_key_id, an unknown memory type, ...)."""


class PluginError(MemrouteError):
    """Something about a plugin is wrong."""


class PluginLoadError(PluginError):
    """A plugin failed to import, register, or declared an unsupported plugin API version."""

    def __init__(self, message: str, *, entry_point: str | None = None, distribution: str | None = None):
        self.entry_point = entry_point
        self.distribution = distribution
        super().__init__(message)


class DuplicatePluginError(PluginError):
    """Two plugins provide a component of the same kind under the same name."""


class UnknownComponentError(PluginError, ConfigError):
    """Configuration names a component (``type = "..."``) that no loaded plugin provides."""


class BackendError(MemrouteError):
    """A storage backend failed to carry out an operation."""

    def __init__(self, message: str, *, backend: str | None = None) -> None:
        self.backend = backend
        super().__init__(message)


class BackendUnavailableError(BackendError):
    """The backend cannot be reached or used; the message says how to fix it."""


class NotFoundError(BackendError):
    """The addressed memory (or remote object) does not exist."""


class ConflictError(BackendError):
    """The operation conflicts with the stored state (for example a schema that does not match)."""


class EmbeddingError(MemrouteError):
    """An embedding source could not produce vectors.

    ``reason`` is one of ``no_key``, ``model_load_failed``, ``request_failed``, ``rate_limited``,
    ``timeout``, ``blocked`` or ``unknown`` (the reference system's vocabulary, plus ``blocked`` for the
    SSRF guard).
    """

    def __init__(self, message: str, *, reason: str = "unknown", source: str | None = None) -> None:
        self.reason = reason
        self.source = source
        super().__init__(message)


class RerankError(MemrouteError):
    """A reranker could not re-score the candidates (retrieval keeps the fused order and says so).

    ``reason`` is one of ``no_key``, ``request_failed``, ``rate_limited``, ``timeout``, ``blocked`` or
    ``unknown``, as for :class:`EmbeddingError`.
    """

    def __init__(self, message: str, *, reason: str = "unknown") -> None:
        self.reason = reason
        super().__init__(message)


class ExtractionError(MemrouteError):
    """A model-backed extractor could not get a usable answer (the turn keeps its offline facts).

    ``reason`` is one of ``timeout``, ``rate_limited``, ``server_error``, ``request_failed``, ``no_key``,
    ``blocked``, ``invalid_response`` or ``unknown``.
    """

    def __init__(self, message: str, *, reason: str = "unknown") -> None:
        self.reason = reason
        super().__init__(message)


class VectorStoreError(MemrouteError):
    """A vector store failed to carry out an operation."""


class AuthenticationError(MemrouteError):
    """No credential, an unknown one, or a revoked one (HTTP 401). The message never echoes the secret."""


class PermissionDeniedError(MemrouteError):
    """The caller is authenticated but may not do this: a missing scope, or another tenant named (HTTP 403)."""


class MissingDependencyError(ConfigError, ImportError):
    """An optional part of memroute was used without the package it needs; the message names the ``pip install``
    that fixes it (an ``ImportError`` too, since it is raised where that import failed)."""


class QuotaExceededError(PermissionDeniedError):
    """A write would take a tenant past its storage quota (``[limits] max_memories_per_tenant`` /
    ``max_bytes_per_tenant``); nothing was written (HTTP 403). ``problems`` names the quota."""

    def __init__(self, message: str, problems: Sequence[FieldProblem] = ()) -> None:
        self.problems: tuple[FieldProblem, ...] = tuple(problems)
        super().__init__(message)
