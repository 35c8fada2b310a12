"""The reference system's 35 ``generic-backend.test.ts`` cases (reference §3.1), as behaviours of memroute's
HTTP backend against a real loopback server (``tests/servers/memory_http_server.py``).

The reference mocked ``fetch``; here every request crosses a real socket to a real server that keeps a real
store, and assertions look at what the server received. Where the reference *asserted a defect* the case
asserts memroute's fix instead, and says so: dates are revived (9), a leading-slash endpoint stays under the
base path (10), not-found is a 404 status (12, 16, 18), a hostname is resolved and checked (34 plus the
hostname cases in ``test_http_backend.py``), the scheme check happens at configuration time (32).

How the SSRF cases stay honest and offline (see ``tests/servers/fixtures.py``): the base URL is the
reference's ``http://memory.test:8080``. The backend gets a *resolver* (the guard's injection point for DNS)
that answers from a fake table — ``memory.test`` and ``api.example.com`` resolve to the public address
``93.184.216.34`` — so the real guard does its own resolution and judges real addresses. The guarded session
then connects to the address the guard approved; the fake network translates that public address to the
loopback server at the socket layer (a NAT), and refuses every other non-loopback destination. So "allowed"
means: the real guard approved a public address and the request reached a server; "blocked" means: the real
guard refused and no connection was even attempted (``fake_network.connections`` stays empty).

Case 23 (``options`` as a JSON query parameter) has no counterpart: memroute's :class:`SearchQuery` has no
opaque options bag. It is kept as the behaviour that matters there: structured search parameters
(session, retention, text with reserved characters) arrive at the server exactly, URL-encoded.
"""

from __future__ import annotations

import re
import socket
from datetime import datetime
from typing import Any

import pytest

from memroute.config.serialization import memory_to_dict, structure_config
from memroute.errors import BackendError, BackendUnavailableError, ConfigError
from memroute.interfaces import ComponentContext
from memroute.models import ListFilter, Memory, MemoryPatch, NewMemory, SearchQuery
from memroute.plugins import make_plugin_manager
from memroute_builtins.backends.http import HttpBackend, HttpBackendSettings
from tests.servers import fixtures
from tests.servers.fixtures import FakeNetwork
from tests.servers.memory_http_server import MemoryHttpServer

fake_network = fixtures.fake_network
root_server = fixtures.root_server

BASE = "http://memory.test:8080"
NOW = "2026-01-02T03:04:05Z"


def make(network: FakeNetwork, name: str = "test-backend", **options: Any) -> HttpBackend:
    options.setdefault("base_url", BASE)
    settings = structure_config(options, HttpBackendSettings)
    return HttpBackend(name, settings, resolver=network.resolve, sleep=lambda _s: None)


def seed(server: MemoryHttpServer, memory_id: str = "mem-001", api_key_id: str = "key-1", **fields: Any) -> Memory:
    data = {"id": memory_id, "api_key_id": api_key_id, "key": f"k-{memory_id}", "content": "hello world",
            "created_at": NOW, "updated_at": NOW, **fields}
    memory = Memory(**data)
    server.store.put(memory)
    return memory


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- constructor -----------------------------------------------------------------------------------------

def test_ref_01_constructor_name_comes_from_the_configured_instance(fake_network: FakeNetwork) -> None:
    backend = make(fake_network)
    assert backend.name == "test-backend"
    assert backend.describe()["base_url"] == BASE + "/"


def test_ref_02_constructor_accepts_a_custom_timeout_and_rejects_non_positive(fake_network: FakeNetwork) -> None:
    assert make(fake_network, timeout=5).settings.timeout == 5.0
    assert make(fake_network).settings.timeout == 30.0
    for bad in (0, -1):
        with pytest.raises(ConfigError, match="timeout"):
            make(fake_network, timeout=bad)


# --- health ----------------------------------------------------------------------------------------------

def test_ref_03_health_ok_on_200(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    result = make(fake_network).health()
    assert result.ok and result.error is None and result.latency_ms >= 0
    assert [(r.method, r.path) for r in root_server.requests] == [("GET", "/health")]


def test_ref_04_health_reports_http_500(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    root_server.knobs.fail_status = 500
    result = make(fake_network).health()
    assert not result.ok and "HTTP 500" in (result.error or "")


def test_ref_05_health_reports_connection_refused(fake_network: FakeNetwork) -> None:
    fake_network.nat[("93.184.216.34", 8080)] = ("127.0.0.1", closed_port())
    result = make(fake_network).health()
    assert not result.ok and "ECONNREFUSED" in (result.error or "")


def test_ref_06_health_latency_covers_a_slow_answer(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    root_server.knobs.delay_s = 0.01
    result = make(fake_network).health()
    assert result.ok and result.latency_ms >= 5  # a lower bound: the server slept 10 ms before answering


# --- initialize -------------------------------------------------------------------------------------------

def test_ref_07_initialize_fails_clearly_when_health_fails(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    root_server.knobs.fail_status = 503
    expected = re.escape("Cannot connect to test-backend at http://memory.test:8080/")
    with pytest.raises(BackendUnavailableError, match=expected):
        make(fake_network).initialize()


def test_ref_08_initialize_succeeds_against_a_healthy_server(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    backend = make(fake_network)
    assert backend.initialize() is None
    backend.get("mem-404")  # no second health probe before calls (the reference probed on every call)
    assert root_server.count("GET", "/health") == 1


# --- create ----------------------------------------------------------------------------------------------

def test_ref_09_create_posts_and_returns_a_parsed_memory_with_dates(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    new = NewMemory(api_key_id="key-1", key="pref:tea", content="likes tea", metadata={"a": 1}, now=NOW)
    created = make(fake_network).create(new)
    # Fixed defect: the reference returned the JSON verbatim (dates as strings); memroute parses the body.
    assert isinstance(created, Memory) and isinstance(created.created_at, datetime)
    assert created.id == new.id and created.created_at == new.now and created.metadata == {"a": 1}
    (request,) = [r for r in root_server.requests if r.method == "POST"]
    assert request.path == "/memories" and request.headers["Content-Type"] == "application/json"
    assert root_server.store.get(new.id) is not None  # the server stored memroute's id


def test_ref_10_create_uses_a_custom_endpoint_below_the_base_path(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    root_server.path_aliases["/api/v1/mem"] = "/memories"
    make(fake_network, endpoints={"create": "/api/v1/mem"}).create(NewMemory(api_key_id="k", key="a", content="b"))
    assert root_server.requests[-1].path == "/api/v1/mem"
    # Fixed defect: with a base path, a leading-slash endpoint stays below it (reference: replaced the path).
    make(fake_network, base_url=BASE + "/api", endpoints={"create": "/v1/mem"}).create(
        NewMemory(api_key_id="k", key="c", content="d"))
    assert root_server.requests[-1].path == "/api/v1/mem"


# --- get -------------------------------------------------------------------------------------------------

def test_ref_11_get_fetches_by_id(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    stored = seed(root_server)
    memory = make(fake_network).get("mem-001")
    assert memory is not None and memory.same_as(stored)
    assert root_server.requests[-1].path == "/memories/mem-001"


def test_ref_12_get_returns_none_on_a_404_status(fake_network: FakeNetwork) -> None:
    assert make(fake_network).get("mem-404") is None


def test_ref_13_get_raises_on_500_without_retrying(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    root_server.knobs.fail_status = 500
    root_server.knobs.fail_body = '{"error": "boom 404 inside the text"}'
    # Fixed defect: a 500 whose text contains "404" is an error, not "not found".
    with pytest.raises(BackendError, match="HTTP 500"):
        make(fake_network).get("mem-001")
    assert root_server.count("GET", "/memories/") == 1  # 500 is not a transient status: no retry


def test_ref_14_get_with_a_custom_memory_id_template(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    seed(root_server)
    root_server.path_aliases["/records/"] = "/memories/"
    backend = make(fake_network, endpoints={"get": "/records/{memoryId}"}, path_params={"memoryId": "memoryId"})
    memory = backend.get("mem-001")
    assert memory is not None and memory.id == "mem-001"
    assert root_server.requests[-1].path == "/records/mem-001"


# --- update / delete -------------------------------------------------------------------------------------

def test_ref_15_update_patch_with_204_reads_the_result_back(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    seed(root_server)
    root_server.empty_write_responses = True
    updated = make(fake_network).update("mem-001", MemoryPatch(content="changed"))
    assert updated is not None and updated.content == "changed"
    patch = next(r for r in root_server.requests if r.method == "PATCH")
    assert patch.path == "/memories/mem-001"


def test_ref_16_update_returns_none_on_404(fake_network: FakeNetwork) -> None:
    assert make(fake_network).update("mem-404", MemoryPatch(content="x")) is None


def test_ref_17_delete_returns_true_on_204(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    seed(root_server)
    assert make(fake_network).delete("mem-001") is True
    assert root_server.requests[-1].method == "DELETE" and root_server.requests[-1].path == "/memories/mem-001"
    assert root_server.store.get("mem-001") is None


def test_ref_18_delete_returns_false_on_404(fake_network: FakeNetwork) -> None:
    assert make(fake_network).delete("mem-404") is False


# --- list ------------------------------------------------------------------------------------------------

def test_ref_19_list_sends_owner_limit_offset_and_parses_the_page(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    seed(root_server)
    seed(root_server, "mem-002", api_key_id="key-2")
    page = make(fake_network).list(ListFilter(api_key_id="key-1", limit=10, offset=0))
    query = root_server.requests[-1].query
    assert query["api_key_id"] == ["key-1"] and query["limit"] == ["10"] and query["offset"] == ["0"]
    assert len(page.data) == 1 and page.total == 1 and page.data[0].api_key_id == "key-1"


def test_ref_20_list_uses_custom_query_names(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    seed(root_server)
    root_server.query_aliases.update({"owner": "api_key_id", "count": "limit"})
    # Both the protocol names and the reference's camelCase names are accepted as mapping keys.
    backend = make(fake_network, query_params={"apiKeyId": "owner", "limit": "count"})
    page = backend.list(ListFilter(api_key_id="key-1", limit=10))
    query = root_server.requests[-1].query
    assert query["owner"] == ["key-1"] and query["count"] == ["10"] and "api_key_id" not in query
    assert page.total == 1


# --- search ----------------------------------------------------------------------------------------------

def test_ref_21_search_sends_query_and_strategy(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    seed(root_server)
    hits = make(fake_network).search(SearchQuery(api_key_id="key-1", text="hello", strategy="semantic"))
    request = root_server.requests[-1]
    assert request.path == "/memories/search"
    assert request.query["query"] == ["hello"] and request.query["strategy"] == ["semantic"]
    assert len(hits) == 1 and hits[0].memory.id == "mem-001" and hits[0].score > 0


def test_ref_22_search_uses_a_custom_endpoint(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    seed(root_server)
    root_server.path_aliases["/api/search"] = "/memories/search"
    hits = make(fake_network, endpoints={"search": "/api/search"}).search(SearchQuery(api_key_id="key-1", text="hello"))
    assert root_server.requests[-1].path == "/api/search" and len(hits) == 1


def test_ref_23_search_parameters_arrive_exactly_url_encoded(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    seed(root_server, session_id="s 1&x=y")
    text = 'hello {"k": [1, 2]} & more=? #frag'
    hits = make(fake_network).search(
        SearchQuery(api_key_id="key-1", text=text, session_id="s 1&x=y", retention_days=7, now=NOW))
    query = root_server.requests[-1].query
    assert query["query"] == [text] and query["session_id"] == ["s 1&x=y"]
    assert query["retention_days"] == ["7"] and query["now"] == [NOW]
    assert [h.memory.id for h in hits] == ["mem-001"]


# --- auth and headers ------------------------------------------------------------------------------------

def test_ref_24_api_key_is_sent_as_bearer_and_wins_over_a_custom_authorization(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    make(fake_network, api_key="secret-123", headers={"Authorization": "Basic nope"}).health()
    assert root_server.requests[0].headers["Authorization"] == "Bearer secret-123"


def test_ref_25_custom_headers_are_sent_and_content_type_only_with_a_body(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    backend = make(fake_network, headers={"X-Api-Key": "xyz", "Notion-Version": "2025-09-03"})
    backend.health()
    backend.create(NewMemory(api_key_id="k", key="a", content="b"))
    get, post = root_server.requests
    for request in (get, post):
        assert request.headers["X-Api-Key"] == "xyz" and request.headers["Notion-Version"] == "2025-09-03"
    assert "Content-Type" not in get.headers  # fixed: the reference sent it on GETs too
    assert post.headers["Content-Type"] == "application/json"


# --- factory ---------------------------------------------------------------------------------------------

def test_ref_26_the_plugin_factory_builds_a_named_backend(fake_network: FakeNetwork, tmp_path: Any) -> None:
    from memroute.components import build_component

    pm = make_plugin_manager()
    context = ComponentContext(instance_name="fac", data_dir=tmp_path)
    backend = build_component(pm, "backend", "http", {"base_url": BASE}, context=context, path="backends.fac")
    assert isinstance(backend, HttpBackend) and backend.name == "fac"


# --- SSRF guard ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("case", "base_url"),
    [
        ("27", "http://127.0.0.1:20128"),
        ("28", "http://10.0.0.5"),
        ("29", "http://192.168.1.100"),
        ("30", "http://169.254.169.254"),
        ("31", "http://[::1]:8080"),
    ],
)
def test_ref_27_to_31_internal_addresses_are_blocked(fake_network: FakeNetwork, case: str, base_url: str) -> None:
    result = make(fake_network, base_url=base_url).health()
    assert not result.ok and "SSRF guard" in (result.error or ""), case
    assert fake_network.connections == []  # refused before any connection was attempted


def test_ref_30_metadata_stays_blocked_even_with_allow_private(fake_network: FakeNetwork) -> None:
    result = make(fake_network, base_url="http://169.254.169.254", allow_private=True).health()
    assert not result.ok and "SSRF guard" in (result.error or "")
    assert fake_network.connections == []


def test_ref_32_a_file_url_is_refused_at_configuration_time(fake_network: FakeNetwork) -> None:
    with pytest.raises(ConfigError, match="scheme 'file'"):
        make(fake_network, base_url="file:///etc/passwd")


def test_ref_33_a_public_ip_is_allowed(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    result = make(fake_network, base_url="http://93.184.216.34:8080").health()
    assert result.ok, result.error
    assert fake_network.connections == [("93.184.216.34", 8080)] and root_server.count("GET", "/health") == 1


def test_ref_34_a_public_hostname_is_allowed_after_resolution(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    result = make(fake_network, base_url="http://api.example.com:8080").health()
    assert result.ok, result.error
    assert "api.example.com" in fake_network.resolutions  # the guard resolved it and checked the address
    assert root_server.count("GET", "/health") == 1


def test_ref_35_create_against_loopback_is_refused_by_the_guard(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    backend = make(fake_network, base_url=f"http://127.0.0.1:{root_server.port}")
    with pytest.raises(BackendUnavailableError, match="SSRF guard"):
        backend.create(NewMemory(api_key_id="k", key="a", content="b"))
    assert root_server.requests == [] and fake_network.connections == []


def test_ref_35_allow_private_is_the_explicit_opt_in_for_a_self_hosted_server(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    backend = make(fake_network, base_url=f"http://127.0.0.1:{root_server.port}", allow_private=True)
    created = backend.create(NewMemory(api_key_id="k", key="a", content="b"))
    assert memory_to_dict(root_server.store.get(created.id)) == memory_to_dict(created)  # type: ignore[arg-type]
