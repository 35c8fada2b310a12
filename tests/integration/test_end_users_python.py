"""End users under one app key in the Python API (issue 30): ``end_user_tenant("shop", "u1")`` addresses an end
user's memories as an ordinary ``api_key_id``, so every backend and vector store isolates end users exactly as
tenants, with no storage change. Two apps with two end users each (the same end user ids and upsert keys in
both), on SQLite + sqlite-vec, SQLite + Qdrant (local), PostgreSQL + pgvector (row-level security on) and a
SQLite primary with Obsidian and Notion fallbacks (their loopback fakes); then
``forget_end_user`` erases one of them everywhere and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import memroute
from memroute import ValidationError, end_user_tenant, split_end_user
from memroute.deployment.keys import hash_secret
from memroute.deployment.state import SESSION_HISTORIES, session_history_name
from memroute.errors import ConflictError
from memroute.models import ListFilter
from memroute_builtins.backends.notion import schema as ns
from tests.servers.notion_fake import running_notion_fake
from tests.servers.obsidian_fake import ObsidianFake, make_self_signed_cert

APPS = ("shop", "cafe")
USERS = ("u1", "u2")


@pytest.fixture(params=["sqlite-vec", "qdrant", "pgvector", "obsidian+notion"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "obsidian+notion":  # the loopback fakes of the Obsidian Local REST API and of Notion
        (tmp_path / "tls").mkdir()
        cert = make_self_signed_cert(tmp_path / "tls")
        with ObsidianFake(tmp_path / "vault", tls_cert=cert) as obsidian, running_notion_fake() as notion:
            yield {"backends": {
                "primary": "main", "fallbacks": ["vault", "notes"],
                "main": {"type": "sqlite", "path": str(tmp_path / "main.db")},
                "vault": {"type": "obsidian", "api_key": obsidian.api_key, "base_url": obsidian.base_url,
                          "verify": str(obsidian.cert_path), "timeout": 5},
                "notes": {"type": "notion", "token": notion.token, "base_url": notion.base_url,
                          "allow_private": True, "database_id": notion.add_database(ns.database_properties()),
                          "requests_per_second": 0}},
                "embedding": {"source": "static"}, "vectors": {"store": "sqlite-vec"}, "data_dir": str(tmp_path)}
        return
    if request.param == "pgvector":
        from tests.servers.postgres import fresh_schema

        server = request.getfixturevalue("postgres_server")
        schema = fresh_schema(server)
        yield {"backends": {"primary": "main", "main": {"type": "postgres", "dsn": server.dsn(), "schema": schema}},
               "embedding": {"source": "static"}, "vectors": {"store": "pgvector"}, "data_dir": str(tmp_path)}
        server.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', "memroute")
        return
    vectors = {"store": "qdrant", "location": ":memory:"} if request.param == "qdrant" else {"store": "sqlite-vec"}
    yield {"backends": {"primary": "main", "fallbacks": ["copy"],
                        "main": {"type": "sqlite", "path": str(tmp_path / "main.db")},
                        "copy": {"type": "sqlite", "path": str(tmp_path / "copy.db")}},
           "embedding": {"source": "static"}, "vectors": vectors, "data_dir": str(tmp_path)}


def test_end_users_are_isolated_and_one_is_erased_everywhere(config: dict[str, Any]) -> None:
    with memroute.open(config) as mem:
        ids: dict[str, set[str]] = {}
        for app in APPS:
            for user in USERS:
                owner = end_user_tenant(app, user)
                # the same upsert keys for every end user: each gets its own memory, never another's upsert
                ids[owner] = {mem.add(api_key_id=owner, key="pet", content=f"{owner} has a cat called Miso").id,
                              mem.add(api_key_id=owner, key="lang", content=f"{owner} prefers TypeScript").id}
        ids["shop"] = {mem.add(api_key_id="shop", key="pet", content="the shop's own cat").id}
        assert mem.flush(timeout=60)
        for owner, mine in ids.items():
            assert {m.id for m in mem.list(api_key_id=owner).data} == mine
            for backend in mem._manager.backends:  # every backend holds each end user apart, as tenants
                assert {m.id for m in backend.list(ListFilter(api_key_id=owner, limit=100)).data} == mine
            hits = mem.search("what is my cat called", api_key_id=owner)
            assert hits.hits and {h.memory.id for h in hits} <= mine
            assert "vector" in hits.provenance.legs
        assert mem.end_users("shop") == ["u1", "u2"] and mem.end_users("cafe") == ["u1", "u2"]

        victim = end_user_tenant("shop", "u1")
        for owner in (victim, "shop/u1x", "shop/u2", "shop"):  # what the framework sessions keep
            mem.state.put_value(SESSION_HISTORIES, session_history_name(owner, "langchain", "s1"), [{"n": 1}])
        mem.state.put_value(SESSION_HISTORIES, session_history_name(victim, "openai-agents", "s2"), [])
        dry = mem.forget_end_user("shop", "u1", dry_run=True)
        assert dry.matched == 2 and dry.deleted == 0 and mem.list(api_key_id=victim).total == 2
        report = mem.forget_end_user("shop", "u1")
        assert report.deleted == 2 and set(report.ids) == ids[victim] and report.complete
        assert set(report.remaining.values()) == {0} and report.vectors_remaining == 0
        assert report.histories_deleted == 2
        # what the erased memories said before is gone too, where a backend keeps history; others' stays
        if any(b.capabilities.history for b in mem._manager.backends):
            assert report.change_history_deleted and report.change_history_deleted >= 4  # created + deleted, twice
            for memory_id in ids[victim]:
                assert mem.history(memory_id, api_key_id=victim) is None
            other = next(iter(ids["shop/u2"]))
            assert mem.history(other, api_key_id="shop/u2").entries
        assert mem.state.get_value(SESSION_HISTORIES, session_history_name(victim, "langchain", "s1")) is None
        for owner in ("shop/u1x", "shop/u2", "shop"):
            assert mem.state.get_value(SESSION_HISTORIES, session_history_name(owner, "langchain", "s1")) == [{"n": 1}]
        for backend in mem._manager.backends:  # internals: every place the memories lived
            assert backend.list(ListFilter(api_key_id=victim)).total == 0
        store = mem._retrieval.vector_store
        assert store.count(victim) == 0 and not (store.ids() & ids[victim])
        for owner, mine in ids.items():
            if owner != victim:
                assert {m.id for m in mem.list(api_key_id=owner).data} == mine
                assert store.ids(owner) == mine
        assert mem.end_users("shop") == ["u2"]
        assert mem.search("cat called Miso", api_key_id=victim).hits == ()


def test_composites_and_bad_end_users(tmp_path: Path) -> None:
    assert end_user_tenant("shop", "u1") == "shop/u1" and split_end_user("shop/u1") == ("shop", "u1")
    assert split_end_user("shop") is None and split_end_user("a/b/c") is None and split_end_user("/u1") is None
    for bad in ("", "a/b", "-x", "x" * 129, "ü", "a b", None, 7):
        with pytest.raises(ValidationError, match="endUser"):
            end_user_tenant("shop", bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="tenant"):
        end_user_tenant("a/b", "u1")
    with pytest.raises(ValidationError, match="tenant"):
        end_user_tenant("x" * 128, "u1")  # an app tenant leaves room for any end user in 256 characters
    with memroute.open({"data_dir": str(tmp_path), "embedding": {"source": "none"}}) as mem:
        with pytest.raises(ValidationError, match="endUser"):
            mem.forget_end_user("shop", "../u1")
        key, _secret = mem.keys.create("app", scopes="read,write", tenant="shop", end_users=True)
        assert key.end_users and mem.keys.get(key.id).end_users and mem.keys.get(key.id).tenant == "shop"
        rotated, _ = mem.keys.rotate(key.id)
        assert rotated.end_users and rotated.tenant == "shop"
        with pytest.raises(ValidationError, match="admin"):
            mem.keys.create("x", scopes="admin", tenant="shop", end_users=True)
        with pytest.raises(ValidationError, match="tenant"):
            mem.keys.create("x", scopes="read", tenant="shop/u1")
        assert not mem.keys.create("plain", scopes="read", tenant="cafe")[0].end_users


def test_an_app_key_is_refused_while_an_old_key_acts_on_one_of_its_end_users(tmp_path: Path) -> None:
    with memroute.open({"data_dir": str(tmp_path), "embedding": {"source": "none"}}) as mem:
        store = mem.keys
        legacy = store.create("old", scopes="read", tenant="bakery-u1")
        # a key made before tenants were checked for "/": written to the store as it was then
        store._insert(attrs.evolve(legacy[0], id="key_legacy", tenant="bakery/u1"), hash_secret("mr_legacy-secret"))
        with pytest.raises(ConflictError, match="key_legacy"):
            store.create("app", scopes="read,write", tenant="bakery", end_users=True)
        store.revoke("key_legacy")
        assert store.create("app", scopes="read,write", tenant="bakery", end_users=True)[0].end_users


def test_agent_scope_tags_and_filters_within_one_end_user(tmp_path: Path) -> None:
    with memroute.open({"data_dir": str(tmp_path), "embedding": {"source": "static"}}) as mem:
        owner = end_user_tenant("shop", "u1")
        planner = mem.add(api_key_id=owner, content="Book the flight to Lisbon on Friday", agent="planner")
        mem.add(api_key_id=owner, content="The flight to Lisbon costs 120 euros", agent="budget")
        untagged = mem.add(api_key_id=owner, content="I fly to Lisbon for the conference")
        mem.add(api_key_id=end_user_tenant("shop", "u2"), content="Book the flight to Lisbon too", agent="planner")
        assert planner.metadata == {"agent": "planner"}
        assert mem.flush(timeout=30)
        hits = mem.search("flight to Lisbon", api_key_id=owner, agent="planner")
        assert [h.memory.id for h in hits] == [planner.id]  # one agent, one end user
        assert len(mem.search("flight to Lisbon", api_key_id=owner)) == 3  # no agent: the whole run
        page = mem.list(api_key_id=owner, agent="budget")
        assert page.total == 1 and page.by_type == {"factual": 1} and "120 euros" in page.data[0].content
        assert mem.list(api_key_id=owner, agent="nobody").total == 0
        assert untagged.id in {m.id for m in mem.list(api_key_id=owner).data}
        for bad in ("", "a/b", "x" * 129):
            with pytest.raises(ValidationError, match="agent"):
                mem.add(api_key_id=owner, content="x", agent=bad)
            with pytest.raises(ValidationError, match="agent"):
                mem.search("x", api_key_id=owner, agent=bad)


def test_an_erasure_while_a_fallback_is_down_says_so_and_completes_when_it_is_back(
        tmp_path: Path, plugin_manager: Any, register_plugin: Any) -> None:
    from tests.servers.faulty_sqlite import FaultySqlitePlugin

    faulty = FaultySqlitePlugin()
    register_plugin(faulty, name="faulty-sqlite")
    config = {"backends": {"primary": "main", "fallbacks": ["copy"],
                           "main": {"type": "sqlite", "path": str(tmp_path / "main.db")},
                           "copy": {"type": "faulty-sqlite", "path": str(tmp_path / "copy.db")}},
              "manager": {"health_interval_s": 0, "retry_base_s": 0.01, "retry_max_s": 0.05, "breaker_reset_s": 0},
              "embedding": {"source": "none"}, "data_dir": str(tmp_path / "d")}
    with memroute.open(config, plugins=plugin_manager) as mem:
        victim = end_user_tenant("shop", "u1")
        ids = {mem.add(api_key_id=victim, content=f"fact {i}").id for i in range(3)}
        kept = mem.add(api_key_id="shop/u2", content="another end user's fact")
        assert mem.flush(timeout=30)
        copy = faulty.instances["copy"]
        copy.fail("delete", "list")  # the fallback is down
        report = mem.forget_end_user("shop", "u1", settle_s=0.5)
        assert report.deleted == 3 and report.remaining["main"] == 0 and report.remaining["copy"] is None
        assert report.replication_pending == 3 and not report.complete  # waiting in the outbox, not lost
        copy.recover()
        assert mem.flush(timeout=30)
        again = mem.forget_end_user("shop", "u1")
        assert again.matched == 0 and again.remaining == {"main": 0, "copy": 0} and again.complete
        assert not any(copy.get(memory_id) for memory_id in ids) and copy.get(kept.id) is not None


def test_the_sdk_wrappers_take_an_end_users_tenant(tmp_path: Path) -> None:
    import openai

    from memroute.integrations import wrap_openai
    from tests.servers.fake_llm import fake_llm_server

    with fake_llm_server() as upstream, memroute.open(
            {"data_dir": str(tmp_path / "d"), "memory": {"enabled": True}, "embedding": {"source": "none"}}) as mem:
        for user, database in (("u1", "Postgres"), ("u2", "MySQL")):
            mem.add(api_key_id=end_user_tenant("shop", user), key="decision:db",
                    content=f"I'll use {database} for this project")
        for user, mine, theirs in (("u1", "Postgres", "MySQL"), ("u2", "MySQL", "Postgres")):
            client = wrap_openai(openai.OpenAI(base_url=upstream.base_url + "/v1", api_key="sk-test", max_retries=0),
                                 mem, api_key_id=end_user_tenant("shop", user))
            client.chat.completions.create(model="gpt-4o",
                                           messages=[{"role": "user", "content": "Which database for this project?"}])
            sent = str(upstream.last["body"])
            assert mine in sent and theirs not in sent
