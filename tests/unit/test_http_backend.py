"""The HTTP backend beyond the reference's cases: configuration errors, URL building, retries and their
limits, timeouts, malformed responses, the SSRF guard's resolution and redirects, tenant isolation.

Everything runs against the real loopback server (``tests/servers/memory_http_server.py``); the SSRF cases
use the simulated network of ``tests/servers/fixtures.py`` (see its docstring).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from memroute.config.serialization import memory_to_dict, structure_config
from memroute.errors import BackendError, BackendUnavailableError, ConfigError, ConflictError, ValidationError
from memroute.models import ListFilter, Memory, MemoryPatch, NewMemory, SearchQuery
from memroute_builtins.backends.http import HttpBackend, HttpBackendSettings, memory_from_wire
from tests.servers import fixtures
from tests.servers.fixtures import FakeNetwork
from tests.servers.memory_http_server import MemoryHttpServer

memory_server = fixtures.memory_server
root_server = fixtures.root_server
fake_network = fixtures.fake_network

NOW = "2026-01-02T03:04:05Z"


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def local(server: MemoryHttpServer, sleeps: Sleeps | None = None, **options: Any) -> HttpBackend:
    """A backend for the loopback server: a self-hosted server, so ``allow_private`` is set."""
    options.setdefault("base_url", server.url)
    options.setdefault("allow_private", True)
    settings = structure_config(options, HttpBackendSettings)
    return HttpBackend("remote", settings, sleep=sleeps if sleeps is not None else Sleeps())


def via(network: FakeNetwork, **options: Any) -> HttpBackend:
    options.setdefault("base_url", "http://memory.test:8080")
    return HttpBackend("remote", structure_config(options, HttpBackendSettings), resolver=network.resolve,
                       sleep=Sleeps())


def new(api_key_id: str = "key-a", key: str = "pref:tea", content: str = "likes green tea", **kw: Any) -> NewMemory:
    return NewMemory(api_key_id=api_key_id, key=key, content=content, **kw)


# --- configuration ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "base_url"),
        ({"base_url": "https://user:pw@host/v1"}, "credentials"),
        ({"base_url": "ftp://host"}, "scheme 'ftp'"),
        ({"base_url": "https://host/v1?x=1"}, "query string"),
        ({"base_url": "http://"}, "no host"),
        ({"base_url": "https://host", "timeout": 0}, "timeout"),
        ({"base_url": "https://host", "timeout": "soon"}, "timeout"),
        ({"base_url": "https://host", "retries": 11}, "retries"),
        ({"base_url": "https://host", "headers": {"X-A": "a\r\nInjected: 1"}}, "CR, LF"),
        ({"base_url": "https://host", "headers": {"Bad Name": "x"}}, "header name"),
        ({"base_url": "https://host", "colour": "blue"}, "colour"),
    ],
)
def test_bad_settings_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        structure_config(options, HttpBackendSettings)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endpoints": {"lookup": "x/{id}"}}, "unknown endpoint"),
        ({"endpoints": {"get": "memories/{uuid}"}}, r"unknown placeholder \{uuid\}"),
        ({"endpoints": {"create": "memories/{id}"}}, "takes none"),
        ({"endpoints": {"get": "memories"}}, "must contain the memory id placeholder"),
        ({"endpoints": {"list": "https://elsewhere/memories"}}, "below base_url"),
        ({"endpoints": {"list": "//elsewhere/memories"}}, "below base_url"),
        ({"endpoints": {"list": "../admin"}}, r"'\.\.' segments"),
        ({"endpoints": {"list": "memories?all=1"}}, "below base_url"),
        ({"endpoints": {"get": "memories/{id"}}, "unbalanced"),
        ({"endpoints": {"health": ""}}, "non-empty"),
        ({"query_params": {"owner": "o"}}, "unknown parameter 'owner'"),
        ({"path_params": {"uuid": "u"}}, "unknown name"),
        ({"preset": "obsidian"}, "type = \"obsidian\""),
    ],
)
def test_bad_endpoint_configuration_fails_when_the_backend_is_built(options: dict[str, Any], message: str) -> None:
    settings = structure_config({"base_url": "https://host/v1", **options}, HttpBackendSettings)
    with pytest.raises(ConfigError, match=message):
        HttpBackend("remote", settings)


def test_the_memroute_preset_keeps_the_protocol_defaults_and_allows_overrides() -> None:
    settings = structure_config({"base_url": "https://host/v1", "preset": "memroute",
                                 "endpoints": {"health": "status"}}, HttpBackendSettings)
    backend = HttpBackend("remote", settings)
    assert backend.endpoints["health"] == "status" and backend.endpoints["list"] == "memories"
    assert backend.settings.backend_type == "memroute"


@pytest.mark.parametrize("endpoint", ["memories", "/memories", "memories/", "/memories/"])
@pytest.mark.parametrize("base", ["https://host/v1", "https://host/v1/"])
def test_endpoints_resolve_below_the_base_path(base: str, endpoint: str) -> None:
    backend = HttpBackend("remote", structure_config({"base_url": base, "endpoints": {"list": endpoint}},
                                                     HttpBackendSettings))
    assert backend.url_for(backend.endpoints["list"]).startswith("https://host/v1/memories")


def test_a_custom_update_path_is_used_for_put_too(memory_server: MemoryHttpServer) -> None:
    memory_server.path_aliases["/v1/items/"] = "/v1/memories/"
    backend = local(memory_server, endpoints={"update": "/items/{id}"})
    memory = new().as_memory()
    backend.put(memory)
    assert memory_server.requests[-1].method == "PUT" and memory_server.requests[-1].path == f"/v1/items/{memory.id}"


# --- requests on the wire --------------------------------------------------------------------------------

def test_an_id_cannot_escape_its_path_segment(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    assert backend.get("../../health") is None
    request = memory_server.requests[-1]
    assert request.path == "/v1/memories/..%2F..%2Fhealth"  # one encoded segment, still under memories/


@pytest.mark.parametrize("bad", ["", "x" * 300])
def test_a_bad_id_is_a_validation_error_and_sends_nothing(memory_server: MemoryHttpServer, bad: str) -> None:
    with pytest.raises(ValidationError):
        local(memory_server).get(bad)
    assert memory_server.requests == []


def test_create_sends_memroutes_id_and_timestamp_and_the_server_upserts(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    first = backend.create(new(metadata={"a": 1}, now=NOW))
    second = backend.create(new(content="likes black tea", metadata={"b": 2}))
    body = json.loads(memory_server.requests[0].body)
    assert body["id"] == first.id and body["now"] == NOW
    assert second.id == first.id and second.created_at == first.created_at
    assert second.content == "likes black tea" and second.metadata == {"a": 1, "b": 2}


def test_put_replaces_exactly_and_update_sends_only_changed_fields(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    memory = Memory(id="m-1", api_key_id="key-a", key="k", content="c", metadata={"x": [1, 2]},
                    created_at=NOW, updated_at=NOW, expires_at="2030-01-01T00:00:00Z", session_id="s")
    backend.put(memory)
    got = backend.get("m-1")
    assert got is not None and got.same_as(memory)
    updated = backend.update("m-1", MemoryPatch(session_id=None, now=NOW))
    assert updated is not None and updated.session_id is None and updated.content == "c"
    assert json.loads(memory_server.requests[-1].body) == {"session_id": None, "now": NOW}


def test_update_to_a_key_another_memory_holds_is_a_conflict(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    backend.create(new(key="one"))
    other = backend.create(new(key="two"))
    with pytest.raises(ConflictError, match="409"):
        backend.update(other.id, MemoryPatch(key="one"))


def test_list_and_search_keep_tenants_apart(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    mine = backend.create(new("key-a", content="tea with lemon"))
    backend.create(new("key-b", content="tea with milk"))
    page = backend.list(ListFilter(api_key_id="key-a"))
    assert [m.id for m in page.data] == [mine.id] and page.total == 1 and page.by_type == {"factual": 1}
    hits = backend.search(SearchQuery(api_key_id="key-a", text="tea"))
    assert [h.memory.id for h in hits] == [mine.id]


def test_search_drops_hits_a_misbehaving_server_returns_for_another_tenant(memory_server: MemoryHttpServer) -> None:
    foreign = new("key-b", content="secret tea").as_memory()
    expired = new("key-a", key="old", expires_at="2000-01-01T00:00:00Z", now="1999-01-01T00:00:00Z").as_memory()
    payload = json.dumps([{"memory": memory_to_dict(foreign), "score": 9}, {"memory": memory_to_dict(expired)}])

    def leaky(handler: BaseHTTPRequestHandler) -> bool:
        handler.send_raw(200, payload.encode())  # type: ignore[attr-defined]
        return True

    memory_server.knobs.handler = leaky
    memory_server.knobs.only_paths = ("/search",)
    assert local(memory_server).search(SearchQuery(api_key_id="key-a", text="tea")) == []


def test_list_orders_and_pages_through_the_server(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    ids = [backend.create(new(key=f"k{i}", now=f"2026-01-0{i + 1}T00:00:00Z")).id for i in range(5)]
    asc = backend.list(ListFilter(api_key_id="key-a", order_dir="asc", limit=2, offset=1))
    assert [m.id for m in asc.data] == ids[1:3] and asc.total == 5
    assert [m.id for m in backend.iter_all("key-a", batch=2)] == ids


# --- retries, timeouts, failures -------------------------------------------------------------------------

def test_idempotent_get_is_retried_on_503_honouring_retry_after(memory_server: MemoryHttpServer) -> None:
    stored = local(memory_server).create(new())
    memory_server.knobs = type(memory_server.knobs)(fail_status=503, fail_times=2, retry_after="1.5")
    sleeps = Sleeps()
    got = local(memory_server, sleeps).get(stored.id)
    assert got is not None and got.id == stored.id
    assert memory_server.count("GET", stored.id) == 3 and sleeps == [1.5, 1.5]


def test_retries_are_bounded_and_then_the_backend_is_unavailable(memory_server: MemoryHttpServer) -> None:
    memory_server.knobs.fail_status = 502
    sleeps = Sleeps()
    with pytest.raises(BackendUnavailableError, match="HTTP 502"):
        local(memory_server, sleeps, retries=2, retry_backoff=0.1).list(ListFilter(api_key_id="key-a"))
    assert memory_server.count("GET") == 3 and len(sleeps) == 2
    assert 0.05 <= sleeps[0] <= 0.15 and 0.1 <= sleeps[1] <= 0.3  # exponential, with jitter


def test_put_and_delete_are_retried(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    memory = new().as_memory()
    memory_server.knobs = type(memory_server.knobs)(fail_status=504, fail_times=1)
    backend.put(memory)
    memory_server.knobs = type(memory_server.knobs)(fail_status=503, fail_times=1)
    assert backend.delete(memory.id) is True
    assert memory_server.count("PUT") == 2 and memory_server.count("DELETE") == 2


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_create_and_update_are_never_retried(memory_server: MemoryHttpServer, method: str) -> None:
    backend = local(memory_server)
    stored = backend.create(new())
    memory_server.knobs = type(memory_server.knobs)(fail_status=503, fail_times=1)
    with pytest.raises(BackendUnavailableError, match="HTTP 503"):
        if method == "POST":
            backend.create(new(key="other"))
        else:
            backend.update(stored.id, MemoryPatch(content="changed"))
    assert memory_server.count(method) == (2 if method == "POST" else 1)  # the first create + the failed one


def test_a_slow_server_times_out(memory_server: MemoryHttpServer) -> None:
    memory_server.knobs.delay_s = 0.5
    with pytest.raises(BackendUnavailableError, match=r"timed out after 0\.05s"):
        local(memory_server, timeout=0.05, retries=0).get("m-1")


def test_a_slow_server_get_is_retried_after_a_timeout(memory_server: MemoryHttpServer) -> None:
    memory_server.knobs = type(memory_server.knobs)(delay_s=0.3, only_paths=("/memories/",))
    with pytest.raises(BackendUnavailableError, match="timed out"):
        local(memory_server, timeout=0.05, retries=1).get("m-1")
    assert memory_server.count("GET", "/memories/") == 2


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [(401, BackendUnavailableError, "api_key"), (403, BackendUnavailableError, "api_key"),
     (400, BackendError, "HTTP 400"), (500, BackendError, "HTTP 500")],
)
def test_error_statuses_map_to_typed_errors(
    memory_server: MemoryHttpServer, status: int, error: type, message: str
) -> None:
    memory_server.knobs.fail_status = status
    with pytest.raises(error, match=message):
        local(memory_server).list(ListFilter(api_key_id="key-a"))


def test_a_404_from_a_collection_endpoint_points_at_the_configuration(memory_server: MemoryHttpServer) -> None:
    with pytest.raises(BackendError, match="check the endpoints"):
        local(memory_server, endpoints={"list": "nowhere"}).list(ListFilter(api_key_id="key-a"))


def test_an_api_key_server_rejects_a_missing_key_and_accepts_the_right_one() -> None:
    server = MemoryHttpServer(prefix="/v1", api_key="s3cret").start()
    try:
        health = local(server).health()
        assert not health.ok and "HTTP 401" in (health.error or "")
        with pytest.raises(BackendUnavailableError, match="api_key"):
            local(server).list(ListFilter(api_key_id="key-a"))
        assert local(server, api_key="s3cret").list(ListFilter(api_key_id="key-a")).total == 0
    finally:
        server.stop()


# --- malformed responses ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("call", "body", "message"),
    [
        ("get", "not json", "malformed response from the get endpoint.*not JSON"),
        ("get", "", "malformed response from the get endpoint.*empty body"),
        ("get", "[1, 2]", "get endpoint.*expected a JSON object"),
        ("get", '{"id": "m-1", "api_key_id": "a", "key": "k", "content": "c", "created_at": "yesterday",'
                ' "updated_at": "2026-01-01T00:00:00Z"}', "get endpoint.*created_at"),
        ("get", '{"id": "m-1", "api_key_id": "a", "key": "k"}', "get endpoint.*content"),
        ("list", '{"data": 5}', "list endpoint.*'data' array"),
        ("list", '{"data": [], "total": -1}', "list endpoint.*total"),
        ("list", '{"data": [{"id": "x"}]}', r"list endpoint.*data\[0\]"),
        ("search", '{"hits": []}', "search endpoint.*JSON array"),
        ("search", '[{"memory": {"id": "x"}, "score": 1}]', r"search endpoint.*\[0\]\.memory"),
        ("create", "{}", "create endpoint"),
    ],
)
def test_malformed_bodies_are_backend_errors_naming_the_endpoint(
    memory_server: MemoryHttpServer, call: str, body: str, message: str
) -> None:
    memory_server.knobs.malformed_body = body
    backend = local(memory_server)
    with pytest.raises(BackendError, match=message):
        if call == "get":
            backend.get("m-1")
        elif call == "list":
            backend.list(ListFilter(api_key_id="a"))
        elif call == "search":
            backend.search(SearchQuery(api_key_id="a", text="x"))
        else:
            backend.create(new())


def test_the_reference_camel_case_shape_is_accepted_when_reading() -> None:
    reference_shaped = {
        "id": "m-1", "apiKeyId": "key-a", "sessionId": "", "type": "episodic", "key": "k", "content": "c",
        "metadata": '{"source": "llm_response"}', "createdAt": "2026-01-02T03:04:05.000Z",
        "updatedAt": "2026-01-02T03:04:05.000Z", "expiresAt": None, "category": "decision", "accessCount": 3,
    }
    memory = memory_from_wire(reference_shaped)
    assert memory.api_key_id == "key-a" and memory.session_id is None and memory.metadata == {"source": "llm_response"}
    assert memory.created_at.isoformat() == "2026-01-02T03:04:05+00:00"
    assert memory.access_count == 3 and memory.last_accessed_at is None
    # malformed telemetry is dropped, never a reason to refuse the memory
    odd = memory_from_wire({**reference_shaped, "accessCount": "many", "lastAccessedAt": "last tuesday"})
    assert (odd.access_count, odd.last_accessed_at) == (0, None)
    stamped = memory_from_wire({**reference_shaped, "lastAccessedAt": "2026-01-03T00:00:00.000Z"})
    assert stamped.last_accessed_at.isoformat() == "2026-01-03T00:00:00+00:00"


def test_search_accepts_bare_memories_ranked_by_position(memory_server: MemoryHttpServer) -> None:
    a, b = new(key="a").as_memory(), new(key="b").as_memory()
    memory_server.knobs.malformed_body = json.dumps([memory_to_dict(a), memory_to_dict(b)])
    hits = local(memory_server).search(SearchQuery(api_key_id="key-a", text="tea"))
    assert [h.memory.id for h in hits] == [a.id, b.id] and hits[0].score > hits[1].score


# --- SSRF guard: resolution and redirects ----------------------------------------------------------------

@pytest.mark.parametrize("addresses", [["127.0.0.1"], ["93.184.216.34", "10.1.2.3"], ["::ffff:127.0.0.1"]])
def test_a_hostname_resolving_to_an_internal_address_is_blocked(
    fake_network: FakeNetwork, addresses: list[str]
) -> None:
    fake_network.dns["memory.test"] = addresses
    result = via(fake_network).health()
    assert not result.ok and "SSRF guard" in (result.error or "") and fake_network.connections == []


@pytest.mark.parametrize("base", ["http://[::ffff:7f00:1]:8080", "http://100.64.0.1", "http://2130706433",
                                  "http://metadata.google.internal"])
def test_reference_bypasses_are_blocked(fake_network: FakeNetwork, base: str) -> None:
    result = via(fake_network, base_url=base).health()
    assert not result.ok and "SSRF guard" in (result.error or "") and fake_network.connections == []


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:9/health",
                                    "http://10.0.0.5/health"])
def test_a_redirect_to_a_blocked_address_is_refused(
    fake_network: FakeNetwork, root_server: MemoryHttpServer, target: str
) -> None:
    root_server.knobs.redirect_to = target
    result = via(fake_network).health()
    assert not result.ok and "SSRF guard" in (result.error or "")
    assert fake_network.connections == [("93.184.216.34", 8080)]  # only the first hop was ever connected


def test_a_get_follows_a_redirect_to_an_allowed_host_without_the_credentials(
    fake_network: FakeNetwork, root_server: MemoryHttpServer
) -> None:
    root_server.knobs = type(root_server.knobs)(redirect_to="http://api.example.com:8080/health",
                                                only_paths=("/old-health",))
    result = via(fake_network, api_key="secret", endpoints={"health": "old-health"}).health()
    assert result.ok, result.error
    first, second = root_server.requests
    assert first.headers["Authorization"] == "Bearer secret" and "Authorization" not in second.headers


def test_a_write_is_never_redirected(fake_network: FakeNetwork, root_server: MemoryHttpServer) -> None:
    root_server.knobs.redirect_to = "http://api.example.com:8080/memories"
    with pytest.raises(BackendError, match="302"):
        via(fake_network).create(new())
    assert root_server.count("POST") == 1 and root_server.store.snapshot() == {}


# --- lifecycle and threads -------------------------------------------------------------------------------

def test_concurrent_calls_from_many_threads(memory_server: MemoryHttpServer) -> None:
    backend = local(memory_server)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(5):
                backend.create(new(key=f"t{n}-{i}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and backend.list(ListFilter(api_key_id="key-a", limit=100)).total == 30
    backend.close()
    backend.close()  # idempotent
    assert backend.health().ok  # usable again after close: a fresh session opens
