"""The SSRF guard for every outbound HTTP request memroute makes on a user-configured URL.

The remote embedding source and the generic HTTP backend send requests to URLs that come from
configuration. Without a guard, a URL such as ``http://169.254.169.254/latest/meta-data/`` turns memroute
into a proxy into the host's network. The reference system's guard was structural only (no DNS, so any
hostname passed; IPv4-mapped IPv6 and 100.64/10 passed; redirects were followed). This one:

* accepts only ``http``/``https`` URLs with a host and **no credentials** (``user:pass@`` leaks secrets
  into logs and lets a URL smuggle a different host past a naive check);
* parses every IPv4 spelling ``inet_aton`` accepts (``2130706433``, ``0x7f000001``, ``0177.0.0.1``,
  ``127.1``) as the address it names, because the resolver will connect to it;
* **resolves the host and checks every address** it resolves to: loopback, private (10/8, 172.16/12,
  192.168/16), link-local (169.254/16, fe80::/10), unique-local (fc00::/7), 0/8, unspecified, multicast,
  reserved and other non-global ranges, shared address space (CGNAT 100.64/10), and IPv4 embedded in IPv6
  (IPv4-mapped ``::ffff:0:0/96``, IPv4-compatible ``::/96``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``,
  Teredo ``2001::/32``);
* blocks the cloud metadata endpoints (``169.254.169.254``, ``metadata.google.internal``,
  ``metadata.goog``, ``100.100.100.200``, ``fd00:ec2::254`` and all of 169.254/16) **always**, even when
  the caller opts in to private addresses;
* has an explicit allow-list for self-hosted providers: ``allow_private=True`` admits loopback, private,
  unique-local and CGNAT addresses (an Ollama on ``127.0.0.1``, a vLLM on the LAN, a Tailscale peer);
  ``allow_hosts`` admits named hosts, addresses or CIDR networks.

:class:`GuardedSession` is the ``requests`` side: it re-checks every request (and every redirect hop, if
redirects are enabled at all — they are off by default), and **pins the TCP connection to the address the
check approved**, so a DNS answer that changes between the check and the connect (DNS rebinding) cannot
steer the connection elsewhere. TLS still verifies the certificate against the URL's hostname (SNI and
hostname checks use the name; only the socket's destination is pinned).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import attrs

from memroute.errors import ValidationError

__all__ = [
    "METADATA_HOSTS",
    "BlockedUrlError",
    "GuardedSession",
    "HostResolutionError",
    "ParsedUrl",
    "Resolver",
    "check_configured_url",
    "check_url",
    "classify_address",
    "guarded_httpx_transport",
    "parse_ip_host",
    "parse_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]
"""``resolver(host, port)`` returns the addresses (as strings) a connection to ``host`` could reach."""

METADATA_HOSTS: Final = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
"""Hostnames of cloud metadata services; blocked whatever the allow-list says."""

_METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "100.100.100.200", "fd00:ec2::254", "fd00:ec2::23")
)
# All of IPv4 link-local counts as metadata: AWS ECS (169.254.170.2), the time service (169.254.169.123)
# and others live there, and no self-hosted provider has a reason to.
_ALWAYS_BLOCKED_V4: Final = (ipaddress.ip_network("169.254.0.0/16"),)

_CGNAT: Final = ipaddress.ip_network("100.64.0.0/10")
_NAT64: Final = (ipaddress.ip_network("64:ff9b::/96"),)
_NAT64_LOCAL: Final = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE: Final = ipaddress.ip_network("::/96")

# The reasons allow_private=True lifts. Everything else (metadata, link-local, multicast, reserved,
# unspecified, other non-global space) stays blocked whatever the caller says.
_PRIVATE_REASONS: Final = frozenset({"loopback", "private", "unique-local", "cgnat"})


class BlockedUrlError(ValidationError):
    """The SSRF guard refused a URL. ``host`` is the offending host; the message never contains the URL's
    credentials, path or query. ``reason`` is a short tag (``scheme``, ``credentials``, ``loopback``,
    ``metadata``, ...)."""

    def __init__(self, message: str, *, host: str = "", reason: str = "blocked") -> None:
        self.host = host
        self.reason = reason
        super().__init__(message)


class HostResolutionError(BlockedUrlError):
    """The host did not resolve, so it could not be checked (and could not be reached either)."""


@attrs.frozen(kw_only=True)
class ParsedUrl:
    """A URL the guard approved."""

    url: str
    """The URL, normalised (scheme and host lower-cased); what to send the request to."""
    scheme: str
    host: str
    """The hostname (IPv6 without brackets; a numeric IPv4 spelling as dotted quad)."""
    port: int
    path: str
    addresses: tuple[str, ...]
    """Every address the host resolved to; all of them passed the check."""


# --- parsing -------------------------------------------------------------------------------------------

def _parse_ipv4_part(part: str) -> int | None:
    if not part:
        return None
    try:
        if part[:2].lower() == "0x":
            return int(part[2:], 16) if part[2:] else 0
        if len(part) > 1 and part[0] == "0":
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address an ``inet_aton``-style spelling names (``127.1``, ``0x7f.0.0.1``, ``2130706433``), or
    ``None`` when ``host`` is not such a spelling. Resolvers accept these, so the guard must too."""
    parts = host.split(".")
    if host.endswith("."):
        parts = parts[:-1]
    if not 1 <= len(parts) <= 4:
        return None
    numbers = [_parse_ipv4_part(p) for p in parts]
    if any(n is None for n in numbers):
        return None
    values = [n for n in numbers if n is not None]
    # a.b.c.d: bytes; a.b.c: c is 16 bits; a.b: b is 24 bits; a: 32 bits.
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for index, byte in enumerate(head):
        value += byte << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def parse_ip_host(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is an IP literal in any spelling, else ``None``."""
    candidate = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(candidate)
    except ValueError:
        pass
    return _legacy_ipv4(candidate) if all(c.isalnum() or c == "." for c in candidate) else None


# --- classification ------------------------------------------------------------------------------------

def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo client)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def _classify_v4(address: ipaddress.IPv4Address) -> str | None:
    if address in _METADATA_ADDRESSES or any(address in net for net in _ALWAYS_BLOCKED_V4):
        return "metadata" if address in _METADATA_ADDRESSES else "link-local"
    if address.is_unspecified or address in ipaddress.ip_network("0.0.0.0/8"):
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address in _CGNAT:
        return "cgnat"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved or address == ipaddress.IPv4Address("255.255.255.255"):
        return "reserved"
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"):
        if address in ipaddress.ip_network(net):
            return "private"
    if not address.is_global:
        return "non-global"  # TEST-NETs, benchmarking 198.18/15, 192.0.0/24, ...
    return None


def classify_address(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast address (``loopback``, ``private``, ``metadata``, ...), or
    ``None`` when it is."""
    if isinstance(address, ipaddress.IPv4Address):
        return _classify_v4(address)
    if address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    if address in _METADATA_ADDRESSES:
        return "metadata"
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        reason = _classify_v4(embedded)
        if reason is not None:
            return reason
        # A mapped public v4 is as good as the v4 itself; other transition forms are still judged below.
        if address.ipv4_mapped is not None:
            return None
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address in ipaddress.ip_network("fc00::/7"):
        return "unique-local"
    if address.is_site_local:
        return "reserved"
    if address in _NAT64_LOCAL:
        return "private"
    if embedded is not None and address in _IPV4_COMPATIBLE:
        return "reserved"  # deprecated IPv4-compatible form: nothing legitimate uses it
    if address.is_reserved:
        return "reserved"
    if not address.is_global and embedded is None:
        return "non-global"
    return None


# --- the check -----------------------------------------------------------------------------------------

def _default_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        seen[str(sockaddr[0]).split("%", 1)[0]] = None
    return list(seen)


def _blocked(host: str, reason: str, detail: str = "") -> BlockedUrlError:
    what = f" ({detail})" if detail else ""
    return BlockedUrlError(
        f"SSRF guard blocked request to {host}: {reason} address{what}; internal/reserved addresses are not "
        "allowed (set allow_private or allow_hosts for a self-hosted service)",
        host=host,
        reason=reason,
    )


@attrs.frozen
class _AllowList:
    names: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def build(cls, entries: Iterable[str]) -> _AllowList:
        names: set[str] = set()
        networks = []
        for raw in entries:
            entry = str(raw).strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            literal = parse_ip_host(entry)
            if literal is not None:
                networks.append(ipaddress.ip_network(literal))
            else:
                names.add(entry)
        return cls(frozenset(names), tuple(networks))

    def admits(self, host: str, address: IPAddress) -> bool:
        if host in self.names:
            return True
        return any(address.version == net.version and address in net for net in self.networks)


def parse_url(url: str) -> ParsedUrl:
    """The structural half of :func:`check_url`: scheme, credentials, host and port, with no DNS lookup
    and no address policy (``addresses`` is empty unless the host is an IP literal). Use it to validate
    configuration early; :func:`check_url` must still run before each request."""
    if not isinstance(url, str) or not url.strip():
        raise BlockedUrlError("SSRF guard blocked request: the URL is empty", reason="invalid")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise BlockedUrlError(f"SSRF guard blocked request: the URL cannot be parsed ({exc})",
                              reason="invalid") from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if scheme not in ("http", "https"):
        shown = f"{scheme}:" if scheme else "(none)"
        raise BlockedUrlError(f"SSRF guard blocked request to {host or '(no host)'}: scheme {shown} is not "
                              "allowed (only http and https)", host=host, reason="scheme")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise BlockedUrlError(f"SSRF guard blocked request to {host or '(no host)'}: credentials in the URL "
                              "are not allowed (pass an api_key option instead)", host=host, reason="credentials")
    if not host:
        raise BlockedUrlError("SSRF guard blocked request: the URL has no host", reason="invalid")
    if any(ch.isspace() or ord(ch) < 0x21 for ch in host):
        raise BlockedUrlError(f"SSRF guard blocked request to {host!r}: invalid host", host=host, reason="invalid")
    port = port if port is not None else (443 if scheme == "https" else 80)
    literal = parse_ip_host(host)
    if literal is not None:
        host = str(literal)
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    normalised = urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))
    return ParsedUrl(url=normalised, scheme=scheme, host=host, port=port, path=parts.path or "/",
                     addresses=(host,) if literal is not None else ())


def check_url(
    url: str,
    *,
    allow_private: bool = False,
    allow_hosts: Iterable[str] = (),
    resolver: Resolver | None = None,
) -> ParsedUrl:
    """Approve ``url`` for an outbound request or raise :class:`BlockedUrlError`.

    ``allow_private`` admits loopback, private, unique-local and CGNAT addresses. ``allow_hosts`` admits
    hostnames (exact match), IP addresses and CIDR networks. Cloud metadata endpoints, link-local,
    multicast, reserved and unspecified addresses are blocked whatever is allowed. ``resolver`` replaces
    DNS (tests); it must return every address the host resolves to.
    """
    parsed = parse_url(url)
    host, port = parsed.host, parsed.port
    allow = _AllowList.build(allow_hosts)

    if host in METADATA_HOSTS or host.endswith(".metadata.google.internal"):
        raise _blocked(host, "metadata", "cloud metadata service")

    literal = parse_ip_host(host)
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            resolved = (resolver or _default_resolver)(host, port)
        except (OSError, UnicodeError) as exc:
            raise HostResolutionError(f"SSRF guard could not resolve {host}: {exc}", host=host,
                                      reason="unresolvable") from None
        addresses = []
        for text in resolved:
            try:
                addresses.append(ipaddress.ip_address(str(text).split("%", 1)[0]))
            except ValueError:
                raise HostResolutionError(f"SSRF guard could not resolve {host}: resolver returned {text!r}",
                                          host=host, reason="unresolvable") from None
        if not addresses:
            raise HostResolutionError(f"SSRF guard could not resolve {host}: no addresses", host=host,
                                      reason="unresolvable")

    for address in addresses:
        reason = classify_address(address)
        if reason is None:
            continue
        if reason in ("metadata", "link-local", "multicast", "reserved", "unspecified"):
            raise _blocked(host, reason, str(address) if str(address) != host else "")
        if (allow_private and reason in _PRIVATE_REASONS) or allow.admits(host, address):
            continue
        raise _blocked(host, reason, str(address) if str(address) != host else "")

    return attrs.evolve(parsed, addresses=tuple(str(a) for a in addresses))


def check_configured_url(url: str, field: str, *, allow_private: bool = False,
                         allow_hosts: Iterable[str] = ()) -> None:
    """Check a configured base URL when the component is built, without DNS: a blocked literal address (in
    any spelling, ``2130706433`` included) or a metadata hostname is a :class:`ConfigError` naming
    ``field`` at open time. A hostname is checked again, resolved, on every request."""
    from memroute.errors import ConfigError

    try:
        parsed = parse_url(url)
        if parse_ip_host(parsed.host) is not None or parsed.host in METADATA_HOSTS:
            check_url(url, allow_private=allow_private, allow_hosts=allow_hosts)
    except BlockedUrlError as exc:
        hint = "" if allow_private else " (allow_private = true admits loopback and private addresses)"
        raise ConfigError(f"{field}: {exc}{hint}", [(field, "blocked")]) from None


def guarded_httpx_transport(*, allow_private: bool = False, allow_hosts: Iterable[str] = (),
                            resolver: Resolver | None = None) -> Any:
    """An ``httpx`` transport that runs :func:`check_url` on every request and connects to the address the
    check approved (the URL's host becomes that address; ``Host`` and the TLS server name keep the original
    name), so DNS rebinding cannot steer the connection elsewhere. Environment proxies are never used."""
    import httpx

    allowed = tuple(allow_hosts)

    class GuardedTransport(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            parsed = check_url(str(request.url), allow_private=allow_private, allow_hosts=allowed,
                               resolver=resolver)
            host = request.url.host
            address = parsed.addresses[0]
            if host != address:
                request.url = request.url.copy_with(host=address)
                if parse_ip_host(host) is None:  # a name: TLS verifies the certificate against it
                    request.extensions = {**request.extensions, "sni_hostname": host}
            return super().handle_request(request)

    return GuardedTransport(trust_env=False)


# --- requests integration ------------------------------------------------------------------------------

def _make_pinned_adapter(pins: Mapping[tuple[str, int], tuple[str, ...]], lock: threading.Lock) -> Any:
    """An ``HTTPAdapter`` whose connections open their socket to the pinned (checked) address of their host
    rather than resolving the name again."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
    from urllib3.util.connection import create_connection

    def pinned_new_conn(conn: Any) -> Any:
        key = (conn.host.strip("[]").lower(), conn.port)
        with lock:
            pinned = pins.get(key)
        if not pinned:
            # Every request goes through GuardedSession.send, which pins before sending: a connection
            # without a pin means something bypassed the guard.
            raise NewConnectionError(conn, f"SSRF guard: no checked address for {conn.host}")
        # Connect to a checked address (each in turn, as create_connection does for a name's addresses);
        # conn.host (the name) stays as it is for SNI and certificate verification.
        error: OSError | None = None
        for address in pinned:
            try:
                return create_connection((address, conn.port), conn.timeout, source_address=conn.source_address,
                                         socket_options=conn.socket_options)
            except TimeoutError as exc:
                raise ConnectTimeoutError(conn, f"Connection to {conn.host} timed out") from exc
            except OSError as exc:
                error = exc
        raise NewConnectionError(conn, f"Failed to establish a new connection: {error}") from error

    class PinnedHTTPConnection(HTTPConnection):
        def _new_conn(self) -> Any:
            return pinned_new_conn(self)

    class PinnedHTTPSConnection(HTTPSConnection):
        def _new_conn(self) -> Any:
            return pinned_new_conn(self)

    class PinnedHTTPPool(HTTPConnectionPool):
        ConnectionCls = PinnedHTTPConnection

    class PinnedHTTPSPool(HTTPSConnectionPool):
        ConnectionCls = PinnedHTTPSConnection

    class PinnedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": PinnedHTTPPool, "https": PinnedHTTPSPool}

        def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
            raise ValueError("SSRF guard: proxies are not supported by GuardedSession")

    return PinnedAdapter()


def _session_base() -> type:
    import requests

    return requests.Session


class GuardedSession(_session_base()):  # type: ignore[misc]
    """A ``requests.Session`` that runs :func:`check_url` on every request it sends.

    * Redirects are **not followed** by default (``max_redirects=0``): the 3xx response is returned and the
      caller decides. With ``max_redirects=N`` (at most 3 is sensible) each hop is checked again before it
      is sent, so a redirect to a blocked address raises :class:`BlockedUrlError`.
    * Each connection is pinned to an address the check approved (see the module docstring), which defeats
      DNS rebinding. Connections are reused per host; a pin is refreshed by every check.
    * ``trust_env`` is off: environment proxies would bypass pinning and ``.netrc`` could inject
      credentials. Proxies are refused.
    """

    def __init__(
        self,
        *,
        allow_private: bool = False,
        allow_hosts: Iterable[str] = (),
        max_redirects: int = 0,
        resolver: Resolver | None = None,
    ) -> None:
        super().__init__()
        self.allow_private = allow_private
        self.allow_hosts = tuple(allow_hosts)
        self.resolver = resolver
        self.redirect_limit = max(0, int(max_redirects))
        # requests computes the "next" request of an unfollowed 3xx too, and raises when its own limit is
        # 0; our limit is enforced by forcing allow_redirects=False instead.
        self.max_redirects = max(1, self.redirect_limit)
        self.trust_env = False
        self._pins: dict[tuple[str, int], tuple[str, ...]] = {}
        self._pin_lock = threading.Lock()
        adapter = _make_pinned_adapter(self._pins, self._pin_lock)
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    def check(self, url: str) -> ParsedUrl:
        """Run the guard on ``url`` with this session's policy (without sending anything)."""
        return check_url(url, allow_private=self.allow_private, allow_hosts=self.allow_hosts,
                         resolver=self.resolver)

    def request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        if self.redirect_limit == 0:
            kwargs["allow_redirects"] = False
        return super().request(method, url, *args, **kwargs)

    def send(self, request: Any, **kwargs: Any) -> Any:
        # Called for the first request and again by resolve_redirects for every hop: one check per hop.
        if kwargs.get("proxies"):
            raise BlockedUrlError("SSRF guard: proxies are not supported", reason="proxy")
        parsed = self.check(request.url)
        # The URL's own spelling of the host is what urllib3's connection sees ("2130706433" stays as
        # written), so pin under both it and the normalised form.
        raw_host = (urlsplit(request.url).hostname or "").rstrip(".").lower()
        with self._pin_lock:
            for host in {raw_host, parsed.host.lower()}:
                self._pins[(host, parsed.port)] = parsed.addresses
        if self.redirect_limit == 0:
            kwargs["allow_redirects"] = False
        return super().send(request, **kwargs)
