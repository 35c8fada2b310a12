"""The listening socket of ``memroute serve --workers N`` (imported only there: it needs uvicorn).

asyncio sets ``TCP_NODELAY`` only on accepted sockets whose listening socket says it is TCP
(``proto=IPPROTO_TCP``); uvicorn makes its multi-worker socket with proto 0, so every response written in two
parts (headers, then body) waited for the client's delayed ACK: about 40 ms a request with ``--workers 2``
against about 3 ms with one worker (one keep-alive writer on loopback, ``memroute bench --http``). The class
lives in its own module because the worker processes are spawned and unpickle the configuration by name.
"""

from __future__ import annotations

import logging
import socket

import click
import uvicorn

__all__ = ["TcpConfig"]


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
