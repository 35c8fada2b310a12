"""The per-origin connection cap of the proxy's own HTTP/1.1 client (memroute.server.proxy.wire.LeanTransport)
against scripted loopback servers: at the cap a request waits and gets the connection that comes back; past the
pool timeout it is an ``httpx.PoolTimeout``; every way a response can end (read to the end, closed early, dropped
without closing, an upstream reset or timeout, the caller's task cancelled while waiting for the head or in the
queue, a connect failure) gives its place back, so after N such requests at cap N a new one gets a connection
without waiting; two origins have separate caps. No timed assertions: ``waited`` counts the requests that had
to queue, and events order the steps."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable

import httpx
import pytest

from memroute.server.proxy.wire import LeanTransport

EMPTY = {"open": 0, "idle": 0, "waiting": 0}


class Upstream:
    """A loopback server whose answer depends on the path: ``/ok`` (a short body, keep-alive), ``/hold`` (the
    head and a first piece, the rest once :attr:`go` is set), ``/reset`` (part of the body, then a reset),
    ``/silent`` (no answer until the client hangs up)."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.arrived = asyncio.Queue[str]()
        self.hangups = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Upstream:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                path = head.split(b" ", 2)[1].decode()
                self.arrived.put_nowait(path)
                if path == "/ok":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                elif path == "/hold":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst")
                    await writer.drain()
                    await self.go.wait()
                    writer.write(b"-rest")
                elif path == "/reset":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
                    await writer.drain()
                    writer.transport.abort()
                    return
                elif path == "/silent":
                    await reader.read()
                    self.hangups += 1
                    return
                await writer.drain()
        finally:
            writer.close()


def _request(url: str, path: str, *, pool: float | None = 5.0, read: float = 5.0) -> httpx.Request:
    request = httpx.Request("GET", url + path)
    request.extensions = {"timeout": {"connect": 5.0, "read": read, "write": 5.0, "pool": pool}}
    return request


async def _get(transport: LeanTransport, url: str, path: str = "/ok", **timeouts: float | None) -> bytes:
    response = await transport.handle_async_request(_request(url, path, **timeouts))
    try:
        return await response.aread()
    finally:
        await response.aclose()


async def _started(transport: LeanTransport, upstream: Upstream, path: str = "/hold") -> httpx.Response:
    """A response whose head arrived and whose body is not read: it holds its connection."""
    response = await transport.handle_async_request(_request(upstream.url, path))
    assert await upstream.arrived.get() == path
    return response


async def _until(predicate: Callable[[], bool]) -> None:
    """Let the loop run until ``predicate`` holds (every step here is a loop callback, never a wait for time)."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def _run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def test_at_the_cap_a_request_waits_and_gets_the_connection_that_comes_back():
    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=2)
            held = [await _started(transport, upstream) for _ in range(2)]
            third = asyncio.create_task(_get(transport, upstream.url))
            await _until(lambda: transport.pool_state()["waiting"] == 1)
            assert not third.done() and transport.opened == 2
            upstream.go.set()
            assert await held[0].aread() == b"first-rest"
            await held[0].aclose()
            assert await third == b"ok"
            assert transport.opened == 2 and transport.waited == 1  # the third reused the first's connection
            await held[1].aclose()
            await transport.aclose()
            assert transport.pool_state() == EMPTY

    _run(scenario)


def test_past_the_pool_timeout_it_is_a_pool_timeout_and_the_queue_is_left_clean():
    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=1)
            held = await _started(transport, upstream)
            with pytest.raises(httpx.PoolTimeout, match="came free"):
                await _get(transport, upstream.url, pool=0.05)
            assert transport.pool_state() == {"open": 1, "idle": 0, "waiting": 0}
            await held.aclose()  # closed before its end: the connection closes, its place is free
            waited = transport.waited
            assert await _get(transport, upstream.url) == b"ok"
            assert transport.waited == waited and transport.pool_state() == {"open": 1, "idle": 1, "waiting": 0}
            await transport.aclose()

    _run(scenario)


def test_the_wait_has_no_limit_without_a_pool_timeout():
    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=1)
            held = await _started(transport, upstream)
            waiting = asyncio.create_task(_get(transport, upstream.url, pool=None))
            await _until(lambda: transport.pool_state()["waiting"] == 1)
            await held.aclose()
            assert await waiting == b"ok"
            await transport.aclose()

    _run(scenario)


async def _abandon_mid_body(transport: LeanTransport, upstream: Upstream) -> None:
    response = await _started(transport, upstream)
    async for _piece in response.aiter_raw():
        break
    await response.aclose()


async def _drop_unclosed(transport: LeanTransport, upstream: Upstream) -> None:
    response = await _started(transport, upstream)
    try:
        raise RuntimeError("the caller fails before it closes the response")
    except RuntimeError:
        pass
    del response
    gc.collect()


async def _upstream_reset(transport: LeanTransport, upstream: Upstream) -> None:
    response = await _started(transport, upstream, "/reset")
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        async for _piece in response.aiter_raw():
            pass
    assert transport.pool_state()["open"] == 0  # the error itself freed the place; the caller never closes it


async def _read_timeout(transport: LeanTransport, upstream: Upstream) -> None:
    with pytest.raises(httpx.ReadTimeout):
        await _get(transport, upstream.url, "/silent", read=0.05)


async def _cancelled_waiting_for_the_head(transport: LeanTransport, upstream: Upstream) -> None:
    task = asyncio.create_task(transport.handle_async_request(_request(upstream.url, "/silent")))
    assert await upstream.arrived.get() == "/silent"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _cancelled_while_reading(transport: LeanTransport, upstream: Upstream) -> None:
    response = await _started(transport, upstream)
    pieces: list[bytes] = []

    async def read_all() -> None:
        async for piece in response.aiter_raw():
            pieces.append(piece)

    task = asyncio.create_task(read_all())
    await _until(lambda: bool(pieces))  # the first piece is in; the task waits for the rest
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert transport.pool_state()["open"] == 0  # the cancellation freed the place; the response is still here


@pytest.mark.parametrize("end", [_abandon_mid_body, _drop_unclosed, _upstream_reset, _read_timeout,
                                 _cancelled_waiting_for_the_head, _cancelled_while_reading])
def test_every_way_a_response_ends_gives_its_place_back(end):
    cap = 3

    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=cap)
            for _ in range(cap + 1):  # more than the cap: a lost place would make the last ones wait
                await end(transport, upstream)
            await _until(lambda: transport.pool_state()["open"] == 0)
            bodies = await asyncio.gather(*(_get(transport, upstream.url) for _ in range(cap)))
            assert bodies == [b"ok"] * cap
            assert transport.waited == 0 and transport.pool_state() == {"open": cap, "idle": cap, "waiting": 0}
            await transport.aclose()
            assert transport.pool_state() == EMPTY

    _run(scenario)


def test_a_request_cancelled_in_the_queue_neither_keeps_a_place_nor_takes_one_from_the_next():
    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=1)
            held = await _started(transport, upstream)
            gone = asyncio.create_task(_get(transport, upstream.url))
            await _until(lambda: transport.pool_state()["waiting"] == 1)
            gone.cancel()
            with pytest.raises(asyncio.CancelledError):
                await gone
            assert transport.pool_state() == {"open": 1, "idle": 0, "waiting": 0}
            nxt = asyncio.create_task(_get(transport, upstream.url))
            await _until(lambda: transport.pool_state()["waiting"] == 1)
            upstream.go.set()
            assert await held.aread() == b"first-rest"
            await held.aclose()
            assert await nxt == b"ok" and transport.opened == 1
            await transport.aclose()

    _run(scenario)


def test_a_request_cancelled_just_after_it_was_handed_a_connection_passes_it_on():
    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=1)
            held = await _started(transport, upstream)
            first = asyncio.create_task(_get(transport, upstream.url))
            await _until(lambda: transport.pool_state()["waiting"] == 1)
            second = asyncio.create_task(_get(transport, upstream.url))
            await _until(lambda: transport.pool_state()["waiting"] == 2)
            upstream.go.set()
            assert await held.aread() == b"first-rest"
            await held.aclose()  # hands the connection to the first waiter, whose task has not run yet
            first.cancel()  # ...and is cancelled before it does
            with pytest.raises(asyncio.CancelledError):
                await first
            assert await second == b"ok" and transport.opened == 1
            await transport.aclose()

    _run(scenario)


def test_a_closed_connection_hands_its_place_to_a_waiter_who_opens_a_new_one():
    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=1)
            held = await _started(transport, upstream)
            waiting = asyncio.create_task(_get(transport, upstream.url))
            await _until(lambda: transport.pool_state()["waiting"] == 1)
            await held.aclose()  # before its end: the connection cannot be reused
            assert await waiting == b"ok" and transport.opened == 2
            assert transport.pool_state() == {"open": 1, "idle": 1, "waiting": 0}
            await transport.aclose()

    _run(scenario)


def test_a_connect_failure_gives_its_place_back():
    async def scenario() -> None:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        transport = LeanTransport(max_connections=1)
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                await _get(transport, f"http://127.0.0.1:{port}")
        assert transport.waited == 0 and transport.pool_state() == EMPTY

    _run(scenario)


def test_two_origins_have_separate_caps():
    async def scenario() -> None:
        async with Upstream() as one, Upstream() as two:
            transport = LeanTransport(max_connections=1)
            held = await _started(transport, one)
            assert await _get(transport, two.url) == b"ok"  # the other origin is not at its cap
            assert transport.waited == 0
            with pytest.raises(httpx.PoolTimeout):
                await _get(transport, one.url, pool=0.05)
            await held.aclose()
            await transport.aclose()

    _run(scenario)


def test_stale_idle_connections_free_their_places_for_a_request_at_the_cap():
    async def scenario() -> None:
        async with Upstream() as upstream:
            transport = LeanTransport(max_connections=2)
            await asyncio.gather(_get(transport, upstream.url), _get(transport, upstream.url))
            assert transport.pool_state() == {"open": 2, "idle": 2, "waiting": 0}
            for pool in transport._pools.values():
                for connection in pool.idle:
                    connection.idle_since -= 3600  # past keep-alive: not reusable
            assert await _get(transport, upstream.url) == b"ok"
            assert transport.waited == 0 and transport.opened == 3
            assert transport.pool_state() == {"open": 1, "idle": 1, "waiting": 0}
            await transport.aclose()

    _run(scenario)


def test_the_cap_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        LeanTransport(max_connections=0)
