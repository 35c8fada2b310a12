"""Integrations: wrap third-party SDK clients so every call goes through memroute's public service (a surface,
like the CLI and the server: it calls only ``augment`` and ``observe``)."""

from __future__ import annotations

from memroute.integrations.wrappers import wrap_anthropic, wrap_create, wrap_openai

__all__ = ["wrap_anthropic", "wrap_create", "wrap_openai"]
