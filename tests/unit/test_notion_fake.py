"""The Notion fake itself: validation order, Notion's error shapes and messages, limits, filters, cursors,
faults. Raw HTTP (requests), so these pin the wire behaviour independently of notion-client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.servers.notion_fake import API_VERSION, MISSING_VERSION, NotionFake, running_notion_fake

SCHEMA = {"Key": {"title": {}}, "Body": {"rich_text": {}}, "Kind": {"select": {"options": [{"name": "a"}]}},
          "When": {"date": {}}, "Score": {"number": {}}}


@pytest.fixture
def fake() -> Iterator[NotionFake]:
    with running_notion_fake() as server:
        yield server


def call(fake: NotionFake, method: str, path: str, body: Any = None, *, version: str | None = API_VERSION,
         token: str | None = None, raw: bytes | None = None) -> requests.Response:
    headers = {"Content-Type": "application/json"}
    if version is not None:
        headers["Notion-Version"] = version
    headers["Authorization"] = f"Bearer {token or fake.token}"
    data = raw if raw is not None else (None if body is None else __import__("json").dumps(body).encode())
    return requests.request(method, fake.base_url + path, data=data, headers=headers, timeout=10)


def assert_error(response: requests.Response, status: int, code: str, message: str | None = None) -> None:
    body = response.json()
    assert response.status_code == status, body
    assert body["object"] == "error" and body["status"] == status and body["code"] == code, body
    assert isinstance(body.get("request_id"), str)
    if message is not None:
        assert message in body["message"], body["message"]


def source_of(fake: NotionFake, db_id: str) -> str:
    return str(fake.databases[db_id]["data_sources"][0]["id"])


def new_page(fake: NotionFake, ds: str, key: str, **props: Any) -> dict[str, Any]:
    properties = {"Key": {"title": [{"type": "text", "text": {"content": key}}]}, **props}
    response = call(fake, "POST", "/v1/pages", {"parent": {"data_source_id": ds}, "properties": properties})
    assert response.status_code == 200, response.text
    return dict(response.json())


# --- validation order ------------------------------------------------------------------------------------

def test_missing_version_comes_first(fake: NotionFake) -> None:
    response = call(fake, "POST", "/v1/pages", version=None, token="wrong", raw=b"{not json")
    assert_error(response, 400, "missing_version", MISSING_VERSION)


def test_unknown_version_is_rejected(fake: NotionFake) -> None:
    assert_error(call(fake, "GET", "/v1/databases/" + "0" * 32, version="2022-06-28"), 400, "validation_error")


def test_bad_token_is_401_before_json(fake: NotionFake) -> None:
    response = call(fake, "POST", "/v1/pages", token="wrong", raw=b"{not json")
    assert_error(response, 401, "unauthorized", "API token is invalid.")


def test_bad_json_is_400_invalid_json(fake: NotionFake) -> None:
    assert_error(call(fake, "POST", "/v1/pages", raw=b"{not json"), 400, "invalid_json", "Error parsing JSON body.")
    assert_error(call(fake, "POST", "/v1/pages", raw=b"[1, 2]"), 400, "invalid_json")


def test_bad_schema_is_400_validation_error_after_json(fake: NotionFake) -> None:
    db = fake.add_database(SCHEMA)
    response = call(fake, "POST", f"/v1/data_sources/{source_of(fake, db)}/query", {"page_size": 101})
    assert_error(response, 400, "validation_error", "body.page_size should be ≤ `100`, instead was `101`.")


def test_legacy_database_query_is_an_invalid_url(fake: NotionFake) -> None:
    db = fake.add_database(SCHEMA)
    assert_error(call(fake, "POST", f"/v1/databases/{db}/query", {}), 400, "invalid_request_url")


def test_unknown_ids_are_404_with_the_sharing_hint(fake: NotionFake) -> None:
    response = call(fake, "GET", "/v1/databases/" + "1" * 32)
    assert_error(response, 404, "object_not_found", "shared with your integration")


# --- page validation -------------------------------------------------------------------------------------

def test_property_validation_messages(fake: NotionFake) -> None:
    ds = source_of(fake, fake.add_database(SCHEMA))
    page = {"parent": {"data_source_id": ds}, "properties": {"Key": {"title": []}, "Nope": {"rich_text": []}}}
    assert_error(call(fake, "POST", "/v1/pages", page), 400, "validation_error", "Nope is not a property that exists.")
    page["properties"] = {"Key": {"title": []}, "Body": {"select": {"name": "x"}}}
    assert_error(call(fake, "POST", "/v1/pages", page), 400, "validation_error", "Body is expected to be rich_text.")
    page["properties"] = {"Body": {"rich_text": []}}
    assert_error(call(fake, "POST", "/v1/pages", page), 400, "validation_error", "body.properties.Key.title")


def test_text_limit_counts_utf16_units(fake: NotionFake) -> None:
    ds = source_of(fake, fake.add_database(SCHEMA))
    new_page(fake, ds, "ok", Body={"rich_text": [{"text": {"content": "😀" * 1000}}]})  # 2,000 units
    page = {"parent": {"data_source_id": ds},
            "properties": {"Key": {"title": []}, "Body": {"rich_text": [{"text": {"content": "x" + "😀" * 1000}}]}}}
    assert_error(call(fake, "POST", "/v1/pages", page), 400, "validation_error",
                 "body.properties.Body.rich_text[0].text.content.length should be ≤ `2000`, instead was `2001`.")


def test_rich_text_arrays_hold_at_most_100_items(fake: NotionFake) -> None:
    ds = source_of(fake, fake.add_database(SCHEMA))
    items = [{"text": {"content": "a"}}] * 101
    page = {"parent": {"data_source_id": ds}, "properties": {"Key": {"title": []}, "Body": {"rich_text": items}}}
    assert_error(call(fake, "POST", "/v1/pages", page), 400, "validation_error",
                 "body.properties.Body.rich_text.length should be ≤ `100`, instead was `101`.")


def test_dates_keep_milliseconds_and_trash_blocks_edits(fake: NotionFake) -> None:
    ds = source_of(fake, fake.add_database(SCHEMA))
    page = new_page(fake, ds, "k", When={"date": {"start": "2025-01-02T03:04:05.123456Z"}})
    assert page["properties"]["When"]["date"]["start"] == "2025-01-02T03:04:05.123+00:00"
    assert call(fake, "PATCH", f"/v1/pages/{page['id']}", {"in_trash": True}).json()["in_trash"] is True
    edit = {"properties": {"Key": {"title": [{"text": {"content": "new"}}]}}}
    assert_error(call(fake, "PATCH", f"/v1/pages/{page['id']}", edit), 400, "validation_error",
                 "Can't edit block that is archived")
    assert call(fake, "GET", f"/v1/pages/{page['id']}").json()["in_trash"] is True  # still retrievable
    assert call(fake, "POST", f"/v1/data_sources/{ds}/query", {}).json()["results"] == []
    assert len(call(fake, "POST", f"/v1/data_sources/{ds}/query", {"in_trash": True}).json()["results"]) == 1


# --- queries ---------------------------------------------------------------------------------------------

def test_filters_sorts_and_cursor_pagination(fake: NotionFake) -> None:
    ds = source_of(fake, fake.add_database(SCHEMA))
    for n in range(7):
        new_page(fake, ds, f"key-{n}", Body={"rich_text": [{"text": {"content": f"Hello World {n}"}}]},
                 Kind={"select": {"name": "a" if n % 2 else "b"}},
                 When={"date": {"start": f"2025-01-0{n + 1}T00:00:00Z"}}, Score={"number": n})
    url = f"/v1/data_sources/{ds}/query"
    flt = {"and": [{"property": "Body", "rich_text": {"contains": "hello world"}},
                   {"or": [{"property": "Kind", "select": {"equals": "a"}},
                           {"property": "When", "date": {"before": "2025-01-02T00:00:00Z"}}]}]}
    sorts = [{"property": "Score", "direction": "descending"}]
    first = call(fake, "POST", url, {"filter": flt, "sorts": sorts, "page_size": 2}).json()
    assert first["has_more"] is True and first["object"] == "list"
    second = call(fake, "POST", url, {"filter": flt, "sorts": sorts, "page_size": 2,
                                      "start_cursor": first["next_cursor"]}).json()
    keys = [p["properties"]["Key"]["title"][0]["plain_text"] for p in first["results"] + second["results"]]
    assert keys == ["key-5", "key-3", "key-1", "key-0"]
    assert second["has_more"] is False and second["next_cursor"] is None
    # a cursor only works for the query that issued it
    other = call(fake, "POST", url, {"start_cursor": first["next_cursor"]})
    assert_error(other, 400, "validation_error", "start_cursor")
    title = call(fake, "POST", url, {"filter": {"property": "Key", "title": {"equals": "key-6"}}}).json()
    assert len(title["results"]) == 1
    after = {"property": "When", "date": {"after": "2025-01-05T00:00:00Z"}}
    assert len(call(fake, "POST", url, {"filter": after}).json()["results"]) == 2


def test_null_arguments_and_deep_nesting_are_rejected(fake: NotionFake) -> None:
    ds = source_of(fake, fake.add_database(SCHEMA))
    url = f"/v1/data_sources/{ds}/query"
    assert_error(call(fake, "POST", url, {"filter": None}), 400, "validation_error", "body.filter")
    leaf = {"property": "Key", "title": {"equals": "x"}}
    deep = {"and": [{"or": [{"and": [leaf]}]}]}
    assert_error(call(fake, "POST", url, {"filter": deep}), 400, "validation_error", "nesting")


# --- faults ----------------------------------------------------------------------------------------------

def test_fault_injection(fake: NotionFake) -> None:
    fake.fail_next("POST /v1/pages", 429, headers={"Retry-After": "3"})
    response = call(fake, "POST", "/v1/pages", {})
    assert_error(response, 429, "rate_limited")
    assert response.headers["Retry-After"] == "3"
    fake.fail_next("*", 502, body="<html>Bad gateway</html>", times=2)
    for _ in range(2):
        response = call(fake, "GET", "/v1/databases/" + "0" * 32)
        assert response.status_code == 502 and response.headers["Content-Type"].startswith("text/html")
    fake.fail_next("GET /v1/databases/{id}", 529)
    assert_error(call(fake, "GET", "/v1/databases/" + "0" * 32), 529, "service_overload")
    assert [r.status for r in fake.requests] == [429, 502, 502, 529]


def test_archived_is_an_alias_until_2026_03_11() -> None:
    with running_notion_fake(accepted_versions=(API_VERSION, "2026-03-11")) as fake:
        ds = source_of(fake, fake.add_database(SCHEMA))
        page = new_page(fake, ds, "k")
        assert call(fake, "PATCH", f"/v1/pages/{page['id']}", {"archived": True}).json()["in_trash"] is True
        newer = call(fake, "PATCH", f"/v1/pages/{page['id']}", {"archived": False}, version="2026-03-11")
        assert_error(newer, 400, "validation_error", "body.archived should be not present")
        untrashed = call(fake, "PATCH", f"/v1/pages/{page['id']}", {"in_trash": False}, version="2026-03-11")
        assert untrashed.json()["in_trash"] is False
