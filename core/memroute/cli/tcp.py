"""The listening socket of ``memroute serve --workers N`` and the HTTP protocol of ``memroute serve`` (imported only
there: they need uvicorn).

asyncio sets ``TCP_NODELAY`` only on accepted sockets whose listening socket says it is TCP
(``proto=IPPROTO_TCP``); uvicorn makes its multi-worker socket with proto 0, so every response written in two
parts (headers, then body) waited for the client's delayed ACK: about 40 ms a request with ``--workers 2``
against about 3 ms with one worker (one keep-alive writer on loopback, ``memroute bench --http``). The class
lives in its own module because the worker processes are spawned and unpickle the configuration by name.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from typing import Any

import click
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HeaderTimeoutProtocol", "TcpConfig", "http_protocol"]


class TcpConfig(uvicorn.Config):
    """``uvicorn.Config`` whose TCP listening socket is made with ``proto=IPPROTO_TCP`` (so no Nagle delay)."""

    def bind_socket(self) -> socket.socket:
        if self.uds is not None or self.fd is not None:
            return super().bind_socket()
        family = socket.AF_INET6 if self.host and ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise click.ClickException(f"cannot listen on {self.host}:{self.port}: {exc}") from None
        sock.set_inheritable(True)
        scheme = "https" if self.is_ssl else "http"
        logging.getLogger("uvicorn.error").info("Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", scheme,
                                                self.host, sock.getsockname()[1])
        return sock


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with a limit on how long a client may take to send a request's headers.

    uvicorn times out an idle keep-alive connection, but once the first byte of a request has arrived it waits
    for the rest of the headers forever: 500 connections trickling headers held the server for as long as the
    clients liked. Here a connection is closed when a request's headers (or a new connection's first request)
    are not complete within ``header_timeout_s``. The body has a limit of its own (``[server] body_timeout_s``,
    in the app's guard)."""

    def __init__(self, *args: Any, header_timeout_s: float = 10.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        serving = self.cycle is not None and not self.cycle.response_complete
        if not serving and not self.transport.is_closing():
            self.transport.close()


def http_protocol(header_timeout_s: float) -> Any:
    """The ``http`` option for uvicorn: :class:`HeaderTimeoutProtocol` with ``header_timeout_s`` (picklable, for
    the spawned workers)."""
    return functools.partial(HeaderTimeoutProtocol, header_timeout_s=header_timeout_s)
