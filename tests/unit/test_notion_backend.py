"""The Notion backend against the loopback Notion fake (real notion-client 3.x over real HTTP)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs
import pytest

from memroute.config.serialization import structure_config
from memroute.errors import BackendUnavailableError, ConfigError, ConflictError, PluginError, ValidationError
from memroute.models import ListFilter, Memory, MemoryPatch, NewMemory, SearchQuery
from memroute_builtins.backends.notion import schema as ns
from memroute_builtins.backends.notion.backend import NotionBackend, NotionSettings
from memroute_builtins.backends.notion.transport import make_client
from tests.servers.notion_fake import NotionFake, running_notion_fake, utf16_len

QUERY = "POST /v1/data_sources/{id}/query"
CREATE = "POST /v1/pages"
PATCH = "PATCH /v1/pages/{id}"


@pytest.fixture
def fake() -> Iterator[NotionFake]:
    with running_notion_fake() as server:
        yield server


def settings_for(fake: NotionFake, database_id: str, **overrides: Any) -> NotionSettings:
    options = {"token": fake.token, "database_id": database_id, "base_url": fake.base_url, "allow_private": True,
               "max_retries": 2, "max_retry_delay": 0.05, "timeout": 5.0, "requests_per_second": 0, **overrides}
    return NotionSettings(**options)


@pytest.fixture
def backend(fake: NotionFake) -> Iterator[NotionBackend]:
    db = fake.add_database(ns.database_properties())
    instance = NotionBackend("notion", settings_for(fake, db))
    yield instance
    instance.close()


def seed(backend: NotionBackend, fake: NotionFake, memory: Memory) -> None:
    """Store ``memory`` straight into the fake (no HTTP): for tests that need many rows."""
    backend.initialize()
    fake.add_page(str(backend.describe()["data_source_id"]), ns.memory_to_properties(memory))


def new(api_key: str = "key-A", key: str = "pref:lang", content: str = "I like Python", **kw: Any) -> NewMemory:
    return NewMemory(api_key_id=api_key, key=key, content=content, **kw)


# --- chunking --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "",
    "a" * 2000,
    "a" * 2001,
    "a" * 1999 + "😀" + "b" * 5,          # the emoji would straddle the 2,000-unit boundary
    "😀" * 1000 + "😀",                    # exactly 2,000 units, then one more pair
    ("€😀𝄞\r\n\t" * 700),                  # mixed BMP / astral / CRLF
])
def test_chunks_stay_under_2000_utf16_units_and_reassemble_exactly(text: str) -> None:
    chunks = ns.chunk_text(text)
    assert "".join(chunks) == text
    assert all(0 < utf16_len(c) <= 2000 for c in chunks)
    assert all(ns.utf16_len(c) == utf16_len(c) for c in chunks)
    # never split inside a surrogate pair: every chunk is valid UTF-16 on its own
    assert all(c.encode("utf-16-le").decode("utf-16-le") == c for c in chunks)


def test_content_round_trips_exactly_through_notion(backend: NotionBackend, fake: NotionFake) -> None:
    content = ("x" * 1999 + "😀") * 30 + "\r\nend ünïcödé 𝄞"
    created = backend.create(new(content=content, metadata={"nested": {"emoji": "😀" * 1500}}))
    got = backend.get(created.id)
    assert got is not None and got.same_as(created)
    items = fake.pages[next(iter(fake.pages))]["properties"]["Content"]["rich_text"]
    assert len(items) > 30


def test_content_over_the_property_limit_is_refused_before_any_request(backend: NotionBackend,
                                                                       fake: NotionFake) -> None:
    backend.initialize()
    before = len(fake.requests)
    with pytest.raises(ValidationError, match="more than a Notion property holds"):
        backend.create(new(content="😀" * 100_001))
    with pytest.raises(ValidationError, match="500 KB"):
        backend.create(new(content="€" * 190_000))  # fits 100 items, but not Notion's 500 KB request limit
    with pytest.raises(ValidationError, match=r"lone (UTF-16 )?surrogate"):
        backend.create(new(content="bad \ud800 surrogate"))
    assert len(fake.requests) == before


def test_largest_content_round_trips(backend: NotionBackend) -> None:
    content = "abcdefghij" * 19_990  # 199,900 characters: 100 items
    created = backend.create(new(content=content))
    got = backend.get(created.id)
    assert got is not None and got.content == content


def test_timestamps_round_trip_to_the_microsecond(backend: NotionBackend, fake: NotionFake) -> None:
    moment = datetime(2025, 3, 4, 5, 6, 7, 891234, tzinfo=timezone.utc)
    memory = Memory(id="0b6ac3a4-8f2e-4c1e-9d53-5b7c1c1e0a11", api_key_id="key-A", key="k", content="c",
                    created_at=moment, updated_at=moment + timedelta(seconds=1),
                    expires_at=moment + timedelta(days=3650), session_id="s1", metadata={"a": [1, 2]})
    backend.put(memory)
    got = backend.get(memory.id)
    assert got is not None and got.same_as(memory)
    # someone edits the Created date in Notion: the property they edited wins over the stored exact value
    page = next(iter(fake.pages.values()))
    page["properties"]["Created"]["date"]["start"] = "2024-01-01T00:00:00.000+00:00"
    edited = backend.get(memory.id)
    assert edited is not None and edited.created_at == datetime(2024, 1, 1, tzinfo=timezone.utc)


# --- wire behaviour --------------------------------------------------------------------------------------

def test_lookup_by_id_uses_a_query_filter_not_search(backend: NotionBackend, fake: NotionFake) -> None:
    created = backend.create(new())
    fake.requests.clear()
    assert backend.get(created.id) is not None
    assert not fake.calls("POST /v1/search")
    queries = fake.calls(QUERY)
    assert len(queries) == 1
    assert queries[0].body["filter"] == {"property": "Memory ID", "rich_text": {"equals": created.id}}
    assert all(r.headers["notion-version"] == "2025-09-03" for r in fake.requests)


def test_delete_trashes_the_page(backend: NotionBackend, fake: NotionFake) -> None:
    created = backend.create(new())
    assert backend.delete(created.id) is True
    assert fake.calls(PATCH)[-1].body == {"in_trash": True}
    assert backend.get(created.id) is None
    assert backend.delete(created.id) is False
    assert all(p["in_trash"] for p in fake.pages.values())


def test_pages_are_created_under_the_data_source(backend: NotionBackend, fake: NotionFake) -> None:
    backend.create(new())
    body = fake.calls(CREATE)[0].body
    assert body["parent"]["type"] == "data_source_id"
    assert not any(value is None for r in fake.calls(QUERY) for value in r.body.values())


def test_list_walks_cursors_and_counts_every_match(backend: NotionBackend, fake: NotionFake) -> None:
    for n in range(130):
        seed(backend, fake, Memory(id=f"00000000-0000-4000-8000-{n:012d}", api_key_id="key-A", key=f"k{n:03d}",
                           content=f"memory {n}", type="episodic" if n % 3 == 0 else "factual",
                           created_at=datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=n),
                           updated_at=datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=n)))
    backend.create(new(api_key="key-B", key="other", content="memory of B"))
    fake.requests.clear()
    page = backend.list(ListFilter(api_key_id="key-A", limit=20, offset=110, order_dir="asc"))
    assert page.total == 130 and page.by_type == {"episodic": 44, "factual": 86}
    assert [m.key for m in page.data] == [f"k{n:03d}" for n in range(110, 130)]
    queries = fake.calls(QUERY)
    assert len(queries) == 2 and "start_cursor" in queries[1].body
    assert all(q.body["page_size"] <= 100 for q in queries)
    assert queries[0].body["filter"] == {"and": [{"property": "API Key", "rich_text": {"equals": "key-A"}}]}
    found = backend.list(ListFilter(api_key_id="key-A", query="MEMORY 12", type="factual"))
    assert sorted(m.key for m in found.data) == ["k121", "k122", "k124", "k125", "k127", "k128"]
    assert found.total == 6
    assert [m.created_at for m in backend.iter_all("key-A")] == sorted(m.created_at for m in backend.iter_all("key-A"))
    assert len(list(backend.iter_all())) == 131


def test_search_filters_server_side_and_ranks_by_keywords(backend: NotionBackend, fake: NotionFake) -> None:
    now = datetime.now(timezone.utc)
    backend.create(new(key="lang", content="I like Python and python tooling"))
    backend.create(new(key="editor", content="Python in vim"))
    backend.create(new(key="old", content="python expired", expires_at=now - timedelta(seconds=1)))
    backend.create(new(key="sess", content="python in a session", session_id="s-2"))
    backend.create(new(key="food", content="Pizza"))
    backend.create(new(api_key="key-B", key="lang", content="python python python"))
    fake.requests.clear()
    hits = backend.search(SearchQuery(api_key_id="key-A", text="python tooling", limit=10))
    assert [h.memory.key for h in hits][:1] == ["lang"]
    assert {h.memory.key for h in hits} == {"lang", "editor", "sess"}
    assert all(h.memory.api_key_id == "key-A" for h in hits)
    flt = fake.calls(QUERY)[0].body["filter"]["and"]
    assert flt[0] == {"property": "API Key", "rich_text": {"equals": "key-A"}}
    assert {"property": "Content", "rich_text": {"contains": "python"}} in flt[-1]["or"]
    scoped = backend.search(SearchQuery(api_key_id="key-A", text="python", session_id="s-2"))
    assert [h.memory.key for h in scoped] == ["sess"]
    recent = backend.search(SearchQuery(api_key_id="key-A", strategy="exact", limit=2))
    assert [h.memory.key for h in recent] == ["food", "sess"]


def test_tenant_isolation(backend: NotionBackend) -> None:
    a = backend.create(new(api_key="key-A", key="shared", content="A's secret"))
    b = backend.create(new(api_key="key-B", key="shared", content="B's secret"))
    assert a.id != b.id
    again = backend.create(new(api_key="key-A", key="shared", content="A's new secret"))
    assert again.id == a.id
    b_now = backend.get(b.id)
    assert b_now is not None and b_now.content == "B's secret"
    assert [m.id for m in backend.list(ListFilter(api_key_id="key-B")).data] == [b.id]
    assert [h.memory.id for h in backend.search(SearchQuery(api_key_id="key-B", text="secret"))] == [b.id]
    assert backend.delete(a.id) is True
    assert backend.get(b.id) is not None
    assert backend.list(ListFilter(api_key_id="key-A")).total == 0


def test_update_and_key_conflict(backend: NotionBackend) -> None:
    first = backend.create(new(key="one"))
    backend.create(new(key="two"))
    updated = backend.update(first.id, MemoryPatch(content="changed", session_id="s"))
    assert updated is not None and updated.content == "changed" and updated.created_at == first.created_at
    got = backend.get(first.id)
    assert got is not None and got.same_as(updated)
    with pytest.raises(ConflictError):
        backend.update(first.id, MemoryPatch(key="two"))
    assert backend.update("00000000-0000-4000-8000-000000000000", MemoryPatch(content="x")) is None
    assert backend.get_many([first.id, "missing"]) == {first.id: got}


# --- rate limits, overload, non-JSON errors --------------------------------------------------------------

def test_429_retry_after_is_honoured(backend: NotionBackend, fake: NotionFake) -> None:
    backend.initialize()
    fake.fail_next(CREATE, 429, headers={"Retry-After": "0"})
    created = backend.create(new())
    assert len(fake.calls(CREATE)) == 2  # notion-client waited Retry-After and sent it again
    assert [r.status for r in fake.calls(CREATE)] == [429, 200]
    assert backend.get(created.id) is not None


def test_429_that_does_not_stop_becomes_unavailable(backend: NotionBackend, fake: NotionFake) -> None:
    backend.initialize()
    fake.fail_next(QUERY, 429, headers={"Retry-After": "0"}, times=10)
    with pytest.raises(BackendUnavailableError, match="rate limit"):
        backend.get("00000000-0000-4000-8000-000000000001")
    assert len(fake.calls(QUERY)) == 3  # max_retries=2 → three attempts, no more


def test_529_is_retried_by_memroute(backend: NotionBackend, fake: NotionFake) -> None:
    created = backend.create(new())
    fake.fail_next(QUERY, 529, headers={"Retry-After": "0"})
    assert backend.get(created.id) is not None
    assert [r.status for r in fake.calls(QUERY)][-2:] == [529, 200]


def test_create_after_an_ambiguous_failure_checks_before_retrying(backend: NotionBackend, fake: NotionFake) -> None:
    backend.initialize()
    fake.fail_next(CREATE, 502, body="<html><body>502 Bad Gateway</body></html>")
    created = backend.create(new())
    assert [r.status for r in fake.calls(CREATE)] == [502, 200]
    assert backend.list(ListFilter(api_key_id="key-A")).total == 1
    assert backend.get(created.id) is not None


def test_non_json_500_on_update_is_retried(backend: NotionBackend, fake: NotionFake) -> None:
    created = backend.create(new())
    fake.fail_next(PATCH, 500, body="upstream exploded")
    updated = backend.update(created.id, MemoryPatch(content="new"))
    assert updated is not None and [r.status for r in fake.calls(PATCH)] == [500, 200]


def test_persistent_non_json_errors_become_unavailable(backend: NotionBackend, fake: NotionFake) -> None:
    backend.initialize()
    fake.fail_next(QUERY, 503, body="<html>maintenance</html>", times=5)
    with pytest.raises(BackendUnavailableError, match="not a Notion error body"):
        backend.list(ListFilter(api_key_id="key-A"))
    assert backend.health().ok is True


def test_timeouts_become_unavailable(fake: NotionFake) -> None:
    db = fake.add_database(ns.database_properties())
    slow = NotionBackend("notion", settings_for(fake, db, timeout=0.2, max_retries=0))
    fake.delay("GET /v1/databases/{id}", 0.6)
    with pytest.raises(BackendUnavailableError, match="no answer within"):
        slow.initialize()
    health = slow.health()
    assert health.ok is False and "no answer" in (health.error or "")


# --- configuration, schema, errors ----------------------------------------------------------------------

def test_schema_mismatch_says_what_to_fix(fake: NotionFake) -> None:
    props = ns.database_properties()
    props["Name"] = props.pop("Key")
    del props["Memory ID"]
    props["Created"] = {"rich_text": {}}
    props["Type"] = {"select": {"options": [{"name": "factual"}]}}
    db = fake.add_database(props)
    with pytest.raises(ConflictError) as info:
        NotionBackend("notion", settings_for(fake, db)).initialize()
    message = str(info.value)
    assert "the title property is named 'Name': rename it to 'Key'" in message
    assert "property 'Memory ID' is missing: add a Text property named 'Memory ID'" in message
    assert "property 'Created' has type 'rich_text', expected 'date': change it to Date" in message
    assert "lacks the option(s) episodic, procedural, semantic" in message
    assert "memroute notion init" in message


def test_auth_and_sharing_errors_have_fix_hints(fake: NotionFake) -> None:
    db = fake.add_database(ns.database_properties())
    with pytest.raises(BackendUnavailableError, match="check `token`"):
        NotionBackend("notion", settings_for(fake, db, token="wrong")).initialize()
    with pytest.raises(BackendUnavailableError, match="share the database with the integration"):
        NotionBackend("notion", settings_for(fake, "1" * 32)).initialize()


def test_several_data_sources_need_data_source_id(fake: NotionFake) -> None:
    db = fake.add_database(ns.database_properties(), data_sources=2)
    with pytest.raises(ConfigError, match="has 2 data sources"):
        NotionBackend("notion", settings_for(fake, db)).initialize()
    second = fake.databases[db]["data_sources"][1]["id"]
    chosen = NotionBackend("notion", settings_for(fake, db, data_source_id=second.replace("-", "")))
    chosen.create(new())
    assert fake.calls(CREATE)[0].body["parent"]["data_source_id"] == second


def test_settings_are_validated() -> None:
    ok = structure_config({"token": "t", "database_id": "https://www.notion.so/ws/Mem-" + "ab" * 16,
                           "base_url": "http://127.0.0.1:9/v1/"}, NotionSettings)
    assert ok.database_id == "abababab-abab-abab-abab-abababababab" and ok.base_url == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="database_id"):
        structure_config({"token": "t", "database_id": "not-an-id"}, NotionSettings)
    with pytest.raises(ConfigError, match="token"):
        structure_config({"token": " ", "database_id": "ab" * 16}, NotionSettings)
    with pytest.raises(ConfigError, match="database_id"):
        structure_config({"token": "t"}, NotionSettings)
    assert "secret-value" not in repr(attrs.evolve(ok, token="secret-value"))


def test_missing_notion_client_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "notion_client", None)
    settings = NotionSettings(token="t", database_id="ab" * 16)
    with pytest.raises(PluginError, match=r"pip install 'memroute\[notion\]'"):
        make_client(settings)


def test_the_plugin_is_registered(plugin_manager: Any) -> None:
    spec = plugin_manager.backends()["notion"]
    assert spec.settings_class is NotionSettings


# --- memroute notion init / check ------------------------------------------------------------------------

def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from memroute.cli import main

    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_init_creates_a_database_that_the_backend_accepts(fake: NotionFake, capsys: pytest.CaptureFixture[str]) -> None:
    parent = fake.add_parent_page()
    code, out, err = run_cli(["notion", "init", "--parent", parent, "--title", "Memories", "--token", fake.token,
                              "--base-url", fake.base_url, "--allow-private"], capsys)
    assert code == 0, err
    (db_id,) = fake.databases
    assert db_id in out and 'type = "notion"' in out and f'database_id = "{db_id}"' in out
    source = fake.data_sources[fake.databases[db_id]["data_sources"][0]["id"]]
    assert {n: p["type"] for n, p in source["properties"].items()} == ns.SCHEMA
    code, out, err = run_cli(["notion", "check", "--database", db_id, "--token", fake.token,
                              "--base-url", fake.base_url, "--allow-private"], capsys)
    assert code == 0 and "OK" in out, err
    backend = NotionBackend("notion", settings_for(fake, db_id))
    assert backend.get(backend.create(new()).id) is not None
    code, out, err = run_cli(["notion", "init", "--parent", parent, "--json", "--token", fake.token,
                              "--base-url", fake.base_url, "--allow-private"], capsys)
    data = json.loads(out)
    assert code == 0 and data["database_id"] in fake.databases and data["database_id"] != db_id, err
    assert data["config"].startswith("[backends.notion]")


def test_init_and_check_errors_are_one_line_with_a_fix(fake: NotionFake, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Hermetic: no token or configuration from the environment or the working directory may fill in --token.
    for name in ("NOTION_TOKEN", "MEMROUTE_CONFIG", "MEMROUTE_DB", "MEMROUTE_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["notion", "init", "--parent", fake.add_parent_page(), "--token", "wrong",
                            "--base-url", fake.base_url, "--allow-private"], capsys)
    assert code == 1 and "check `token`" in err and "Traceback" not in err
    code, _, err = run_cli(["notion", "init", "--parent", "1" * 32, "--token", fake.token,
                            "--base-url", fake.base_url, "--allow-private"], capsys)
    assert code == 1 and "share the parent page" in err
    props = ns.database_properties()
    del props["Content"]
    db = fake.add_database(props)
    code, _, err = run_cli(["notion", "check", "--database", db, "--token", fake.token,
                            "--base-url", fake.base_url, "--allow-private"], capsys)
    assert code == 1 and "add a Text property named 'Content'" in err
    code, _, err = run_cli(["notion", "check", "--database", db, "--base-url", fake.base_url,
                            "--allow-private"], capsys)
    assert code == 2 and "token" in err  # a missing option is bad input: exit 2


def test_the_docs_configuration_examples_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    from memroute.config.settings import load_settings

    page = Path(__file__).parents[2] / "docs" / "backends" / "notion.md"
    blocks = re.findall(r"```toml\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.setenv("NOTION_TOKEN", "ntn_doc_example")
    for block in blocks:
        text = "\n".join(line.strip() for line in block.splitlines())
        options = dict(tomllib.loads(text)["backends"]["notion"])
        assert options.pop("type") == "notion"
        settings = structure_config({**options, "token": "ntn_doc_example"}, NotionSettings)
        assert settings.database_id
    config = Path("memroute.toml")
    config.write_text(blocks[-1], encoding="utf-8")
    loaded = load_settings(config)
    assert loaded.backends.instances["notion"].type == "notion"


def test_recency_search_stops_reading_once_it_has_enough(backend: NotionBackend, fake: NotionFake) -> None:
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    for n in range(150):
        seed(backend, fake, Memory(id=f"00000000-0000-4000-8000-{n:012d}", api_key_id="key-A", key=f"k{n}",
                           content=f"memory {n}", created_at=start + timedelta(seconds=n),
                           updated_at=start + timedelta(seconds=n)))
    fake.requests.clear()
    hits = backend.search(SearchQuery(api_key_id="key-A", strategy="exact", limit=5))
    assert [h.memory.key for h in hits] == ["k149", "k148", "k147", "k146", "k145"]
    assert len(fake.calls(QUERY)) == 1  # the first 100 rows were enough; the cursor was not followed


def test_get_500_is_retried_once_not_twice_over(fake: NotionFake) -> None:
    db = fake.add_database(ns.database_properties())
    fake.fail_next("GET /v1/databases/{id}", 500, times=10)
    with pytest.raises(BackendUnavailableError, match="Notion is unavailable"):
        NotionBackend("notion", settings_for(fake, db)).initialize()
    # notion-client retries a GET 500 itself (max_retries=2 → 3 attempts); memroute does not multiply that
    assert len(fake.calls("GET /v1/databases/{id}")) == 3


def test_requests_are_paced_to_notions_rate() -> None:
    from memroute_builtins.backends.notion.transport import RequestPacer

    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = RequestPacer(2.0, burst=2, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        pacer.wait()
    assert slept == [0.5, 0.5, 0.5]  # a burst of 2, then one request every 1/2 s
    now[0] += 10  # idle time refills the bucket, but never beyond the burst
    pacer.wait()
    pacer.wait()
    assert len(slept) == 3
    pacer.wait()
    assert len(slept) == 4
    off = RequestPacer(0, clock=lambda: now[0], sleep=sleep)
    for _ in range(50):
        off.wait()
    assert len(slept) == 4
