"""The SSRF guard: URL shape, every address class, the allow-list, and the requests session (redirects,
pinning). DNS is replaced by an injected resolver, so nothing leaves the machine."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from memroute.config.netguard import (
    BlockedUrlError,
    GuardedSession,
    HostResolutionError,
    check_url,
    classify_address,
    parse_ip_host,
)
from memroute.errors import MemrouteError, ValidationError


def fake_dns(table: dict[str, list[str]]):
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        if host not in table:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return table[host]

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


PUBLIC_DNS = fake_dns({"api.example.com": ["93.184.216.34"], "dual.example.com": ["93.184.216.34", "2606:2800::1"]})


def blocked(url: str, **kwargs) -> BlockedUrlError:
    kwargs.setdefault("resolver", PUBLIC_DNS)
    with pytest.raises(BlockedUrlError) as info:
        check_url(url, **kwargs)
    assert "SSRF guard" in str(info.value)
    return info.value


# --- the reference's SSRF cases (generic-backend tests 27-35) as behaviours ------------------------------

def test_ref27_loopback_with_port_is_blocked():
    err = blocked("http://127.0.0.1:20128/api")
    assert err.reason == "loopback" and "127.0.0.1" in str(err)


@pytest.mark.parametrize("url", ["http://10.0.0.5/", "http://192.168.1.100/", "http://172.16.0.1/", "http://172.31.255.255/"])
def test_ref28_29_private_ranges_are_blocked(url):
    assert blocked(url).reason == "private"


def test_ref30_metadata_address_is_blocked():
    assert blocked("http://169.254.169.254/latest/meta-data/").reason == "metadata"


def test_ref31_ipv6_loopback_is_blocked():
    assert blocked("http://[::1]:8080/").reason == "loopback"


def test_ref32_file_scheme_is_blocked():
    assert blocked("file:///etc/passwd").reason == "scheme"


def test_ref33_public_ip_is_allowed():
    parsed = check_url("http://93.184.216.34:8080/x", resolver=PUBLIC_DNS)
    assert parsed.host == "93.184.216.34" and parsed.port == 8080 and parsed.addresses == ("93.184.216.34",)


def test_ref34_public_hostname_is_allowed_after_resolution():
    parsed = check_url("https://API.Example.com/v1", resolver=PUBLIC_DNS)
    assert parsed.host == "api.example.com" and parsed.port == 443
    assert parsed.url == "https://api.example.com/v1"
    assert parsed.addresses == ("93.184.216.34",)


def test_ref35_blocked_error_is_a_memroute_validation_error():
    err = blocked("http://127.0.0.1/")
    assert isinstance(err, ValidationError) and isinstance(err, MemrouteError)


# --- the reference's gaps, closed ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[::ffff:7f00:1]/", "loopback"),          # IPv4-mapped 127.0.0.1, hex form
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://[::127.0.0.1]/", "loopback"),           # IPv4-compatible
        ("http://[64:ff9b::7f00:1]/", "loopback"),       # NAT64
        ("http://[64:ff9b::a9fe:a9fe]/", "metadata"),
        ("http://[2002:7f00:1::]/", "loopback"),         # 6to4 carrying 127.0.0.1
        ("http://[2002:c0a8:0101::1]/", "private"),      # 6to4 carrying 192.168.1.1
        ("http://100.64.0.1/", "cgnat"),
        ("http://100.127.255.254/", "cgnat"),
        ("http://100.100.100.200/", "metadata"),         # Alibaba metadata (inside CGNAT)
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fc00::1]/", "unique-local"),
        ("http://[fd12:3456::1]/", "unique-local"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://0.1.2.3/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://255.255.255.255/", "reserved"),
        ("http://169.254.170.2/", "link-local"),          # ECS task metadata
        ("http://192.0.2.1/", "non-global"),              # TEST-NET-1
        ("http://198.18.0.1/", "non-global"),             # benchmarking
    ],
)
def test_address_classes_are_blocked(url, reason):
    assert blocked(url).reason == reason


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "017700000001", "127.0.1", "0x7F.0.0.1"],
)
def test_numeric_ipv4_spellings_are_caught(host):
    err = blocked(f"http://{host}/")
    assert err.reason == "loopback"


def test_numeric_spelling_of_a_private_address():
    assert blocked("http://167772165/").reason == "private"  # 10.0.0.5


def test_parse_ip_host_spellings():
    assert str(parse_ip_host("3232235777")) == "192.168.1.1"
    assert str(parse_ip_host("0xc0.0xa8.1.1")) == "192.168.1.1"
    assert str(parse_ip_host("[::1]")) == "::1"
    assert parse_ip_host("example.com") is None
    assert parse_ip_host("256.1.1.1") is None
    assert parse_ip_host("1.2.3.4.5") is None
    assert parse_ip_host("08.1.1.1") is None  # not valid octal


@pytest.mark.parametrize("host", ["metadata.google.internal", "metadata.goog", "METADATA.GOOGLE.INTERNAL.",
                                  "metadata"])
def test_metadata_hostnames_blocked_without_resolution(host):
    resolver = fake_dns({})
    err = blocked(f"http://{host}/computeMetadata/v1/", resolver=resolver, allow_private=True,
                  allow_hosts=[host])
    assert err.reason == "metadata"
    assert resolver.calls == []


def test_hostname_resolving_to_loopback_is_blocked():
    resolver = fake_dns({"localhost": ["127.0.0.1", "::1"], "evil.example": ["10.1.2.3"]})
    assert blocked("http://localhost:11434/", resolver=resolver).reason == "loopback"
    err = blocked("http://evil.example/", resolver=resolver)
    assert err.reason == "private" and "evil.example" in str(err) and "10.1.2.3" in str(err)


def test_every_resolved_address_is_checked():
    resolver = fake_dns({"mixed.example": ["93.184.216.34", "127.0.0.1"]})
    assert blocked("https://mixed.example/", resolver=resolver).reason == "loopback"
    ok = check_url("https://dual.example.com/", resolver=PUBLIC_DNS)
    assert ok.addresses == ("93.184.216.34", "2606:2800::1")


def test_hostname_resolving_to_mapped_ipv6_is_blocked():
    resolver = fake_dns({"sneaky.example": ["::ffff:169.254.169.254"]})
    assert blocked("http://sneaky.example/", resolver=resolver, allow_private=True).reason == "metadata"


def test_unresolvable_host():
    with pytest.raises(HostResolutionError) as info:
        check_url("http://nope.invalid/", resolver=fake_dns({}))
    assert info.value.reason == "unresolvable" and "nope.invalid" in str(info.value)
    with pytest.raises(HostResolutionError):
        check_url("http://empty.example/", resolver=fake_dns({"empty.example": []}))


# --- URL shape -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["ftp://example.com/", "gopher://example.com/", "javascript:alert(1)",
                                 "data:text/plain,hi", "example.com/path", "//example.com/x"])
def test_non_http_schemes_are_blocked(url):
    assert blocked(url).reason == "scheme"


@pytest.mark.parametrize("url", ["http://user:hunter2@api.example.com/", "https://token@api.example.com/",
                                 "http://:hunter2@api.example.com/", "http://api.example.com@127.0.0.1/"])
def test_credentials_in_url_are_rejected_and_never_echoed(url):
    err = blocked(url)
    assert err.reason == "credentials"
    assert "hunter2" not in str(err) and "token@" not in str(err)


@pytest.mark.parametrize("url", ["", "   ", "http://", "http:///path", "http://[::1/", "http://host:99999/"])
def test_malformed_urls(url):
    err = blocked(url)
    assert err.reason in ("invalid", "scheme")


def test_non_string_url():
    with pytest.raises(BlockedUrlError):
        check_url(None)  # type: ignore[arg-type]


# --- allow-list ------------------------------------------------------------------------------------------

def test_allow_private_admits_loopback_private_and_cgnat():
    resolver = fake_dns({"ollama.lan": ["192.168.1.20"], "localhost": ["127.0.0.1", "::1"]})
    for url in ("http://127.0.0.1:11434/v1", "http://[::1]:8000/", "http://10.0.0.5/", "http://100.64.1.1/",
                "http://ollama.lan:11434/", "http://localhost:8080/", "http://[fd12::1]/"):
        check_url(url, allow_private=True, resolver=resolver)


@pytest.mark.parametrize("url", ["http://169.254.169.254/", "http://100.100.100.200/", "http://[fd00:ec2::254]/",
                                 "http://[fe80::1]/", "http://0.0.0.0:8000/", "http://224.0.0.1/",
                                 "http://[::ffff:169.254.169.254]/"])
def test_allow_private_never_admits_metadata_link_local_or_unspecified(url):
    blocked(url, allow_private=True, allow_hosts=["0.0.0.0/0", "::/0"])


def test_allow_hosts_by_name_address_and_network():
    resolver = fake_dns({"embed.internal": ["10.9.8.7"], "other.internal": ["10.9.8.8"]})
    check_url("http://embed.internal/", allow_hosts=["embed.internal"], resolver=resolver)
    check_url("http://EMBED.internal./", allow_hosts=["Embed.Internal"], resolver=resolver)
    assert blocked("http://other.internal/", allow_hosts=["embed.internal"], resolver=resolver).reason == "private"
    check_url("http://other.internal/", allow_hosts=["10.9.8.0/24"], resolver=resolver)
    check_url("http://127.0.0.1:9000/", allow_hosts=["127.0.0.1"])
    check_url("http://[::1]:9000/", allow_hosts=["[::1]"])
    assert blocked("http://127.0.0.2/", allow_hosts=["127.0.0.1"]).reason == "loopback"


def test_classify_address_public():
    import ipaddress

    assert classify_address(ipaddress.ip_address("8.8.8.8")) is None
    assert classify_address(ipaddress.ip_address("2001:4860:4860::8888")) is None
    assert classify_address(ipaddress.ip_address("::ffff:8.8.8.8")) is None


# --- GuardedSession --------------------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/redirect"):
            target = self.path.split("to=", 1)[1]
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = f"host={self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_session_blocks_loopback_by_default(server):
    with GuardedSession() as session, pytest.raises(BlockedUrlError):
        session.get(f"http://127.0.0.1:{server}/")


def test_session_allows_loopback_when_opted_in(server):
    with GuardedSession(allow_private=True) as session:
        response = session.get(f"http://127.0.0.1:{server}/hello")
    assert response.status_code == 200 and response.text == f"host=127.0.0.1:{server}"


def test_session_connects_to_the_checked_address_not_a_fresh_lookup(server):
    # "rebind.test" does not exist in real DNS: the request can only succeed because the connection is
    # pinned to the address the check approved (and the Host header still names the host).
    resolver = fake_dns({"rebind.test": ["127.0.0.1"]})
    with GuardedSession(allow_hosts=["rebind.test"], resolver=resolver) as session:
        response = session.get(f"http://rebind.test:{server}/")
        assert response.text == f"host=rebind.test:{server}"
        session.get(f"http://rebind.test:{server}/again")
    assert resolver.calls == ["rebind.test", "rebind.test"]  # checked on every request


def test_session_rechecks_every_request(server):
    answers = iter([["127.0.0.1"], ["169.254.169.254"]])
    with GuardedSession(allow_private=True, resolver=lambda host, port: next(answers)) as session:
        assert session.get(f"http://flip.test:{server}/").status_code == 200
        with pytest.raises(BlockedUrlError):
            session.get(f"http://flip.test:{server}/")


def test_session_does_not_follow_redirects_by_default(server):
    with GuardedSession(allow_private=True) as session:
        response = session.get(f"http://127.0.0.1:{server}/redirect?to=http://127.0.0.1:{server}/final",
                               allow_redirects=True)
    assert response.status_code == 302


def test_session_follows_redirects_with_recheck_when_enabled(server):
    with GuardedSession(allow_private=True, max_redirects=3) as session:
        ok = session.get(f"http://127.0.0.1:{server}/redirect?to=http://127.0.0.1:{server}/final")
        assert ok.status_code == 200 and ok.url.endswith("/final")
        with pytest.raises(BlockedUrlError) as info:
            session.get(f"http://127.0.0.1:{server}/redirect?to=http://169.254.169.254/latest/meta-data/")
    assert info.value.reason == "metadata"


def test_session_redirect_to_blocked_private_address_without_opt_in(server):
    resolver = fake_dns({"public.test": ["127.0.0.1"]})
    with GuardedSession(allow_hosts=["public.test"], max_redirects=3, resolver=resolver) as session, \
            pytest.raises(BlockedUrlError):
        session.get(f"http://public.test:{server}/redirect?to=http://10.0.0.5/")


def test_session_refuses_proxies(server):
    with GuardedSession(allow_private=True) as session, pytest.raises((BlockedUrlError, ValueError)):
        session.get(f"http://127.0.0.1:{server}/", proxies={"http": "http://127.0.0.1:1"})


def test_parse_url_is_structural_only():
    from memroute.config.netguard import parse_url

    parsed = parse_url("HTTP://Embed.Example.com:8080/v1/")
    assert (parsed.scheme, parsed.host, parsed.port, parsed.addresses) == ("http", "embed.example.com", 8080, ())
    assert parse_url("http://0x7f000001/").host == "127.0.0.1"  # no policy here: check_url applies it
    with pytest.raises(BlockedUrlError):
        parse_url("http://u:p@example.com/")


# --- TLS with a pinned connection: the name still drives SNI and certificate checks ---------------------

@pytest.fixture
def tls_server(tmp_path):
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=rebind.test",
         "-addext", "subjectAltName=DNS:rebind.test", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], str(cert)
    httpd.shutdown()
    httpd.server_close()


def test_https_pinned_connection_verifies_the_hostname(tls_server):
    import requests

    port, cert = tls_server
    resolver = fake_dns({"rebind.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    with GuardedSession(allow_hosts=["rebind.test", "other.test"], resolver=resolver) as session:
        response = session.get(f"https://rebind.test:{port}/", verify=cert)
        assert response.status_code == 200 and response.text == f"host=rebind.test:{port}"
        # Same pinned address, another name: the certificate does not cover it, so TLS must refuse.
        with pytest.raises(requests.exceptions.SSLError):
            session.get(f"https://other.test:{port}/", verify=cert)


def test_session_tries_each_checked_address_in_turn(server):
    # The first address refuses connections (nothing listens on 127.0.0.2:port on Linux loopback unless
    # bound); the second works. Both were checked; the connection falls back like a normal resolver's would.
    resolver = fake_dns({"multi.test": ["127.0.0.2", "127.0.0.1"]})
    with GuardedSession(allow_private=True, resolver=resolver) as session:
        assert session.get(f"http://multi.test:{server}/").status_code == 200
