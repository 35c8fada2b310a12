"""The proxy forwards only the routes it documents (issue 29, "High 2"), against the real server and a loopback
fake upstream that records every request it receives.

``GET /v1/models/{id}`` used to take a ``{id:path}``: with a read-only key, ``..%2F..%2Forganization%2Fadmin_api_keys``
made the upstream receive ``GET /organization/admin_api_keys`` carrying the operator's credential, and
``/v1/models/../files?purpose=fine-tune`` (sent as is) reached ``GET /v1/files``. Now a model id is one path segment,
percent-encoded, the URL built must stay under ``base_url``, and only documented query parameters pass."""

from __future__ import annotations

import socket

import pytest

from tests.servers.proxy_stack import proxy_stack


@pytest.fixture(scope="module")
def openai_stack(tmp_path_factory):
    with proxy_stack(tmp_path_factory.mktemp("proxy-paths-openai")) as running:
        yield running


def _raw_get(base_url: str, target: str, headers: dict[str, str]) -> tuple[int, str]:
    """A GET sent exactly as written (``curl --path-as-is``): no client normalises ``..`` away."""
    host, port = base_url.removeprefix("http://").split(":")
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
             *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall("\r\n".join(lines).encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split(" ", 2)[1]), body


TRAVERSALS = [
    "/v1/models/..%2F..%2Forganization%2Fadmin_api_keys",
    "/v1/models/../files?purpose=fine-tune",
    "/v1/models/..",
    "/v1/models/%2E%2E",
    "/v1/models/a/../../files",
    "/v1/models/x%2F..%2F..%2Ffiles",
]


@pytest.mark.parametrize("target", TRAVERSALS)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_no_path_outside_the_models_route_reaches_the_upstream(openai_stack, target, api):
    stack = openai_stack
    headers = {"authorization": f"Bearer {stack.keys['reader']}"}
    if api == "anthropic":
        headers = {"x-api-key": stack.keys["reader"], "anthropic-version": "2023-06-01"}
    before = len(stack.upstream.requests)
    status, _body = _raw_get(stack.url, target, headers)
    reached = [r["path"] for r in stack.upstream.requests[before:]]
    assert status == 404, target
    assert all(path.split("?")[0].startswith("/v1/models/") and path.count("/") == 3 for path in reached), reached


def test_a_model_id_goes_out_as_one_encoded_segment(openai_stack):
    stack = openai_stack
    headers = {"authorization": f"Bearer {stack.keys['reader']}"}
    status, _ = _raw_get(stack.url, "/v1/models/ft:gpt-4o:org::abc%3Fx%23y", headers)
    assert status == 200
    last = stack.upstream.last
    assert last["path"] == "/v1/models/ft%3Agpt-4o%3Aorg%3A%3Aabc%3Fx%23y"
    assert last["headers"]["authorization"] == "Bearer sk-upstream-secret"  # the operator's, never the caller's


def test_only_documented_query_parameters_are_passed_on(openai_stack):
    stack = openai_stack
    headers = {"x-api-key": stack.keys["reader"], "anthropic-version": "2023-06-01"}
    status, _ = _raw_get(stack.url, "/v1/models?limit=5&after_id=m1&purpose=fine-tune&beta=true", headers)
    assert status == 200
    assert stack.upstream.last["path"] == "/v1/models?limit=5&after_id=m1"


def test_the_listing_still_passes_through(openai_stack):
    stack = openai_stack
    status, body = _raw_get(stack.url, "/v1/models", {"authorization": f"Bearer {stack.keys['reader']}"})
    assert status == 200 and "fake-model" in body
    assert stack.upstream.last["path"] == "/v1/models"


def test_a_502_does_not_reveal_the_upstream_address(tmp_path):
    with proxy_stack(tmp_path, proxy={"openai": {"base_url": "http://127.0.0.1:9/v1"}}) as stack:
        status, body = _raw_get(stack.url, "/v1/models", {"authorization": f"Bearer {stack.keys['alice']}"})
    assert status == 502
    assert "127.0.0.1" not in body and ":9" not in body


def test_the_url_check_refuses_any_path_that_leaves_base_url():
    from memroute.config.settings import UpstreamSettings
    from memroute.server.proxy.upstream import OutsideUpstreamError, Upstream

    upstream = Upstream("openai", UpstreamSettings(base_url="https://api.example.com/v1", api_key="sk-x"))
    assert str(upstream.build("GET", "/models/gpt-4o", headers=[]).url) == "https://api.example.com/v1/models/gpt-4o"
    for path in ("/models/../files", "/../organization", "@evil.example/x", "/models/./x"):
        with pytest.raises(OutsideUpstreamError):
            upstream.build("GET", path, headers=[])
