"""The Local REST API fake itself behaves as apis.md §1 and §4.1 describe (so the backend's tests mean something)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.servers.obsidian_fake import JSONLOGIC, NOTE_JSON, ObsidianFake


@pytest.fixture(params=["3.6.2", "5.1.0"])
def fake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObsidianFake]:
    with ObsidianFake(tmp_path / "vault", plugin_version=request.param) as fake:
        yield fake


@pytest.fixture
def http(fake: ObsidianFake) -> Iterator[requests.Session]:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {fake.api_key}"
    yield session
    session.close()


def put(http: requests.Session, fake: ObsidianFake, path: str, text: str) -> requests.Response:
    return http.put(f"{fake.base_url}/vault/{path}", data=text.encode(), headers={"Content-Type": "text/markdown"})


def test_auth_is_exact_and_runs_before_routing(fake: ObsidianFake) -> None:
    for headers in ({}, {"Authorization": f"bearer {fake.api_key}"}, {"Authorization": f"Bearer {fake.api_key} "}):
        for path in ("/vault/", "/search/simple/?query=x", "/no/such/route"):
            response = requests.get(fake.base_url + path, headers=headers)
            assert response.status_code == 401
            body = response.json()
            assert body["errorCode"] == 40101 and body["message"].startswith("Authorization required.")
    status = requests.get(fake.base_url + "/").json()
    assert status["status"] == "OK" and status["authenticated"] is False
    assert status["versions"]["self"] == fake.plugin_version


def test_error_bodies_and_codes(fake: ObsidianFake, http: requests.Session) -> None:
    missing = http.get(f"{fake.base_url}/vault/nope.md")
    assert missing.status_code == 404 and missing.json() == {"message": "Not Found", "errorCode": 40400}
    assert http.get(f"{fake.base_url}/vault/empty/").json()["errorCode"] == 40400, "empty folders never list"
    wrong_type = http.put(f"{fake.base_url}/vault/a.md", data=b"{}", headers={"Content-Type": "application/json"})
    assert wrong_type.status_code == 400 and wrong_type.json()["errorCode"] == 40010
    folder = put(http, fake, "dir/", "x")
    assert folder.status_code == 405 and folder.json()["errorCode"] == 40510
    patch = http.patch(f"{fake.base_url}/vault/a.md", data=b"x", headers={"Content-Type": "text/markdown"})
    assert patch.status_code == 400 and patch.json()["errorCode"] == 40081
    assert put(http, fake, "notes/heading/new.md", "x").status_code == 404, "the section-target quirk"
    assert http.post(f"{fake.base_url}/search/simple/").json()["errorCode"] == 40090
    fake.fail_next(500, 50000)
    failed = http.get(f"{fake.base_url}/vault/")
    assert failed.status_code == 500 and failed.json()["errorCode"] == 50000


def test_search_content_type_is_compared_exactly(fake: ObsidianFake, http: requests.Session) -> None:
    url = f"{fake.base_url}/search/"
    assert http.post(url, data=b"{}").json()["errorCode"] == 40011
    charset = http.post(url, data=b"{}", headers={"Content-Type": JSONLOGIC + "; charset=utf-8"})
    assert charset.json()["errorCode"] == 40012
    assert http.post(url, json={"==": [1, 1]}).json()["errorCode"] == 40012
    put(http, fake, "a.md", "x")
    bad = http.post(url, data=b'{"nope": [1]}', headers={"Content-Type": JSONLOGIC})
    assert bad.status_code == 400 and bad.json()["errorCode"] == 40070
    assert "while processing a.md" in bad.json()["message"]


def test_paths_traversal_and_encoded_slashes(fake: ObsidianFake, http: requests.Session) -> None:
    assert put(http, fake, "dir/a.md", "x").status_code == 204
    encoded = http.get(f"{fake.base_url}/vault/dir%2Fa.md")
    assert encoded.status_code == (404 if fake.major >= 5 else 200), "5.x decodes each segment on its own"
    escape = http.get(f"{fake.base_url}/vault/%2E%2E/%2E%2E/etc/passwd")
    assert escape.status_code in (400, 404)
    if fake.major >= 5:
        assert escape.json()["errorCode"] == 40021
    assert not (fake.vault.parent / "etc").exists()


def test_listing_note_json_and_searches(fake: ObsidianFake, http: requests.Session) -> None:
    put(http, fake, "m/t/one.md", "---\ntags: [memory, 7]\nkind: fact\n---\nramen body #food\r\n")
    put(http, fake, "m/t/sub/two.md", "plain ramen ramen")
    put(http, fake, "m/other.txt", "not markdown")
    assert http.get(f"{fake.base_url}/vault/m/").json() == {"files": ["other.txt", "t/"]}
    assert http.get(f"{fake.base_url}/vault/m/t/").json() == {"files": ["one.md", "sub/"]}
    raw = http.get(f"{fake.base_url}/vault/m/t/one.md")
    assert raw.headers["Content-Type"] == "text/markdown; charset=utf-8" and raw.content.endswith(b"#food\r\n")
    not_json = http.get(f"{fake.base_url}/vault/m/t/one.md", headers={"Accept": NOTE_JSON + ", */*"})
    assert not_json.headers["Content-Type"].startswith("text/markdown"), "the Accept compare is exact"
    note = http.get(f"{fake.base_url}/vault/m/t/one.md", headers={"Accept": NOTE_JSON}).json()
    assert note["frontmatter"] == {"tags": ["memory", 7], "kind": "fact"}
    assert note["tags"] == (["memory", "food"] if fake.major >= 5 else ["memory", "7", "food"])
    assert ("unresolvedLinks" in note) == (fake.major >= 5)
    logic = {"and": [{"glob": ["m/t/*.md", {"var": "path"}]}, {"==": [{"var": "frontmatter.kind"}, "fact"]}]}
    found = http.post(f"{fake.base_url}/search/", data=json.dumps(logic), headers={"Content-Type": JSONLOGIC}).json()
    assert found == [{"filename": "m/t/one.md", "result": True}]
    either = {"or": [{"in": ["memory", {"var": "tags"}]}, {"glob": ["**/two.md", {"var": "path"}]}]}
    rows = http.post(f"{fake.base_url}/search/", data=json.dumps(either), headers={"Content-Type": JSONLOGIC}).json()
    assert sorted(r["filename"] for r in rows) == ["m/t/one.md", "m/t/sub/two.md"]
    simple = http.post(f"{fake.base_url}/search/simple/", params={"query": "RAMEN"}).json()
    assert {r["filename"] for r in simple} == {"m/t/one.md", "m/t/sub/two.md"}
    scores = [r["score"] for r in simple]
    assert scores == sorted(scores, reverse=fake.major >= 4), "3.x ascending, 4.x+ descending"


def test_delete_semantics_by_version(fake: ObsidianFake, http: requests.Session) -> None:
    put(http, fake, "a.md", "x")
    put(http, fake, "b.md", "y")
    assert http.delete(f"{fake.base_url}/vault/a.md").status_code == 204
    assert fake.trash() == (["a.md"] if fake.major >= 5 else [])
    assert http.delete(f"{fake.base_url}/vault/b.md", params={"permanent": "true"}).status_code == 204
    assert "b.md" not in fake.trash() and fake.files() == []
    assert http.delete(f"{fake.base_url}/vault/b.md").json()["errorCode"] == 40400


def test_metadata_lag_knobs(fake: ObsidianFake, http: requests.Session) -> None:
    put(http, fake, "n.md", "---\nv: 1\n---\nold words")
    fake.metadata_lag_reads = 2
    put(http, fake, "n.md", "---\nv: 2\n---\nnew words")

    def frontmatter() -> dict[str, object]:
        return http.get(f"{fake.base_url}/vault/n.md", headers={"Accept": NOTE_JSON}).json()["frontmatter"]

    assert [frontmatter(), frontmatter(), frontmatter()] == [{"v": 1}, {"v": 1}, {"v": 2}]
    assert http.get(f"{fake.base_url}/vault/n.md").content.endswith(b"new words"), "raw reads are always fresh"
    fake.metadata_lag_reads = 0
    fake.hold_metadata()
    put(http, fake, "n.md", "---\nv: 3\n---\nnewest")
    assert frontmatter() == {"v": 2}
    assert http.post(f"{fake.base_url}/search/simple/", params={"query": "newest"}).json() == []
    fake.release_metadata()
    assert frontmatter() == {"v": 3}


def test_metadata_lag_by_time(fake: ObsidianFake, http: requests.Session) -> None:
    fake.metadata_lag_s = 3600.0  # the cache catches up only after an hour: never, within this test
    put(http, fake, "t.md", "---\nv: 1\n---\nbody")
    note = http.get(f"{fake.base_url}/vault/t.md", headers={"Accept": NOTE_JSON}).json()
    assert note["frontmatter"] == {} and note["content"].endswith("body"), "not indexed yet; content is fresh"
    fake.release_metadata()
    assert http.get(f"{fake.base_url}/vault/t.md", headers={"Accept": NOTE_JSON}).json()["frontmatter"] == {"v": 1}


def test_post_appends_with_the_newline_rule(fake: ObsidianFake, http: requests.Session) -> None:
    url = f"{fake.base_url}/vault/log.md"
    assert http.post(url, data=b"first", headers={"Content-Type": "text/markdown"}).status_code == 204
    assert http.post(url, data=b"second\n", headers={"Content-Type": "text/markdown"}).status_code == 204
    assert http.post(url, data=b"third", headers={"Content-Type": "text/markdown"}).status_code == 204
    assert fake.read("log.md") == "first\nsecond\nthird"
    binary = http.post(url, data=b"x", headers={"Content-Type": "application/octet-stream"})
    assert binary.status_code == 400 and binary.json()["errorCode"] == 40010
