"""memroute's memory proxy — the real ``memroute serve`` app on a loopback socket (``MemrouteServer``) — in front of
the fake model server (``tests/servers/fake_llm.py``), for the proxy's tests and its benchmark.

``proxy_stack(tmp_path)`` starts the fake upstream, points ``[proxy.openai]`` / ``[proxy.anthropic]`` at it (with
``allow_private = true``: it is on loopback) and starts the server with memory enabled. Keys come from the
deployment's real key store: ``alice`` (tenant ``tenant-a``) and ``bob`` (tenant ``tenant-b``) with read and write,
``reader`` (tenant ``tenant-a``, read only) and ``admin``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from memroute.server.proxy import MemoryProxy
from tests.servers.fake_llm import FakeLLMServer, fake_llm_server
from tests.servers.memroute_server import TENANT_A, TENANT_B, MemrouteServer

__all__ = ["ProxyStack", "proxy_stack"]


@attrs.define
class ProxyStack:
    server: MemrouteServer
    upstream: FakeLLMServer
    keys: dict[str, str]
    """Secrets by name: ``alice``, ``bob``, ``reader``, ``admin``."""
    tenants: dict[str, str] = attrs.field(factory=lambda: {"alice": TENANT_A, "bob": TENANT_B})

    @property
    def mem(self) -> Any:
        return self.server.mem

    @property
    def url(self) -> str:
        """memroute's base URL (``http://127.0.0.1:PORT``): the Anthropic SDK's ``base_url``."""
        return self.server.base_url

    @property
    def openai_url(self) -> str:
        """The OpenAI SDK's ``base_url``."""
        return self.server.base_url + "/v1"

    @property
    def proxy(self) -> MemoryProxy:
        proxy: MemoryProxy = self.server._server.config.app.state.proxy
        return proxy


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _without_none(v) if isinstance(v, dict) else v for k, v in data.items() if v is not None}


@contextmanager
def proxy_stack(tmp_path: Path, *, memory: dict[str, Any] | None = None, embedding: str = "none",
                upstream_options: dict[str, Any] | None = None, **config: Any) -> Iterator[ProxyStack]:
    """``config``: more ``memroute.toml`` tables (``extraction``, ``backends``, ``proxy`` entries override the
    defaults above; a ``None`` value removes an option)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    # The proxy's tests count memories learned with the reference's `regex` extractor and facts only; a test of
    # the default learning (`everyday`, messages kept) passes its own `extraction` table (tests/integration/
    # test_learning_proxy.py).
    config["extraction"] = {"extractors": ["regex"], "keep_turns": "none", **config.get("extraction", {})}
    with fake_llm_server() as upstream:
        options = {"allow_private": True, "api_key": "sk-upstream-secret", **(upstream_options or {})}
        proxy = config.pop("proxy", {})
        settings = _without_none({
            "memory": {"enabled": True, **(memory or {})},
            "embedding": {"source": embedding},
            "proxy": {"openai": {"base_url": upstream.base_url + "/v1", **options, **proxy.get("openai", {})},
                      "anthropic": {"base_url": upstream.base_url, **options, **proxy.get("anthropic", {})},
                      **{k: v for k, v in proxy.items() if k not in ("openai", "anthropic")}},
            **config,
        })
        with MemrouteServer(tmp_path, config=settings) as server:
            _key, reader = server.create_key("reader", scopes="read", tenant=TENANT_A)
            keys = {"alice": server.tenant_a, "bob": server.tenant_b, "reader": reader, "admin": server.admin}
            yield ProxyStack(server=server, upstream=upstream, keys=keys)
            upstream.release()
