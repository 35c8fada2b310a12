"""Schema-driven fuzzing (schemathesis) against the real server: every operation in ``/openapi.json`` gets
generated requests (bounded examples); no response may be a 5xx, and every response must conform to the
documented status codes, content types and schemas. Also checks the schema itself: generated from the typed
models (no FastAPI default error schema left), every operation with an example and a scope."""

from __future__ import annotations

import copy

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from memroute.server.auth import SCOPE_KEY
from tests.servers.memroute_server import MemrouteServer


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    server = MemrouteServer(tmp_path_factory.mktemp("fuzz")).start()
    yield server
    server.stop()


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx, value) -> bytes:
    """The import body: a generated string is sent as is (it is almost never valid JSONL: the 422 path)."""
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else str(value).encode("utf-8")


def _operations(server: MemrouteServer) -> list:
    loaded = schemathesis.openapi.from_url(server.base_url + "/openapi.json")
    return [result.ok() for result in loaded.get_all_operations()]


def test_no_5xx_and_responses_conform(fuzz_server):
    """One hypothesis run per operation (schemathesis' pytest plugin needs a fixture loader this pytest
    lacks, so the loop is explicit); every operation is fuzzed with the admin key, so none stops at 403.

    Every check runs except "positive data acceptance": the service validates more than JSON Schema can say
    (NUL characters and lone surrogates in text, the configured size limits, a key collision), so some
    schema-valid requests are rightly refused with a 422 / 409 that names the field."""
    headers = {"Authorization": f"Bearer {fuzz_server.admin}"}
    failures = []
    operations = _operations(fuzz_server)
    assert len(operations) >= 25
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        def check(case) -> None:
            case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])

        try:
            check()
        except Exception as exc:  # collect every operation's failure, then report them together
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_invalid_requests_from_a_tenant_key_never_get_a_5xx(fuzz_server):
    """Schemathesis' negative mode — every request breaks the schema somewhere (a wrong type, a missing field,
    out of bounds, bad JSON) — sent with a tenant key, so the tenant checks run too (issue 29). Bounded for CI:
    a few examples per operation, about 30 s on two cores. The only check: no 5xx."""
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error

    headers = {"Authorization": f"Bearer {fuzz_server.tenant_a}"}
    failures = []
    for operation in _operations(fuzz_server):

        @given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
        @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        def check(case) -> None:
            case.call_and_validate(headers=headers, checks=[not_a_server_error])

        try:
            check()
        except Unsatisfiable:  # nothing to break (GET /healthz takes no input)
            continue
        except Exception as exc:
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_the_schema_is_generated_and_complete(fuzz_server):
    with fuzz_server.client() as anonymous:
        document = anonymous.get("/openapi.json").json()
    components = document["components"]["schemas"]
    assert "HTTPValidationError" not in components and "ErrorBody" in components
    assert {"Memory", "MemoryPage", "SearchResult", "ApiKey", "RetrievalPreview"} <= set(components)
    missing_examples, missing_scope = [], []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if SCOPE_KEY not in operation:
                missing_scope.append(f"{method} {path}")
            success = next(r for status, r in operation["responses"].items() if status.startswith("2"))
            content = success.get("content", {})
            if not any("example" in media or "examples" in media for media in content.values()):
                missing_examples.append(f"{method} {path}")
    assert not missing_scope and not missing_examples, (missing_scope, missing_examples)
    with fuzz_server.client() as anonymous:
        assert anonymous.get("/docs").status_code == 200


def _examples(media: dict) -> list:
    if "example" in media:
        return [media["example"]]
    return [example["value"] for example in media.get("examples", {}).values() if "value" in example]


def _closed(schema):
    """The schema with every object that lists its properties closed to others: an example must not show a
    field the server never sends (the JSON Schema default would let any extra name through)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            _closed(value)
    elif isinstance(schema, list):
        for value in schema:
            _closed(value)
    return schema


def test_every_documented_example_conforms_to_its_schema(fuzz_server):
    """An example a client copies from /docs must be something the server accepts (requests) or can send
    (responses): each one is validated against the schema it illustrates."""
    with fuzz_server.client() as anonymous:
        document = anonymous.get("/openapi.json").json()
    components = _closed(copy.deepcopy(document["components"]))
    wrong, checked = [], 0
    for path, item in document["paths"].items():
        for method, operation in item.items():
            bodies = [("request", operation.get("requestBody", {}).get("content", {}))]
            bodies += [(status, response.get("content", {})) for status, response in operation["responses"].items()]
            for where, content in bodies:
                for media_type, media in content.items():
                    if "schema" not in media:
                        continue
                    validator = jsonschema.Draft202012Validator({**media["schema"], "components": components})
                    for example in _examples(media):
                        checked += 1
                        errors = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                                  for e in validator.iter_errors(example)]
                        if errors:
                            wrong.append(f"{method.upper()} {path} {where} {media_type}: {errors}")
    assert checked >= 25
    assert not wrong, "\n".join(wrong)
