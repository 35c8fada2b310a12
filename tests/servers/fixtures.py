"""pytest fixtures for the HTTP backend's tests: the loopback memory server and a simulated network.

Import them into a test module with ``from tests.servers.fixtures import memory_server, fake_network``.

The simulated network exists for the SSRF cases, which must show the guard *allowing* public hosts
(``api.example.com``, ``93.184.216.34``) without the test ever sending a packet off this machine:

* **DNS**: :meth:`FakeNetwork.resolve` is handed to the backend as the guard's resolver, so the guard does its
  own resolution and checks the addresses it gets, as it does in production.
* **Routing**: the guarded session connects to the address the guard approved (it pins connections). At the
  socket layer (``urllib3.util.connection.create_connection``, below requests and below the guard) the
  network translates the fake public addresses to the loopback server, like a NAT would; a connection to any
  other non-loopback destination is refused, so a test can never reach the internet or a private range.

Nothing in requests or in the guard is replaced: a blocked address is blocked by the real guard before a
connection is attempted, which :attr:`FakeNetwork.connections` lets tests assert.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.servers.memory_http_server import MemoryHttpServer

__all__ = ["PUBLIC_TEST_IP", "FakeNetwork", "fake_network", "memory_server", "root_server"]

PUBLIC_TEST_IP = "93.184.216.34"
"""A public address the fake DNS hands out; connections to it are translated to the loopback server."""


class FakeNetwork:
    """A fake DNS table plus a NAT table in front of the loopback server (see the module docstring)."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.dns: dict[str, list[str]] = {
            "memory.test": [PUBLIC_TEST_IP],
            "api.example.com": [PUBLIC_TEST_IP],
        }
        self.nat: dict[tuple[str, int], tuple[str, int]] = {
            (PUBLIC_TEST_IP, port): ("127.0.0.1", server_port) for port in (80, 8080)
        }
        self.connections: list[tuple[str, int]] = []
        """Every destination a socket was opened to (before translation)."""
        self.resolutions: list[str] = []

    def resolve(self, host: str, port: int) -> Sequence[str]:
        """The resolver handed to the guard: the fake DNS table, nothing else."""
        self.resolutions.append(host)
        if host in self.dns:
            return list(self.dns[host])
        raise socket.gaierror(socket.EAI_NONAME, f"fake DNS: no such host {host}")

    def route(self, host: str, port: int) -> tuple[str, int]:
        self.connections.append((host, port))
        if (host, port) in self.nat:
            return self.nat[(host, port)]
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return host, port
        raise ConnectionRefusedError(111, f"fake network: no route to {host}:{port} (tests stay on loopback)")


@pytest.fixture
def memory_server() -> Iterator[MemoryHttpServer]:
    """The protocol server under the prefix ``/v1``: ``memory_server.url`` is the base URL."""
    server = MemoryHttpServer(prefix="/v1").start()
    yield server
    server.stop()


@pytest.fixture
def root_server() -> Iterator[MemoryHttpServer]:
    """The protocol server at the root path (the reference's fixture: ``http://memory.test:8080``)."""
    server = MemoryHttpServer(prefix="").start()
    yield server
    server.stop()


@pytest.fixture
def fake_network(root_server: MemoryHttpServer, monkeypatch: pytest.MonkeyPatch) -> FakeNetwork:
    """A :class:`FakeNetwork` routing the fake public hosts to ``root_server``."""
    import urllib3.util.connection

    network = FakeNetwork(root_server.port)
    real = urllib3.util.connection.create_connection

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        return real(network.route(*address), *args, **kwargs)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", create_connection)
    return network
