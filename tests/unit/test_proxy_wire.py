"""The proxy's own HTTP/1.1 client (memroute.server.proxy.wire.LeanTransport) against scripted loopback servers:
framing (Content-Length, chunked, to the end of the connection), streaming piece by piece, keep-alive reuse and
its limits, timeouts and broken answers as httpx's exceptions, and TLS with the name kept for SNI and the
certificate while the socket goes to an address."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import Awaitable, Callable

import httpx
import pytest

from memroute.server.proxy.wire import LeanTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


def _run(handler: Handler, scenario: Callable[[str, LeanTransport], Awaitable[object]], *,
         tls: ssl.SSLContext | None = None, client_tls: ssl.SSLContext | None = None) -> object:
    async def main() -> object:
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
        port = server.sockets[0].getsockname()[1]
        transport = LeanTransport(ssl_context=client_tls)
        try:
            return await scenario(f"{'https' if tls else 'http'}://127.0.0.1:{port}", transport)
        finally:
            await transport.aclose()
            server.close()

    return asyncio.run(main())


def _request(url: str, *, timeout: float = 5.0, **extensions: object) -> httpx.Request:
    request = httpx.Request("POST", url + "/v1/chat/completions", content=b'{"model": "m"}',
                            headers={"content-type": "application/json"})
    request.extensions = {"timeout": httpx.Timeout(timeout).as_dict(), **extensions}
    return request


def test_content_length_and_chunked_bodies_and_keep_alive_reuse():
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await _read_request(reader))
        writer.write(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 5\r\n\r\nslow!")
        seen.append(await _read_request(reader))
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"6;ext=1\r\ndata: \r\n3\r\nabc\r\n0\r\nx-trailer: t\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client closes

    async def scenario(url: str, transport: LeanTransport) -> None:
        first = await transport.handle_async_request(_request(url))
        assert first.status_code == 429 and first.headers["retry-after"] == "7"
        assert await first.aread() == b"slow!"
        await first.aclose()
        second = await transport.handle_async_request(_request(url))
        assert second.status_code == 200
        assert [piece async for piece in second.aiter_raw()] == [b"data: ", b"abc"]
        await second.aclose()
        assert transport.opened == 1  # the second request reused the connection

    _run(handler, scenario)
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert seen[0].endswith(b'\r\n\r\n{"model": "m"}') and b"host: 127.0.0.1:" in seen[0].lower()


def test_a_streamed_body_arrives_piece_by_piece_before_the_upstream_finishes():
    gates: list[asyncio.Event] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 20\r\n\r\ndata: one\n\n")
        await writer.drain()
        await asyncio.wait_for(gates[0].wait(), 5)  # the rest only once the first event was read
        writer.write(b"data: two")
        await writer.drain()
        await reader.read()

    async def scenario(url: str, transport: LeanTransport) -> list[bytes]:
        gates.append(asyncio.Event())
        response = await transport.handle_async_request(_request(url))
        pieces = []
        async for piece in response.aiter_raw():
            pieces.append(piece)
            gates[0].set()
        await response.aclose()
        return pieces

    assert _run(handler, scenario) == [b"data: one\n\n", b"data: two"]


def test_a_body_to_the_end_of_the_connection_and_connection_close_are_not_reused():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        writer.close()

    async def scenario(url: str, transport: LeanTransport) -> None:
        for _ in range(2):
            response = await transport.handle_async_request(_request(url))
            assert await response.aread() == b"all of it"
            await response.aclose()
        assert transport.opened == 2

    _run(handler, scenario)


def test_a_connection_the_upstream_closed_while_idle_is_not_reused():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # keep-alive announced, then closed while idle

    async def scenario(url: str, transport: LeanTransport) -> None:
        for _ in range(2):
            response = await transport.handle_async_request(_request(url))
            assert await response.aread() == b"ok"
            await response.aclose()
            await asyncio.sleep(0.05)  # the loop sees the EOF
        assert transport.opened == 2

    _run(handler, scenario)


def test_a_connection_with_unasked_bytes_waiting_is_not_reused():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n")  # and a stray head
            await writer.drain()

    async def scenario(url: str, transport: LeanTransport) -> None:
        for _ in range(2):
            response = await transport.handle_async_request(_request(url))
            assert await response.aread() == b"ok"
            await response.aclose()
        assert transport.opened == 2

    _run(handler, scenario)


def test_a_response_closed_before_its_end_closes_the_connection():
    closed = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
        await writer.drain()
        closed.append(await reader.read() == b"")  # EOF: the client hung up

    async def scenario(url: str, transport: LeanTransport) -> None:
        response = await transport.handle_async_request(_request(url))
        async for _piece in response.aiter_raw():
            break
        await response.aclose()
        await asyncio.sleep(0.05)
        assert transport.pool_state() == {"open": 0, "idle": 0, "waiting": 0}

    _run(handler, scenario)
    assert closed == [True]


@pytest.mark.parametrize(("answer", "error"), [
    (None, httpx.ReadTimeout),  # never answers
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", httpx.RemoteProtocolError),
    (b"SMTP ready\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", httpx.RemoteProtocolError),
    (b"", httpx.RemoteProtocolError),  # closes without a response
])
def test_timeouts_and_broken_answers_are_httpx_errors(answer, error):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        if answer is None:
            await reader.read()
            return
        writer.write(answer)
        await writer.drain()
        writer.close()

    async def scenario(url: str, transport: LeanTransport) -> None:
        with pytest.raises(error):
            response = await transport.handle_async_request(_request(url, timeout=0.2))
            await response.aread()
        assert transport.pool_state() == {"open": 0, "idle": 0, "waiting": 0}

    _run(handler, scenario)


def test_an_address_nobody_listens_on_is_a_connect_error():
    async def scenario() -> None:
        transport = LeanTransport()
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        with pytest.raises(httpx.ConnectError):
            await transport.handle_async_request(_request(f"http://127.0.0.1:{port}"))

    asyncio.run(scenario())


def _certificate(tmp_path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"],
                   check=True, capture_output=True)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


def test_tls_keeps_the_name_for_sni_and_the_certificate_while_connecting_to_the_address(tmp_path):
    server_tls, client_tls = _certificate(tmp_path, "upstream.test")
    names: list[str | None] = []
    server_tls.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment,misc]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure")
        await writer.drain()
        await reader.read()

    async def scenario(url: str, transport: LeanTransport) -> None:
        response = await transport.handle_async_request(_request(url, sni_hostname="upstream.test"))
        assert await response.aread() == b"secure"
        await response.aclose()
        with pytest.raises(httpx.ConnectError):  # the certificate is not for the address itself
            await transport.handle_async_request(_request(url))

    _run(handler, scenario, tls=server_tls, client_tls=client_tls)
    assert names[0] == "upstream.test"
