"""The real ``memroute serve`` for tests: uvicorn on a loopback socket, real HTTP, real keys.

Two ways to run it:

* **in a thread** (default, fast): the test process opens the service, builds the app with
  :func:`memroute.server.app.create_app` and runs ``uvicorn.Server`` in a thread on a socket pre-bound to
  ``127.0.0.1:0`` (no port race). ``server.mem`` is the service the server uses.
* **as a subprocess** (``workers=N``): ``python -m memroute.cli --config <toml> serve --workers N``, the way
  operators start it, for tests of several worker processes on one deployment.

Use it from a test (``tests/conftest.py`` registers this module as a plugin, so the ``memroute_server``
fixture is available in every test without an import)::

    def test_something(memroute_server):
        admin = memroute_server.client(memroute_server.admin)          # an httpx.Client with the admin key
        a = memroute_server.client(memroute_server.tenant_a)           # tenant "tenant-a" (read, write)
        r = a.post("/api/memory", json={"content": "I prefer tea", "key": "pref:tea"})
        assert r.status_code == 201
        key, secret = memroute_server.create_key("reader", scopes="read", tenant="tenant-a")

or build one with your own configuration (``from tests.servers.memroute_server import MemrouteServer``; any
``memroute.toml`` content as a dict, ``[server]`` included)::

    with MemrouteServer(tmp_path, config={"memory": {"enabled": True}}) as server:
        httpx.get(server.base_url + "/healthz")

``server.base_url`` has no trailing slash. ``admin`` / ``tenant_a`` / ``tenant_b`` are secrets (``mr_…``);
``keys["admin"]`` etc. hold the :class:`~memroute.deployment.keys.ApiKey` records. ``stop()`` (or leaving the ``with``)
shuts the server down gracefully and closes the service; a fixture never leaves a process or thread behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = ["MemrouteServer", "memroute_server", "write_toml"]

TENANT_A = "tenant-a"
TENANT_B = "tenant-b"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def write_toml(path: Path, config: Mapping[str, Any]) -> Path:
    """Write a (nested) mapping as TOML: top-level tables become ``[section]`` / ``[section.sub]``."""
    lines: list[str] = []

    def table(prefix: str, data: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in data.items() if not isinstance(v, Mapping)}
        tables = {k: v for k, v in data.items() if isinstance(v, Mapping)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in scalars.items())
        for name, sub in tables.items():
            table(f"{prefix}.{name}" if prefix else name, sub)

    table("", config)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class MemrouteServer:
    """A running ``memroute serve`` (see the module docstring)."""

    def __init__(self, tmp_path: Path, config: Mapping[str, Any] | None = None, *, workers: int = 0,
                 keys: bool = True) -> None:
        self.tmp_path = Path(tmp_path)
        self.config: dict[str, Any] = {"data_dir": str(self.tmp_path / "server-data"), **(config or {})}
        self.config.setdefault("manager", {}).setdefault("health_interval_s", 0)
        self.workers = workers
        self.make_keys = keys
        self.config_path = write_toml(self.tmp_path / "memroute-server.toml", self.config)
        self.base_url = ""
        self.mem: Any = None
        self.keys: dict[str, Any] = {}
        self.secrets: dict[str, str] = {}
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._key_service: Any = None

    # --- keys ----------------------------------------------------------------------------------------
    @property
    def admin(self) -> str:
        return self.secrets["admin"]

    @property
    def tenant_a(self) -> str:
        return self.secrets["tenant_a"]

    @property
    def tenant_b(self) -> str:
        return self.secrets["tenant_b"]

    def _keystore(self) -> Any:
        if self.mem is not None:
            return self.mem.keys
        if self._key_service is None:
            import memroute

            self._key_service = memroute.open(str(self.config_path))
        return self._key_service.keys

    def create_key(self, name: str, *, scopes: Any = "read,write", tenant: str | None = None,
                   end_users: bool = False) -> tuple[Any, str]:
        """A new key on this deployment: ``(ApiKey, secret)``; ``end_users`` makes an app key."""
        key, secret = self._keystore().create(name, scopes=scopes, tenant=tenant, end_users=end_users)
        return key, secret

    def _default_keys(self) -> None:
        for label, scopes, tenant in (("admin", "admin", None), ("tenant_a", "read,write", TENANT_A),
                                      ("tenant_b", "read,write", TENANT_B)):
            key, secret = self.create_key(label, scopes=scopes, tenant=tenant)
            self.keys[label], self.secrets[label] = key, secret

    def client(self, secret: str | None = None, **kwargs: Any) -> httpx.Client:
        """An ``httpx.Client`` on ``base_url`` sending ``secret`` as the bearer key (none when None)."""
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=kwargs.pop("timeout", 30), **kwargs)

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> MemrouteServer:
        if self.workers:
            self._start_process()
        else:
            self._start_thread()
        if self.make_keys:
            self._default_keys()
        return self

    def _start_thread(self) -> None:
        import uvicorn

        import memroute
        from memroute.server.app import create_app

        self.mem = memroute.open(str(self.config_path))
        app = create_app(self.mem, settings=self.mem.settings.server, close_service=True)
        self.app = app  # in a thread only: tests may look at (or replace) its state
        # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so; with proto 0 every response
        # whose headers and body go out in two writes waits ~40 ms for a delayed ACK (Nagle).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self._socket = sock
        port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="memroute-test-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("memroute test server did not start")
            time.sleep(0.01)

    def _start_process(self) -> None:
        with socket.socket() as probe:  # a free port: uvicorn's workers bind it themselves
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "MEMROUTE_CONFIG": str(self.config_path)}
        self._log = (self.tmp_path / "memroute-serve.log").open("wb")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "memroute.cli", "--config", str(self.config_path), "serve", "--port", str(port),
             "--workers", str(self.workers), "--log-level", "warning"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                if httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"memroute serve did not start: {self.log_text()}")

    def log_text(self) -> str:
        path = self.tmp_path / "memroute-serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self.mem is not None:
            self.mem.close()  # idempotent: the app's shutdown closed it already
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)
            self._process = None
            self._log.close()
        if self._key_service is not None:
            self._key_service.close()
            self._key_service = None

    def __enter__(self) -> MemrouteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def memroute_server(tmp_path: Path) -> Iterator[MemrouteServer]:
    """A started in-thread server with an ``admin`` key and two tenant keys (``tenant-a``, ``tenant-b``)."""
    server = MemrouteServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()
