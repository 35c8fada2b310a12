"""memroute's memory proxy on a real loopback socket in front of the fake model server (tests and the bench).

``proxy_stack(tmp_path)`` opens a service, starts the fake upstream (``tests/servers/fake_llm.py``) and serves the
proxy routes with uvicorn on ``127.0.0.1`` (a free port), pointing ``[proxy.openai]`` / ``[proxy.anthropic]`` at
the fake with ``allow_private = true``. Two keys are issued (``alice``, ``bob``: two tenants) and a read-only one.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import uvicorn
from fastapi import FastAPI

import memroute
from memroute.server.proxy import MemoryProxy, create_proxy_router
from memroute.server.proxy.router import AuthenticationError
from tests.servers.fake_llm import FakeLLMServer, fake_llm_server

__all__ = ["ProxyStack", "proxy_stack", "serve_app"]


@attrs.frozen
class _Principal:
    tenant: str
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


@attrs.define
class ProxyStack:
    mem: Any
    upstream: FakeLLMServer
    url: str
    """memroute's base URL (``http://127.0.0.1:PORT``)."""
    proxy: MemoryProxy
    keys: dict[str, str]
    """Secrets by name: ``alice`` and ``bob`` (two tenants), ``reader`` (alice's tenant, read scope only)."""
    tenants: dict[str, str]

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yields its base URL."""
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so (proto 0 gets Nagle + delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def proxy_stack(tmp_path: Path, *, memory: dict[str, Any] | None = None, embedding: str = "none",
                upstream_options: dict[str, Any] | None = None, **overrides: Any) -> Iterator[ProxyStack]:
    with fake_llm_server() as upstream:
        options = {"allow_private": True, "api_key": "sk-upstream-secret", **(upstream_options or {})}
        proxy = overrides.pop("proxy", {})
        mem = memroute.open(
            data_dir=str(tmp_path / "data"), memory={"enabled": True, **(memory or {})},
            embedding={"source": embedding},
            proxy={"openai": {"base_url": upstream.base_url + "/v1", **options, **proxy.get("openai", {})},
                   "anthropic": {"base_url": upstream.base_url, **options, **proxy.get("anthropic", {})}},
            **overrides,
        )
        keys = {"alice": "mr_alice_secret", "bob": "mr_bob_secret", "reader": "mr_reader_secret"}
        principals = {
            keys["alice"]: _Principal("tenant-alice", frozenset({"read", "write"})),
            keys["bob"]: _Principal("tenant-bob", frozenset({"read", "write"})),
            keys["reader"]: _Principal("tenant-alice", frozenset({"read"})),
        }

        def authenticate(headers: Any) -> _Principal:
            value = headers.get("authorization")
            token = value.partition(" ")[2].strip() if value else headers.get("x-api-key")
            if token not in principals:
                raise AuthenticationError("invalid API key")
            return principals[token]

        router = create_proxy_router(mem, authenticate=authenticate)
        app = FastAPI()
        app.include_router(router)
        try:
            with serve_app(app) as url:
                yield ProxyStack(mem=mem, upstream=upstream, url=url, proxy=router.proxy, keys=keys,  # type: ignore[attr-defined]
                                 tenants={"alice": "tenant-alice", "bob": "tenant-bob"})
        finally:
            mem.close()
