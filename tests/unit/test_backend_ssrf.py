"""The Obsidian and Notion backends send their bearer token only where the SSRF guard approves (issue 16).

Before the fix neither ``base_url`` went through :mod:`memroute.config.netguard`: both sent the token to
``http://2130706433:PORT`` (127.0.0.1 spelt as one number), and nothing stopped a metadata address. A small
loopback server records every request, so "refused" means the token never left the process.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from memroute.errors import BackendUnavailableError, ConfigError
from memroute.models import ListFilter
from memroute_builtins.backends.notion.backend import NotionBackend, NotionSettings
from memroute_builtins.backends.obsidian.backend import ObsidianBackend, ObsidianSettings

DATABASE = "ab" * 16


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def _answer(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _obsidian(base_url: str, **options: object) -> ObsidianBackend:
    return ObsidianBackend("vault", ObsidianSettings(api_key="k" * 64, base_url=base_url, timeout=2,
                                                     **options))  # type: ignore[arg-type]


def _notion(base_url: str, **options: object) -> NotionBackend:
    return NotionBackend("notes", NotionSettings(token="secret_t", database_id=DATABASE, base_url=base_url,
                                                 max_retries=0, requests_per_second=0,
                                                 **options))  # type: ignore[arg-type]


ALWAYS_BLOCKED = ["http://169.254.169.254:{port}", "http://2852039166:{port}", "http://[fe80::1]:{port}",
                  "http://metadata.google.internal:{port}", "http://0.0.0.0:{port}"]


@pytest.mark.parametrize("template", ALWAYS_BLOCKED)
def test_metadata_and_link_local_are_refused_at_open_whatever_allow_private_says(template, port):
    url = template.format(port=port)
    for allow_private in (True, False):
        with pytest.raises(ConfigError, match="base_url"):
            _obsidian(url, allow_private=allow_private)
        with pytest.raises(ConfigError, match="base_url"):
            _notion(url, allow_private=allow_private)
    assert _Recorder.seen == []


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1"])
def test_numeric_loopback_spellings_need_allow_private(host, port):
    url = f"http://{host}:{port}"
    with pytest.raises(ConfigError, match="base_url"):
        _notion(url)  # Notion's default: public addresses only, like the http backend
    with pytest.raises(ConfigError, match="base_url"):
        _obsidian(url, allow_private=False)
    assert _Recorder.seen == []


def test_a_hostname_is_checked_when_the_request_is_made(port):
    """``localhost`` passes the open-time check (no DNS then) and is refused, resolved, per request."""
    notion = _notion(f"http://localhost:{port}")
    with pytest.raises(BackendUnavailableError, match="SSRF guard"):
        notion.list(ListFilter(api_key_id="a"))
    obsidian = _obsidian(f"http://localhost:{port}", allow_private=False)
    with pytest.raises(BackendUnavailableError, match="SSRF guard"):
        obsidian.list(ListFilter(api_key_id="a"))
    obsidian.close()
    assert _Recorder.seen == [], "a bearer token left the process"


def test_obsidian_default_loopback_stays_allowed(port):
    backend = _obsidian(f"http://127.0.0.1:{port}")
    assert backend.health().ok is False  # the recorder answers 500: what matters is that it was asked
    backend.close()
    assert _Recorder.seen and _Recorder.seen[0] == "Bearer " + "k" * 64


def test_notion_allow_private_admits_a_loopback_test_server(port):
    backend = _notion(f"http://2130706433:{port}", allow_private=True)
    with pytest.raises(BackendUnavailableError):
        backend.list(ListFilter(api_key_id="a"))  # 500 from the recorder
    assert _Recorder.seen, "allow_private = true should admit a loopback server"
