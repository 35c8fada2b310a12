"""The proxy's side of the wire to a model API: one ``httpx.AsyncClient`` per configured upstream, behind the
SSRF guard, sending memroute's own credential.

Every request is checked by :func:`memroute.netguard.check_url` (``allow_private`` from ``[proxy.*]``) and its
connection is **pinned** to the address the check approved: the URL's host is replaced by that address for
the socket while the ``Host`` header and TLS (SNI and certificate verification, through httpcore's
``sni_hostname`` extension) keep the name. A DNS answer that changes between check and connect cannot steer
the connection elsewhere. Approvals of a *name* are cached for :data:`CHECK_TTL_S` (resolution runs in a worker
thread, never on the event loop); an IP literal needs no lookup. Redirects are never followed: a 3xx reaches the
client as it came.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Final

import anyio.to_thread
import httpx

from memroute.netguard import ParsedUrl, check_url, parse_ip_host
from memroute.settings import UpstreamSettings

__all__ = ["CHECK_TTL_S", "GuardedTransport", "Upstream", "forward_headers", "response_headers"]

CHECK_TTL_S: Final = 30.0
"""How long a hostname's approved addresses are reused before the guard resolves and checks it again."""

# Hop-by-hop headers (RFC 9110 §7.6.1) and those the transport recomputes never cross the proxy.
_HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
    "trailer", "transfer-encoding", "upgrade", "host", "content-length",
})
# The caller's memroute credential, cookies and memroute's own control headers stay here; httpx asks for the
# encodings it can decode itself.
_NOT_FORWARDED: Final = _HOP_BY_HOP | frozenset({
    "authorization", "x-api-key", "cookie", "accept-encoding", "api-key",
})
_CONTROL_PREFIXES: Final = ("x-memroute-", "x-omniroute-")
# Upstream response headers that describe the bytes on the wire, which httpx has already decoded.
_NOT_RETURNED: Final = _HOP_BY_HOP | frozenset({"content-encoding", "set-cookie"})


def forward_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The caller's headers that go on to the upstream: all of them except hop-by-hop headers, the caller's
    credential (``Authorization``, ``x-api-key``), cookies and ``x-memroute-*`` / ``x-omniroute-*``."""
    kept = []
    for name, value in headers:
        lower = name.lower()
        if lower in _NOT_FORWARDED or lower.startswith(_CONTROL_PREFIXES):
            continue
        kept.append((name, value))
    return kept


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    """The upstream's response headers the client gets (``Retry-After``, rate-limit and request-id headers
    included), minus hop-by-hop and encoding headers and cookies."""
    return {name: value for name, value in headers.multi_items() if name.lower() not in _NOT_RETURNED}


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that checks every request's URL with the SSRF guard and connects to the approved
    address (see the module docstring)."""

    def __init__(self, *, allow_private: bool, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.allow_private = allow_private
        self._inner = inner or httpx.AsyncHTTPTransport(
            retries=0, limits=httpx.Limits(max_connections=200, max_keepalive_connections=50), trust_env=False,
        )
        self._approved: dict[tuple[str, int], tuple[float, ParsedUrl]] = {}

    async def _check(self, url: httpx.URL) -> ParsedUrl:
        key = (url.host, url.port or (443 if url.scheme == "https" else 80))
        cached = self._approved.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < CHECK_TTL_S:
            return cached[1]
        text = str(url.copy_with(path="/", query=None, fragment=None))
        if parse_ip_host(url.host) is not None:
            parsed = check_url(text, allow_private=self.allow_private)
        else:
            parsed = await anyio.to_thread.run_sync(lambda: check_url(text, allow_private=self.allow_private))
        self._approved[key] = (now, parsed)
        return parsed

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        parsed = await self._check(request.url)
        address = parsed.addresses[0]
        if address != request.url.host:
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": request.url.host}
            request.url = request.url.copy_with(host=address)  # the Host header keeps the name
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class Upstream:
    """One configured model API (``[proxy.openai]`` or ``[proxy.anthropic]``)."""

    def __init__(self, name: str, settings: UpstreamSettings, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.name = name
        self.settings = settings
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def configured(self) -> bool:
        return bool(self.settings.base_url)

    @property
    def client(self) -> httpx.AsyncClient:
        """The pooled client, created on first use (inside the server's event loop)."""
        if self._client is None:
            settings = self.settings
            self._client = httpx.AsyncClient(
                transport=self._transport or GuardedTransport(allow_private=settings.allow_private),
                timeout=httpx.Timeout(settings.timeout, connect=settings.connect_timeout),
                follow_redirects=False, trust_env=False,
            )
        return self._client

    def url(self, path: str) -> str:
        """``base_url`` joined with ``path`` (``/chat/completions``, ``/v1/messages``)."""
        base = (self.settings.base_url or "").rstrip("/")
        return base + path

    def credential_headers(self) -> dict[str, str]:
        """memroute's own credential for this upstream, in the upstream's style."""
        key = self.settings.api_key
        if not key:
            return {}
        return {"x-api-key": key} if self.name == "anthropic" else {"authorization": f"Bearer {key}"}

    def build(self, method: str, path: str, *, headers: Iterable[tuple[str, str]], content: bytes | None = None,
              params: Mapping[str, str] | None = None, json_body: bool = False) -> httpx.Request:
        merged = httpx.Headers(forward_headers(headers))
        for name, value in self.credential_headers().items():
            merged[name] = value
        if json_body:
            merged["content-type"] = "application/json"
        return self.client.build_request(method, self.url(path), headers=merged, content=content,
                                         params=params or None)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
