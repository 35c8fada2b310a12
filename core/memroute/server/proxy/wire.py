"""A small pooled HTTP/1.1 client on asyncio streams: the proxy's inner transport to a model API.

httpx + httpcore cost the proxy ~0.5-0.7 ms of CPU per upstream request on the shared 2-core machine (request
and response models, anyio streams, h11, a ``select()`` per pooled connection reuse), against ~0.05 ms for the
same request written and read on an asyncio stream (docs/performance.md, "Round six, second part"). The proxy
sends one kind of request to a handful of origins, so :class:`LeanTransport` does only that, as an
``httpx.AsyncBaseTransport``: the router keeps building ``httpx.Request`` objects and reading
``httpx.Response`` objects (status, headers, ``aiter_bytes`` with content decoding, ``aclose``), and the SSRF
guard (:class:`~memroute.server.proxy.upstream.GuardedTransport`) still pins every connection.

- One write per request (head and body together); the response head, then the body as it arrives: a
  ``Content-Length`` body or a chunked one is yielded piece by piece (a streamed reply is never buffered), a
  body without either is read to the end of the connection.
- Keep-alive: a connection whose response was read to its end goes back to its origin's idle list (at most
  :data:`MAX_IDLE_PER_ORIGIN`) and is reused for up to :data:`KEEPALIVE_S`; one the peer has closed is seen
  by asyncio's reader (EOF) without a system call. A response closed before its end (a client that left
  mid-stream) closes its connection, which tells the upstream to stop.
- TLS for ``https`` upstreams with httpx's default verification context; SNI and the certificate check use the
  ``sni_hostname`` extension the guard sets (the name), while the socket goes to the approved address.
- Timeouts from the request's ``timeout`` extension (httpx's ``connect`` / ``read`` / ``write``), raised as
  httpx's own exceptions (``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``, ``ConnectError``,
  ``RemoteProtocolError``), so everything that handles them is unchanged.
- No cookies, no redirects, no retries, no proxies from the environment, HTTP/1.1 only.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Final, TypeVar

import httpx

__all__ = ["KEEPALIVE_S", "MAX_IDLE_PER_ORIGIN", "LeanTransport"]

KEEPALIVE_S: Final = 5.0
"""How long an idle connection is reused (httpcore's default keep-alive expiry)."""
MAX_IDLE_PER_ORIGIN: Final = 50
"""Idle connections kept per origin; more are closed when they come back."""
_HEAD_LIMIT: Final = 64 * 1024
"""The longest response head (status line and headers) accepted."""
_PIECE: Final = 64 * 1024

_T = TypeVar("_T")
_Origin = tuple[str, str, int, str]  # scheme, connect host, port, TLS server name


async def _within(awaitable: Awaitable[_T], seconds: float | None) -> _T:
    """``awaitable`` with a timeout (``asyncio.TimeoutError`` when it passes); no extra task on 3.11+."""
    if seconds is None:
        return await awaitable
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)  # pragma: no cover - Python 3.10


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        """Whether an idle connection can carry the next request: open, recent, and nothing arrived on it since
        its last response (a peer that wrote and closed, or sent something unasked)."""
        reader = self.reader
        return (not reader.at_eof() and not getattr(reader, "_buffer", b"") and not self.writer.is_closing()
                and now - self.idle_since < KEEPALIVE_S)

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


class _Body(httpx.AsyncByteStream):
    """One response's body, read from its connection as the caller iterates."""

    def __init__(self, transport: LeanTransport, origin: _Origin, connection: _Connection, request: httpx.Request,
                 *, length: int | None, chunked: bool, reusable: bool, read_timeout: float | None) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = connection
        self._request = request
        self._length = length
        self._chunked = chunked
        self._reusable = reusable
        self._timeout = read_timeout
        self._done = length == 0 and not chunked

    async def _read(self, call: Awaitable[bytes]) -> bytes:
        try:
            return await _within(call, self._timeout)
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout("the upstream stopped sending", request=self._request) from None
        except asyncio.IncompleteReadError:
            raise httpx.RemoteProtocolError("the upstream closed the connection mid-body",
                                            request=self._request) from None
        except (asyncio.LimitOverrunError, ValueError):
            raise httpx.RemoteProtocolError("a malformed chunk from the upstream", request=self._request) from None
        except OSError as exc:
            raise httpx.ReadError(f"reading from the upstream failed: {exc}", request=self._request) from None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None or self._done:
            return
        reader = connection.reader
        if self._chunked:
            while True:
                line = await self._read(reader.readuntil(b"\r\n"))
                size = int(line.split(b";", 1)[0].strip() or b"x", 16)
                if size == 0:
                    while (await self._read(reader.readuntil(b"\r\n"))) != b"\r\n":
                        pass  # trailers
                    break
                while size:
                    piece = await self._read(reader.read(min(size, _PIECE)))
                    if not piece:
                        raise httpx.RemoteProtocolError("the upstream closed the connection mid-chunk",
                                                        request=self._request)
                    size -= len(piece)
                    yield piece
                await self._read(reader.readexactly(2))
        elif self._length is not None:
            remaining = self._length
            while remaining:
                piece = await self._read(reader.read(min(remaining, _PIECE)))
                if not piece:
                    raise httpx.RemoteProtocolError("the upstream closed the connection mid-body",
                                                    request=self._request)
                remaining -= len(piece)
                yield piece
        else:
            while piece := await self._read(reader.read(_PIECE)):
                yield piece
            self._reusable = False
        self._done = True

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._done and self._reusable:
            self._transport._release(self._origin, connection)
        else:
            connection.close()


class LeanTransport(httpx.AsyncBaseTransport):
    """The pooled HTTP/1.1 transport (see the module docstring)."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[_Origin, list[_Connection]] = {}
        self.opened = 0
        """Connections opened so far (tests read it to see reuse)."""

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context(trust_env=False)
        return self._ssl_context

    def _release(self, origin: _Origin, connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= MAX_IDLE_PER_ORIGIN or connection.writer.is_closing():
            connection.close()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)

    def _reuse(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def _connect(self, origin: _Origin, request: httpx.Request, timeout: float | None) -> _Connection:
        scheme, host, port, server_name = origin
        tls = self._tls() if scheme == "https" else None
        try:
            reader, writer = await _within(asyncio.open_connection(
                host, port, ssl=tls, server_hostname=server_name if tls is not None else None,
                limit=_HEAD_LIMIT), timeout)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout("connecting to the upstream timed out", request=request) from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"connecting to the upstream failed: {exc}", request=request) from None
        self.opened += 1
        return _Connection(reader, writer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        port = url.port or (443 if url.scheme == "https" else 80)
        origin = (url.scheme, url.host, port, str(request.extensions.get("sni_hostname") or url.host))
        connection = self._reuse(origin) or await self._connect(origin, request, timeouts.get("connect"))
        try:
            return await self._exchange(origin, connection, request, timeouts)
        except BaseException:
            connection.close()
            raise

    async def _exchange(self, origin: _Origin, connection: _Connection, request: httpx.Request,
                        timeouts: dict[str, Any]) -> httpx.Response:
        body = request.content if request.method != "GET" else b""
        lines = [request.method.encode("ascii"), b" ", url_target(request.url), b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            lines += (name, b": ", value, b"\r\n")
        lines.append(b"\r\n")
        lines.append(body)
        try:
            connection.writer.write(b"".join(lines))
            await _within(connection.writer.drain(), timeouts.get("write"))
        except asyncio.TimeoutError:
            raise httpx.WriteTimeout("sending to the upstream timed out", request=request) from None
        except OSError as exc:
            raise httpx.WriteError(f"sending to the upstream failed: {exc}", request=request) from None
        read_timeout = timeouts.get("read")
        while True:
            try:
                head = await _within(connection.reader.readuntil(b"\r\n\r\n"), read_timeout)
            except asyncio.TimeoutError:
                raise httpx.ReadTimeout("the upstream did not answer in time", request=request) from None
            except asyncio.IncompleteReadError:
                raise httpx.RemoteProtocolError("the upstream closed the connection without a response",
                                                request=request) from None
            except asyncio.LimitOverrunError:
                raise httpx.RemoteProtocolError("the upstream's response head is too large",
                                                request=request) from None
            except OSError as exc:
                raise httpx.ReadError(f"reading from the upstream failed: {exc}", request=request) from None
            version, status, reason, headers = _parse_head(head, request)
            if not 100 <= status < 200:
                break
        length: int | None = None
        chunked = False
        close = version != b"HTTP/1.1"
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise httpx.RemoteProtocolError("a malformed Content-Length from the upstream",
                                                    request=request) from None
            elif lower == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif lower == b"connection":
                close = b"close" in value.lower() or (close and b"keep-alive" not in value.lower())
        if request.method == "HEAD" or status in (204, 304):
            length, chunked = 0, False
        elif chunked:
            length = None
        stream = _Body(self, origin, connection, request, length=length, chunked=chunked, reusable=not close,
                       read_timeout=read_timeout)
        return httpx.Response(status, headers=headers, stream=stream,
                              extensions={"http_version": version, "reason_phrase": reason})

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


def url_target(url: httpx.URL) -> bytes:
    """The request target: the path and query as they are on the wire."""
    return url.raw_path or b"/"


def _parse_head(head: bytes, request: httpx.Request) -> tuple[bytes, int, bytes, list[tuple[bytes, bytes]]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    try:
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError(parts[0])
        status = int(parts[1])
    except ValueError:
        raise httpx.RemoteProtocolError("the upstream's status line is not HTTP/1.x", request=request) from None
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name.strip():
            raise httpx.RemoteProtocolError("a malformed header line from the upstream", request=request)
        headers.append((name.strip(), value.strip()))
    return parts[0], status, parts[2] if len(parts) > 2 else b"", headers
