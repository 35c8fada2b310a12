"""The proxy's side of the wire to a model API: per configured upstream, requests built with an ``httpx``
client and sent through the SSRF guard over memroute's own pooled HTTP/1.1 connections
(:mod:`memroute.server.proxy.wire`), with memroute's own credential.

Every request is checked by :func:`memroute.config.netguard.check_url` (``allow_private`` from ``[proxy.*]``) and its
connection is **pinned** to the address the check approved: the URL's host is replaced by that address for
the socket while the ``Host`` header and TLS (SNI and certificate verification, through the
``sni_hostname`` extension) keep the name. A DNS answer that changes between check and connect cannot steer
the connection elsewhere. Approvals of a *name* are cached for :data:`CHECK_TTL_S` (resolution runs in a worker
thread, never on the event loop); an IP literal needs no lookup. Redirects are never followed: a 3xx reaches the
client as it came.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Final

import anyio.to_thread
import httpcore
import httpx

from memroute.config.netguard import ParsedUrl, check_url, parse_ip_host
from memroute.config.settings import UpstreamSettings
from memroute.errors import ValidationError
from memroute.server.proxy.wire import LeanTransport

__all__ = ["CHECK_TTL_S", "GuardedTransport", "OutsideUpstreamError", "Upstream", "forward_headers",
           "response_headers"]

CHECK_TTL_S: Final = 30.0
"""How long a hostname's approved addresses are reused before the guard resolves and checks it again."""

class OutsideUpstreamError(ValidationError):
    """A path that would take a request out of its upstream's ``base_url`` (a bug or an attack: never sent)."""


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
_COALESCE_LIMIT: Final = 64 * 1024
"""A request's head and body are sent in one write up to this size (see :class:`_CoalescingStream`)."""
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
    address (see the module docstring). The connections are :class:`~memroute.server.proxy.wire.LeanTransport`'s
    unless ``inner`` is given; an ``httpx.AsyncHTTPTransport`` given as ``inner`` gets coalesced writes."""

    def __init__(self, *, allow_private: bool, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.allow_private = allow_private
        if inner is None:
            inner = LeanTransport()
        elif isinstance(inner, httpx.AsyncHTTPTransport):
            _coalesce_writes(inner)
        self._inner = inner
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


class _CoalescingStream(httpcore.AsyncNetworkStream):
    """For an httpcore transport given to :class:`GuardedTransport` (the default transport writes each request
    in one write itself): a connection that sends a request in one write. httpcore writes the head and the body
    of a request separately; on loopback each send wakes the peer (measured: ~0.25 ms a send on the shared 2-core
    machine), so the head is held until the body follows and both go out together, just before the response is
    read. Nothing is held for long: anything pending is sent before every read, before TLS starts, and at once
    when it reaches :data:`_COALESCE_LIMIT` (a large body streams as before)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._pending: list[bytes] = []
        self._size = 0
        self._timeout: float | None = None

    async def _flush(self) -> None:
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending, self._size = [], 0
            await self._inner.write(data, self._timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._pending.append(buffer)
        self._size += len(buffer)
        self._timeout = timeout
        if self._size >= _COALESCE_LIMIT:
            await self._flush()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self._flush()
        return await self._inner.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._pending, self._size = [], 0  # a request given up while being written: it never goes out
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        await self._flush()
        return _CoalescingStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _CoalescingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        return _CoalescingStream(await self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        return _CoalescingStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _coalesce_writes(transport: httpx.AsyncHTTPTransport) -> None:
    """Give ``transport``'s connection pool :class:`_CoalescingStream` connections. httpx exposes no public way
    to choose the pool's network backend, so this reaches into the pool; should a later httpx store it
    elsewhere, nothing changes but the number of writes."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.AsyncNetworkBackend):
        pool._network_backend = _CoalescingBackend(backend)  # type: ignore[union-attr]


class _NoCookies(CookieJar):
    """A cookie jar that keeps nothing. The client is shared by every tenant: a cookie one caller's request got
    from the upstream must never ride along on another's (the upstream's ``Set-Cookie`` never reaches the caller
    either). Storing none also saves parsing the jar on every response."""

    def __init__(self) -> None:
        super().__init__(policy=DefaultCookiePolicy(allowed_domains=[]))

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


class Upstream:
    """One configured model API (``[proxy.openai]`` or ``[proxy.anthropic]``)."""

    def __init__(self, name: str, settings: UpstreamSettings, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.name = name
        self.settings = settings
        self._transport = transport
        self._guarded: httpx.AsyncBaseTransport | None = None
        self._client: httpx.AsyncClient | None = None
        self._urls: dict[str, httpx.URL] = {}

    @property
    def configured(self) -> bool:
        return bool(self.settings.base_url)

    @property
    def client(self) -> httpx.AsyncClient:
        """The pooled client, created on first use (inside the server's event loop)."""
        if self._client is None:
            settings = self.settings
            self._guarded = self._transport or GuardedTransport(
                allow_private=settings.allow_private, inner=LeanTransport(max_connections=settings.max_connections))
            # A request that finds every one of max_connections busy waits as long as it would for a connection
            # to open: both are "getting a connection", and one budget is easier to reason about than two.
            self._client = httpx.AsyncClient(
                transport=self._guarded,
                timeout=httpx.Timeout(settings.timeout, connect=settings.connect_timeout,
                                      pool=settings.connect_timeout),
                follow_redirects=False, trust_env=False, cookies=_NoCookies(),
            )
        return self._client

    async def send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        """Send a request :meth:`build` made straight to the guarded transport: the client's layers (auth,
        redirects, cookies, event hooks) do nothing here (no auth, redirects never followed, no cookie jar) and
        cost ~0.15 ms a request. Without ``stream`` the body is read (and the connection released) first."""
        self.client  # noqa: B018 - creates the transport on first use
        assert self._guarded is not None
        response = await self._guarded.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    def connections(self) -> dict[str, int] | None:
        """The pool's state: connections ``open`` (idle, in use or being opened), ``idle``, requests ``waiting`` for
        one now and ``waited`` so far, and the cap ``max``; None before the first request (or for a transport
        other than memroute's own)."""
        inner = getattr(self._guarded, "_inner", None)
        if not isinstance(inner, LeanTransport):
            return None
        return {**inner.pool_state(), "waited": inner.waited, "max": inner.max_connections}

    def url(self, path: str) -> str:
        """``base_url`` joined with ``path`` (``/chat/completions``, ``/v1/messages``)."""
        base = (self.settings.base_url or "").rstrip("/")
        return base + path

    def _check_under_base(self, url: httpx.URL, path: str) -> None:
        """Refuse a URL that left ``base_url``: another origin, or a path outside the base's whose dot segments
        httpx removed (``/v1/models/../files`` is ``/v1/files``). The request carries memroute's credential, so
        it may only ever reach the path it was built for."""
        base = httpx.URL((self.settings.base_url or "").rstrip("/") + "/")
        wanted = base.raw_path.rstrip(b"/") + path.encode("ascii", "strict")
        if (not path.startswith("/") or (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port)
                or url.raw_path != wanted):
            raise OutsideUpstreamError(f"memroute: refused to send {path!r} outside [proxy.{self.name}] base_url")

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
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL(self.url(path))
            self._check_under_base(url, path)
            if method == "POST":  # the three fixed chat paths, parsed once (never a caller-chosen model id path)
                self._urls[path] = url
        return self.client.build_request(method, url, headers=merged, content=content,
                                         params=params or None)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
