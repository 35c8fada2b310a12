"""Fair queueing in a live ``memroute serve`` (its own process, real sockets): a key whose queue for the event loop
is full gets 429 with ``Retry-After`` and a body naming the limit, while another tenant's key sent in the middle of
that flood is served; the fair server answers every request of a burst otherwise (``queued_requests`` = 0)."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

from tests.servers.memroute_server import MemrouteServer

FLOOD = 60


def _connections(url: str, count: int) -> list[socket.socket]:
    parts = urlsplit(url)
    opened = []
    for _ in range(count):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        opened.append(sock)
    return opened


def _search(secret: str, query: str) -> bytes:
    body = json.dumps({"query": query}).encode()
    return (f"POST /api/memory/search HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {secret}\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"])
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), headers, json.loads(rest[:length])


def _flood(server: MemrouteServer) -> tuple[list[tuple[int, dict[str, str], dict]], int]:
    """``FLOOD`` searches of tenant A sent at once on connections of their own, with one search of tenant B
    sent in the middle of them; the answers of A, and B's status."""
    with server.client(server.tenant_a) as a, server.client(server.tenant_b) as b:
        for client in (a, b):  # each tenant searched once: the searches that follow run on the loop
            assert client.post("/api/memory", json={"content": "I like green tea"}).status_code == 201
            assert client.post("/api/memory/search", json={"query": "tea"}).status_code == 200
    flood = _connections(server.base_url, FLOOD)
    (quiet,) = _connections(server.base_url, 1)
    try:
        requests = [_search(server.tenant_a, f"tea {index}") for index in range(FLOOD)]
        for index, (sock, request) in enumerate(zip(flood, requests, strict=True)):
            sock.sendall(request)
            if index == FLOOD // 2:
                quiet.sendall(_search(server.tenant_b, "tea"))
        answers = [_answer(sock) for sock in flood]
        return answers, _answer(quiet)[0]
    finally:
        for sock in [*flood, quiet]:
            sock.close()


def test_a_full_queue_is_a_429_for_that_key_alone(tmp_path):
    config = {"embedding": {"source": "none"}, "server": {"queued_requests": 1}}
    with MemrouteServer(tmp_path, config=config, workers=1) as server:
        answers, quiet = _flood(server)
    statuses = [status for status, _, _ in answers]
    refused = [(headers, body) for status, headers, body in answers if status == 429]
    assert refused, statuses  # 60 requests at once, and one may wait: most are refused
    assert statuses.count(200) >= 1
    for headers, body in refused:
        assert headers["retry-after"] == "1"
        assert body["error"]["message"] == "too many requests queued for this API key (at most 1 waiting)"
    assert quiet == 200  # tenant B's request, sent in the middle of the flood, waited in a queue of its own


def test_with_an_unbounded_queue_every_request_of_a_burst_is_served(tmp_path):
    config = {"embedding": {"source": "none"}, "server": {"queued_requests": 0, "concurrent_requests": 0}}
    with MemrouteServer(tmp_path, config=config, workers=1) as server:
        answers, quiet = _flood(server)
    assert [status for status, _, _ in answers] == [200] * FLOOD and quiet == 200
