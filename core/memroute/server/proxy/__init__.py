"""The OpenAI- and Anthropic-compatible memory proxy ``memroute serve`` hosts under ``/v1`` (``docs/proxy.md``)."""

from __future__ import annotations

from memroute.server.proxy.router import MemoryProxy, ProxyStats, create_proxy_router

__all__ = ["MemoryProxy", "ProxyStats", "create_proxy_router"]
