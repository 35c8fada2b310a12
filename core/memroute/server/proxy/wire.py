"""A small pooled HTTP/1.1 client on asyncio streams: the proxy's inner transport to a model API.

httpx + httpcore cost the proxy ~0.5-0.7 ms of CPU per upstream request on the shared 2-core machine (request
and response models, anyio streams, h11, a ``select()`` per pooled connection reuse), against ~0.05 ms for the
same request written and read on an asyncio stream (round six of docs/performance.md's history). The proxy
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
- A cap per origin (``max_connections``, :data:`MAX_CONNECTIONS_PER_ORIGIN` by default, httpx's default):
  connections open, idle, in use or being opened count against it. A request that finds its origin at the cap
  waits, first come first served, for one to come back (handed over directly) or to close (its place handed
  over), up to the ``pool`` timeout, then fails with ``httpx.PoolTimeout``. Every way a response can end gives
  its place back: read to the end, closed early, an upstream error or timeout while reading, the caller's task
  cancelled, or the response dropped without being closed (its body's ``__del__``). See :class:`_Pool`.
- TLS for ``https`` upstreams with httpx's default verification context; SNI and the certificate check use the
  ``sni_hostname`` extension the guard sets (the name), while the socket goes to the approved address.
- Timeouts from the request's ``timeout`` extension (httpx's ``pool`` / ``connect`` / ``read`` / ``write``),
  raised as httpx's own exceptions (``PoolTimeout``, ``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``,
  ``ConnectError``, ``RemoteProtocolError``), so everything that handles them is unchanged.
- No cookies, no redirects, no retries, no proxies from the environment, HTTP/1.1 only.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Final, TypeVar

import httpx

__all__ = ["KEEPALIVE_S", "MAX_CONNECTIONS_PER_ORIGIN", "MAX_IDLE_PER_ORIGIN", "LeanTransport"]

MAX_CONNECTIONS_PER_ORIGIN: Final = 100
"""Connections open to one origin at most (httpx's default ``max_connections``)."""
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
    return await asyncio.wait_for(awaitable, seconds)  # pragma: no cover - Python 3.10 (the proxy tests pass there)


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())


class _Connection:
    __slots__ = ("counted", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        self.counted = True
        """Whether it still holds a place under its origin's cap (given back once, however it ends)."""

    def usable(self, now: float) -> bool:
        """Whether an idle connection can carry the next request: open, recent, and nothing arrived on it since
        its last response (a peer that wrote and closed, or sent something unasked)."""
        reader = self.reader
        return (not reader.at_eof() and not getattr(reader, "_buffer", b"") and not self.writer.is_closing()
                and now - self.idle_since < KEEPALIVE_S)

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


class _Pool:
    """One origin's connections under the cap: ``open`` counts every connection that holds a place (idle, in use,
    or being opened), ``idle`` the ones ready for reuse, ``waiters`` the requests that found the origin at its cap.

    A place is never lost and a waiter never starves: a connection that comes back reusable goes straight to the
    first live waiter (else to ``idle``); one that is closed hands its place to the first live waiter (who opens
    a new connection in it), else ``open`` drops. Idle connections only pile up while nobody waits, so a request
    that finds any takes one (closing the stale ones, which frees their places) before it would wait."""

    __slots__ = ("idle", "loop", "open", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.idle: list[_Connection] = []
        self.open = 0
        self.waiters: deque[asyncio.Future[_Connection | None]] = deque()
        """Each gets a connection, or None: a place to open one in."""


class _Body(httpx.AsyncByteStream):
    """One response's body, read from its connection as the caller iterates."""

    def __init__(self, transport: LeanTransport, pool: _Pool, connection: _Connection, request: httpx.Request,
                 *, length: int | None, chunked: bool, reusable: bool, read_timeout: float | None) -> None:
        self._transport = transport
        self._pool = pool
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
        try:
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
        except BaseException:  # an upstream error or timeout, the caller's cancellation, or its early exit
            self._drop()
            raise
        self._done = True

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport._discard(self._pool, connection)

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._done and self._reusable:
            self._transport._release(self._pool, connection)
        else:
            self._transport._discard(self._pool, connection)

    def __del__(self) -> None:
        # Dropped without aclose (a caller that raised before closing it): give the place back on the loop, from
        # whatever thread the collector runs in.
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                self._pool.loop.call_soon_threadsafe(self._transport._discard, self._pool, connection)
            except RuntimeError:  # the loop is closed, and its sockets with it
                pass


class LeanTransport(httpx.AsyncBaseTransport):
    """The pooled HTTP/1.1 transport (see the module docstring); at most ``max_connections`` per origin."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None,
                 max_connections: int = MAX_CONNECTIONS_PER_ORIGIN) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections!r}")
        self._ssl_context = ssl_context
        self.max_connections = max_connections
        self._pools: dict[_Origin, _Pool] = {}
        self._closed = False
        self.opened = 0
        """Connections opened so far (tests read it to see reuse)."""
        self.waited = 0
        """Requests that found their origin at its cap and waited for a connection."""

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context(trust_env=False)
        return self._ssl_context

    def pool_state(self) -> dict[str, int]:
        """Connections over every origin: ``open`` (idle, in use or being opened), ``idle``, and ``waiting``
        requests."""
        pools = self._pools.values()
        return {"open": sum(pool.open for pool in pools), "idle": sum(len(pool.idle) for pool in pools),
                "waiting": sum(sum(not waiter.done() for waiter in pool.waiters) for pool in pools)}

    # --- the cap (see _Pool) ---------------------------------------------------------------------------------
    async def _acquire(self, origin: _Origin, request: httpx.Request,
                       timeouts: dict[str, Any]) -> tuple[_Pool, _Connection]:
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = _Pool(asyncio.get_running_loop())
        idle = pool.idle
        if idle:
            now = time.monotonic()
            while idle:
                connection = idle.pop()
                if connection.usable(now):
                    return pool, connection
                self._discard(pool, connection)
        if pool.open < self.max_connections:
            pool.open += 1
        else:
            handed = await self._wait(pool, request, timeouts.get("pool"))
            if handed is not None:
                return pool, handed
            # else the place of a connection that closed is ours: open one in it
        try:
            return pool, await self._connect(origin, request, timeouts.get("connect"))
        except BaseException:
            self._free(pool)
            raise

    async def _wait(self, pool: _Pool, request: httpx.Request, timeout: float | None) -> _Connection | None:
        self.waited += 1
        waiter: asyncio.Future[_Connection | None] = pool.loop.create_future()
        pool.waiters.append(waiter)
        # The time limit fails the future itself rather than cancelling the task (asyncio.timeout / wait_for): a
        # future is either handed a connection or timed out, never both, and Python 3.10's wait_for would swallow
        # the caller's cancellation when the hand-over and the cancel meet.
        expiry = None if timeout is None else pool.loop.call_later(timeout, _expire, waiter)
        try:
            return await waiter
        except asyncio.TimeoutError:
            self._forget(pool, waiter)
            raise httpx.PoolTimeout(f"no connection to the upstream came free in time ({self.max_connections} "
                                    f"open, the cap)", request=request) from None
        except BaseException:  # the caller's task was cancelled: what it was handed goes to the next in line
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()
                if handed is None:
                    self._free(pool)
                else:
                    self._release(pool, handed)
            else:
                self._forget(pool, waiter)
            raise
        finally:
            if expiry is not None:
                expiry.cancel()

    @staticmethod
    def _forget(pool: _Pool, waiter: asyncio.Future[_Connection | None]) -> None:
        waiter.cancel()
        try:
            pool.waiters.remove(waiter)
        except ValueError:
            pass

    def _free(self, pool: _Pool) -> None:
        """A place under the cap is free: the first live waiter takes it, else the origin has one fewer open."""
        waiters = pool.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        pool.open -= 1

    def _discard(self, pool: _Pool, connection: _Connection) -> None:
        """Close ``connection`` and free its place (once, however often it is discarded)."""
        connection.close()
        if connection.counted:
            connection.counted = False
            self._free(pool)

    def _release(self, pool: _Pool, connection: _Connection) -> None:
        """A connection whose response was read to its end: to the first live waiter, else the idle list."""
        connection.idle_since = now = time.monotonic()
        if self._closed or not connection.usable(now):
            self._discard(pool, connection)
            return
        waiters = pool.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        if len(pool.idle) >= MAX_IDLE_PER_ORIGIN:
            self._discard(pool, connection)
            return
        pool.idle.append(connection)

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
        pool, connection = await self._acquire(origin, request, timeouts)
        try:
            return await self._exchange(pool, connection, request, timeouts)
        except BaseException:
            self._discard(pool, connection)
            raise

    async def _exchange(self, pool: _Pool, connection: _Connection, request: httpx.Request,
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
        stream = _Body(self, pool, connection, request, length=length, chunked=chunked, reusable=not close,
                       read_timeout=read_timeout)
        return httpx.Response(status, headers=headers, stream=stream,
                              extensions={"http_version": version, "reason_phrase": reason})

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their responses end (nothing is reused after)."""
        self._closed = True
        for pool in self._pools.values():
            idle, pool.idle = pool.idle, []
            for connection in idle:
                self._discard(pool, connection)


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
