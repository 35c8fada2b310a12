"""augment / observe / summarize / compact / prune on a real service (SQLite when it is registered)."""

from __future__ import annotations

import copy
import logging
from datetime import timedelta

import attrs
import pytest

import memroute
from memroute.errors import ValidationError
from memroute.integrations import wrap_anthropic, wrap_openai
from memroute.interfaces import ExtractedFact, Extractor
from memroute.models import Memory, MemoryType, new_memory_id, utcnow
from memroute.pipeline.inject import BLOCK_END, BLOCK_START
from memroute.service import Memroute
from memroute.specs import BackendSpec, ExtractorSpec
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.memory import InMemoryBackend
from memroute.testing.numpy_store import NumpyVectorStore
from tests.servers.fake_llm import FakeAnthropicClient, FakeOpenAIClient, fake_llm_server

SEED = "I prefer TypeScript. I'll use Postgres for this project. I always commit before pushing. I hate Python."


class _InMemoryPlugin:
    @memroute.hookimpl
    def memroute_backends(self):
        yield BackendSpec(name="memory", factory=lambda settings, context: InMemoryBackend(context.instance_name))


class _BrokenExtractor(Extractor):
    def extract(self, text, *, source="user"):
        raise RuntimeError("extractor exploded")


class _ShoutExtractor(Extractor):
    """Adds one fact per text, and claims the key the regex extractor would use for TypeScript."""

    def extract(self, text, *, source="user"):
        return [ExtractedFact(key="preference:typescript", content="SHOUTED TypeScript", type=MemoryType.FACTUAL,
                              category="preference", metadata={"source": source}),
                ExtractedFact(key="note:shout", content="shout was here", type=MemoryType.FACTUAL,
                              category="note", metadata={"source": source})]


class _ExtraExtractors:
    @memroute.hookimpl
    def memroute_extractors(self):
        yield ExtractorSpec(name="broken", factory=lambda settings, context: _BrokenExtractor())
        yield ExtractorSpec(name="shout", factory=lambda settings, context: _ShoutExtractor())


@pytest.fixture
def make_service(tmp_path, plugin_manager, register_plugin):
    """Open a service on SQLite when the backend is registered, else on the in-memory test backend; with a
    deterministic hashing embedder and an exact vector store, so retrieval runs every leg for real."""
    opened: list[Memroute] = []
    stores: list[NumpyVectorStore] = []
    if "sqlite" in plugin_manager.backends():
        backend = {"type": "sqlite", "path": str(tmp_path / "memroute.db")}
    else:
        register_plugin(_InMemoryPlugin(), name="test-memory-backend")
        backend = {"type": "memory"}
    register_plugin(_ExtraExtractors(), name="test-extractors")

    def make(memory=None, extraction=None) -> Memroute:
        store = NumpyVectorStore()
        stores.append(store)
        # min_score 0: the hashing embedder's cosines are not a model's, so no relevance calibration fits them
        config = {"memory": {"enabled": True, "min_score": 0.0, **(memory or {})},
                  "backends": {"primary": "main", "main": backend},
                  "manager": {"health_interval_s": 0}}
        # These tests pin the reference's `regex` extractor and facts only: they are about the pipeline's
        # mechanics; the default (`everyday`, messages kept) is tested in test_learning.py.
        config["extraction"] = {"extractors": ["regex"], "keep_turns": "none", **(extraction or {})}
        service = Memroute.open(config, plugins=plugin_manager, embedder=HashingEmbeddingSource(64),
                                vector_store=store)
        service.vector_store_for_tests = store
        opened.append(service)
        return service

    yield make
    for service in opened:
        service.close()


def chat(text: str, system: str | None = None) -> dict:
    messages = [{"role": "system", "content": system}] if system else []
    return {"model": "gpt-4o", "messages": [*messages, {"role": "user", "content": text}]}


def contents(mem: Memroute, key: str) -> dict[str, Memory]:
    return {m.content: m for m in mem.export(key)}


def old_memory(api_key_id: str, content: str, days: int, type_=MemoryType.FACTUAL, **fields) -> Memory:
    moment = utcnow() - timedelta(days=days)
    return Memory(id=new_memory_id(), api_key_id=api_key_id, key=f"k:{content}", content=content, type=type_,
                  created_at=moment, updated_at=moment, metadata={"category": "preference"}, **fields)


# --- observe -------------------------------------------------------------------------------------------

def test_observe_then_augment_round_trip(make_service):
    mem = make_service()
    stored = mem.observe(chat(SEED), api_key_id="alice", session_id="s1", wait=True)
    assert {m.key for m in stored} == {"preference:typescript", "decision:postgres_for_this_project",
                                       "pattern:commit_before_pushing", "aversion:python"}
    by_content = contents(mem, "alice")
    assert by_content["Postgres for this project"].type is MemoryType.EPISODIC
    assert by_content["Strongly dislikes Python"].metadata["polarity"] == "negative"
    assert all(m.metadata["source"] == "user" and m.session_id == "s1" for m in by_content.values())
    mem.flush()

    request = chat("Which database should I use for this project?", system="You are a helpful engineer.")
    before = copy.deepcopy(request)
    augmented = mem.augment(request, api_key_id="alice")
    assert request == before
    assert [m["role"] for m in augmented["messages"]] == ["system", "system", "user"]
    assert augmented["messages"][0]["content"] == "You are a helpful engineer."
    block = augmented["messages"][1]["content"]
    assert block.startswith(BLOCK_START) and block.endswith(BLOCK_END)
    assert "Postgres for this project" in block


def test_background_observe_and_flush(make_service):
    mem = make_service()
    assert mem.observe(chat("I prefer dark mode. I will use Neovim."), api_key_id="bob") == []
    assert mem.flush(timeout=30)
    assert set(contents(mem, "bob")) == {"dark mode", "Neovim"}


def test_observe_reads_anthropic_and_responses_shapes(make_service):
    mem = make_service()
    mem.observe({"system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": "I love jazz"}]}]},
                api_key_id="k", wait=True)
    mem.observe({"input": "I always write tests first", "instructions": "x"}, api_key_id="k", wait=True)
    assert set(contents(mem, "k")) == {"jazz", "write tests first"}


def test_assistant_text_is_not_mined_by_default(make_service):
    mem = make_service()
    response = {"choices": [{"message": {"role": "assistant", "content": "I always recommend unit tests."}}]}
    mem.observe(chat("Hello there"), response, api_key_id="carol", wait=True)
    assert list(mem.export("carol")) == []


def test_assistant_text_is_mined_when_enabled_and_labelled(make_service):
    mem = make_service(extraction={"mine_assistant": True})
    response = {"content": [{"type": "text", "text": "I always recommend unit tests."}]}
    mem.observe(chat("I prefer pytest"), response, api_key_id="carol", wait=True)
    by_content = contents(mem, "carol")
    assert by_content["pytest"].metadata["source"] == "user"
    assert by_content["recommend unit tests"].metadata["source"] == "assistant"


def test_extractor_chain_merges_by_key_and_survives_a_broken_extractor(make_service, caplog):
    mem = make_service(extraction={"extractors": ["broken", "regex", "shout"]})
    with caplog.at_level(logging.ERROR, logger="memroute.pipeline"):
        stored = mem.observe(chat("I prefer TypeScript"), api_key_id="k", wait=True)
    assert {(m.key, m.content) for m in stored} == {("preference:typescript", "TypeScript"),
                                                    ("note:shout", "shout was here")}
    assert "extractor 'broken' failed" in caplog.text


def test_background_failure_is_logged_not_raised(make_service, caplog):
    mem = make_service()
    mem._manager.primary.close()  # internals: make the backend fail  # every write now fails inside the worker
    with caplog.at_level(logging.ERROR, logger="memroute.pipeline"):
        mem.observe(chat("I prefer tabs over spaces"), api_key_id="k")
        assert mem._conversation.flush(timeout=30)
        assert mem.observe(chat("I prefer vim"), api_key_id="k", wait=True) == []
    assert mem._conversation.failures == 2
    assert "extraction for key k failed" in caplog.text


def test_unknown_extractor_is_a_clear_error(make_service):
    mem = make_service(extraction={"extractors": ["nope"]})
    with pytest.raises(memroute.UnknownComponentError, match="nope"):
        mem.extract("I prefer tabs")


@pytest.mark.parametrize("bad", ["", "   ", None, 42, "x" * 300])
def test_bad_api_key_is_a_validation_error(make_service, bad):
    mem = make_service()
    with pytest.raises(ValidationError):
        mem.observe(chat("I prefer tabs"), api_key_id=bad, wait=True)
    with pytest.raises(ValidationError):
        mem.augment(chat("tabs?"), api_key_id=bad)


# --- augment -------------------------------------------------------------------------------------------

def test_tenant_isolation_in_augment(make_service):
    mem = make_service()
    mem.observe(chat("I prefer Postgres for analytics"), api_key_id="alice", wait=True)
    mem.observe(chat("I prefer MySQL for analytics"), api_key_id="bob", wait=True)
    mem.flush()
    out = mem.augment(chat("Which database for analytics?"), api_key_id="bob")
    block = out["messages"][0]["content"]
    assert "MySQL" in block and "Postgres" not in block
    nobody = chat("Which database for analytics?")
    assert mem.augment(nobody, api_key_id="carol") is nobody


def test_disabled_settings_and_opt_out_return_the_same_object(make_service):
    disabled = make_service(memory={"enabled": False})
    zero = make_service(memory={"max_tokens": 0})
    on = make_service()
    for mem in (disabled, zero, on):
        mem.import_memories([old_memory("k", "TypeScript everywhere", 1)])
        mem.flush()
    request = chat("TypeScript?")
    assert disabled.augment(request, api_key_id="k") is request
    assert zero.augment(request, api_key_id="k") is request
    for header in ({"x-memroute-no-memory": "1"}, {"X-Omniroute-No-Memory": "yes"}):
        assert on.augment(request, api_key_id="k", headers=header) is request
        assert on.observe(chat("I prefer Rust"), api_key_id="k", headers=header, wait=True) == []
    assert on.augment(request, api_key_id="k") is not request
    assert disabled.observe(chat("I prefer Rust"), api_key_id="k", wait=True) == []


def test_explain_augment_reports_hits_and_reasons(make_service):
    mem = make_service()
    mem.observe(chat(SEED), api_key_id="k", wait=True)
    mem.flush()
    info = mem.explain_augment(chat("Should I use Postgres?"), api_key_id="k")
    assert info.injected and info.preview is not None
    assert info.query == "Should I use Postgres?"
    assert info.preview.memories[0].content == "Postgres for this project"
    assert info.preview.api_key_id == "k" and info.preview.resolution.rerank_applied is False
    assert info.preview.total_tokens == sum(m.tokens for m in info.preview.memories) <= 2000
    assert mem.explain_augment(chat("x"), api_key_id="k", headers={"x-memroute-no-memory": "true"}).skipped


def test_augment_responses_and_anthropic_and_provider_rules(make_service):
    mem = make_service()
    mem.observe(chat("I'll use Postgres for this project"), api_key_id="k", wait=True)
    mem.flush()
    responses = mem.augment({"input": "Which database for this project?", "instructions": "Be brief."},
                            api_key_id="k")
    assert responses["instructions"] == "Be brief."
    assert responses["input"][0]["role"] == "developer" and "Postgres" in responses["input"][0]["content"][0]["text"]
    question = [{"role": "user", "content": "database for this project?"}]
    anthropic = mem.augment({"system": "Be brief.", "messages": question}, api_key_id="k")
    assert anthropic["system"].startswith("Be brief.\n\n" + BLOCK_START)
    o1 = mem.augment(chat("database for this project?"), api_key_id="k", provider="o1")
    assert [m["role"] for m in o1["messages"]] == ["user", "user"]


def test_typed_decay_hides_and_prunes_stale_episodic_memories(make_service):
    mem = make_service(memory={"typed_decay_enabled": True, "typed_decay_episodic_days": 5})
    stale = old_memory("k", "Postgres for the old project", 10, MemoryType.EPISODIC)
    immune = old_memory("k", "Postgres for the busy project", 10, MemoryType.EPISODIC)
    immune = attrs.evolve(immune, access_count=5)  # injected often: immune (reference: access_count >= 3)
    fact = old_memory("k", "Postgres is the favourite", 10)
    mem.import_memories([stale, immune, fact])
    mem.flush()
    info = mem.explain_augment(chat("Postgres project"), api_key_id="k")
    assert "old project" not in info.block and "busy project" in info.block and "favourite" in info.block
    report = mem.prune("k")
    assert report.reasons["decay"] == 1 and set(report.candidates) == {stale.id}
    assert mem.get(stale.id, api_key_id="k") is None and mem.get(immune.id, api_key_id="k") is not None


# --- summarize, compact, prune -------------------------------------------------------------------------

def test_summarize_dry_run_changes_nothing(make_service):
    mem = make_service()
    mem.import_memories([old_memory("alice", f"fact number {i}", 40) for i in range(5)])
    before = {m.id: m for m in mem.export("alice")}
    report = mem.summarize("alice", 30)
    assert report.dry_run and len(report.candidates) == 5 and report.deleted == 0
    assert report.summary_preview.startswith("Summary of 5 memories older than 30 days")
    after = {m.id: m for m in mem.export("alice")}
    assert after.keys() == before.keys() and all(after[i].same_as(before[i]) for i in before)


def test_summarize_touches_only_the_named_key_and_vectors_follow(make_service):
    mem = make_service()
    alice_old = [old_memory("alice", f"alice old fact {i}", 40) for i in range(4)]
    alice_new = old_memory("alice", "alice new fact", 1)
    bob_old = [old_memory("bob", f"bob old fact {i}", 40) for i in range(3)]
    mem.import_memories([*alice_old, alice_new, *bob_old])
    mem.flush()
    store = mem.vector_store_for_tests
    assert {m.id for m in alice_old} <= store.ids("alice")

    report = mem.summarize("alice", 30, dry_run=False)
    mem.flush()
    assert not report.dry_run and report.deleted == 4 and len(report.summary_ids) == 1
    assert all(mem.get(m.id, api_key_id="alice") is None for m in alice_old)
    summary = mem.get(report.summary_ids[0], api_key_id="alice")
    assert summary is not None and summary.api_key_id == "alice" and summary.type is MemoryType.SEMANTIC
    assert sorted(summary.metadata["replaces"]) == sorted(m.id for m in alice_old)
    assert all(f"alice old fact {i}" in summary.content for i in range(4))
    assert summary.content.startswith("Summary of 4 memories older than 30 days")
    assert mem.get(alice_new.id, api_key_id="alice") is not None
    # bob untouched
    assert {m.id for m in mem.export("bob")} == {m.id for m in bob_old}
    # vectors of the deleted memories are gone; bob's remain
    assert not ({m.id for m in alice_old} & store.ids("alice"))
    assert {m.id for m in bob_old} <= store.ids("bob")
    assert summary.id in store.ids("alice")


def test_summarize_bad_input(make_service):
    mem = make_service()
    with pytest.raises(ValidationError):
        mem.summarize("alice", -1)
    with pytest.raises(ValidationError):
        mem.summarize("", 30)
    with pytest.raises(ValidationError):
        mem.summarize("alice", "30")  # type: ignore[arg-type]
    assert mem.summarize("alice", 30, dry_run=False).summary_ids == ()  # nothing to do is not an error


def test_compact_keeps_newest_within_budget(make_service):
    mem = make_service()
    memories = [old_memory("k", f"memory {i} " + "x" * 36, 10 - i) for i in range(6)]  # 12 tokens each
    other = old_memory("j", "other key " + "x" * 40, 20)
    mem.import_memories([*memories, other])
    dry = mem.compact("k", max_tokens=30)
    assert dry.dry_run and set(dry.candidates) == {m.id for m in memories[:4]}
    assert len(list(mem.export("k"))) == 6
    report = mem.compact("k", max_tokens=30, dry_run=False)
    remaining = {m.id for m in mem.export("k")}
    assert remaining == {memories[4].id, memories[5].id, *report.summary_ids}
    assert mem.get(other.id, api_key_id="j") is not None


def test_compact_by_session(make_service):
    mem = make_service()
    a = [Memory(**{**_fields(old_memory("k", f"s1 memory {i} " + "y" * 30, 5 - i)), "session_id": "s1"})
         for i in range(3)]
    b = old_memory("k", "no session memory " + "z" * 30, 9)
    mem.import_memories([*a, b])
    report = mem.compact("k", session_id="s1", max_tokens=12, dry_run=False)
    assert set(report.candidates) == {a[0].id, a[1].id}
    assert mem.get(b.id, api_key_id="k") is not None
    assert mem.get(report.summary_ids[0], api_key_id="k").session_id == "s1"


def _fields(memory: Memory) -> dict:
    return {f: getattr(memory, f) for f in ("id", "api_key_id", "key", "content", "type", "created_at",
                                             "updated_at", "metadata", "expires_at")}


def test_prune_deletes_only_expired_memories_unless_deletion_is_configured(make_service):
    mem = make_service(memory={"retention_days": 30})  # a retrieval window: it hides, it never deletes
    ancient = old_memory("alice", "ancient", 4000)
    expired = Memory(**{**_fields(old_memory("alice", "expired", 1)), "expires_at": utcnow() - timedelta(hours=1)})
    bob_ancient = old_memory("bob", "bob ancient", 400)
    mem.import_memories([ancient, expired, bob_ancient])
    report = mem.prune_all()
    mem.flush()
    assert report.reasons == {"retention": 0, "expired": 1, "decay": 0} and report.deleted == 1
    assert report.tenants == 1
    assert mem.get(ancient.id, api_key_id="alice") is not None and mem.get(bob_ancient.id, api_key_id="bob")
    assert mem.search("ancient", api_key_id="alice").hits == ()  # hidden by the window, still stored


def test_prune_deletes_per_type_ages_when_configured(make_service, caplog):
    mem = make_service(memory={"delete_after_days": 365, "types": {"episodic": {"delete_after_days": 30}}})
    old_fact = old_memory("alice", "a fact from 100 days ago", 100)
    old_turn = attrs.evolve(old_memory("alice", "a turn from 100 days ago", 100), type=MemoryType.EPISODIC)
    older_fact = old_memory("bob", "a fact from 400 days ago", 400)
    mem.import_memories([old_fact, old_turn, older_fact])
    with caplog.at_level(logging.INFO, logger="memroute.pipeline"):
        report = mem.prune_all()
    assert report.deleted == 2 and report.tenants == 2 and report.reasons["retention"] == 2
    assert "memroute prune: deleted 2 memories of 2 tenants" in caplog.text
    assert mem.get(old_fact.id, api_key_id="alice") is not None
    assert mem.get(old_turn.id, api_key_id="alice") is None and mem.get(older_fact.id, api_key_id="bob") is None


def test_retrieval_windows_apply_per_type(make_service):
    mem = make_service(memory={"types": {"episodic": {"retention_days": 30}}})
    old_fact = attrs.evolve(old_memory("alice", "peanut allergy noted", 700), key="f")
    old_turn = attrs.evolve(old_memory("alice", "peanut talk at lunch", 60), type=MemoryType.EPISODIC, key="t")
    new_turn = attrs.evolve(old_memory("alice", "peanut butter today", 2), type=MemoryType.EPISODIC, key="n")
    mem.import_memories([old_fact, old_turn, new_turn])
    mem.flush()
    for strategy in ("exact", "hybrid", "semantic"):
        found = {h.memory.id for h in mem.search("peanut", api_key_id="alice", strategy=strategy).hits}
        assert old_turn.id not in found, strategy
        if strategy != "semantic":
            assert {old_fact.id, new_turn.id} <= found, strategy
    assert mem.search("peanut", api_key_id="bob").hits == ()


def test_prune_deletes_retention_and_expired_through_the_manager(make_service):
    mem = make_service(memory={"delete_after_days": 30})
    ancient = old_memory("alice", "ancient", 40)
    expired = Memory(**{**_fields(old_memory("alice", "expired", 1)), "expires_at": utcnow() - timedelta(hours=1)})
    fresh = old_memory("alice", "fresh", 1)
    bob_ancient = old_memory("bob", "bob ancient", 40)
    mem.import_memories([ancient, expired, fresh, bob_ancient])
    mem.flush()
    dry = mem.prune("alice", dry_run=True)
    assert dry.reasons == {"retention": 1, "expired": 1, "decay": 0} and dry.deleted == 0
    assert mem.get(ancient.id, api_key_id="alice") is not None
    report = mem.prune("alice")
    mem.flush()
    assert report.deleted == 2
    assert mem.get(ancient.id, api_key_id="alice") is None and mem.get(expired.id, api_key_id="alice") is None
    assert mem.get(fresh.id, api_key_id="alice") is not None
    assert mem.get(bob_ancient.id, api_key_id="bob") is not None  # other key untouched
    assert ancient.id not in mem.vector_store_for_tests.ids("alice")
    everyone = mem.prune_all()
    assert everyone.deleted == 1 and mem.get(bob_ancient.id, api_key_id="bob") is None


# --- SDK wrappers against a loopback model server ------------------------------------------------------

def test_wrap_openai_augments_and_observes_over_http(make_service):
    mem = make_service()
    mem.observe(chat(SEED), api_key_id="alice", wait=True)
    mem.flush()
    with fake_llm_server() as server:
        client = wrap_openai(FakeOpenAIClient(server.base_url), mem, "alice")
        wrap_openai(client, mem, "alice")  # idempotent: a second wrap does not inject twice
        messages = [{"role": "user", "content": "Which database for this project? I prefer Ubuntu servers."}]
        response = client.chat.completions.create(model="gpt-4o", messages=messages)
        assert response["choices"][0]["message"]["content"] == "OK."
        sent = server.last["body"]
        assert [m["role"] for m in sent["messages"]] == ["system", "user"]
        assert sent["messages"][0]["content"].count(BLOCK_START) == 1
        assert "Postgres for this project" in sent["messages"][0]["content"]
        assert messages == [{"role": "user", "content": "Which database for this project? I prefer Ubuntu servers."}]
        mem.flush()
        assert "Ubuntu servers" in contents(mem, "alice")

        o1 = wrap_openai(FakeOpenAIClient(server.base_url), mem, "alice", provider="o1")
        o1.chat.completions.create(model="o1-mini", messages=[{"role": "user", "content": "database for project?"}])
        assert all(m["role"] == "user" for m in server.last["body"]["messages"])

        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Postgres?"}],
                                       extra_headers={"x-memroute-no-memory": "1"})
        assert [m["role"] for m in server.last["body"]["messages"]] == ["user"]
        assert server.last["headers"]["x-memroute-no-memory"] == "1"


def test_wrap_anthropic_puts_memory_in_top_level_system(make_service):
    mem = make_service()
    mem.observe(chat(SEED), api_key_id="alice", wait=True)
    mem.flush()
    with fake_llm_server() as server:
        server.reply = "I always recommend Rust."
        client = wrap_anthropic(FakeAnthropicClient(server.base_url), mem, "alice")
        response = client.messages.create(model="claude-x", max_tokens=100,
                                          messages=[{"role": "user", "content": "Which database for this project?"}])
        assert response["content"][0]["text"] == "I always recommend Rust."
        sent = server.last["body"]
        assert "Postgres for this project" in sent["system"]
        assert [m["role"] for m in sent["messages"]] == ["user"]
    mem.flush()
    assert "recommend Rust" not in contents(mem, "alice")  # the reply is not mined by default


# --- contradictions ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("first", "second", "kept_key"),
    [("I like Python", "I hate Python", "aversion:python"),
     ("I don't like Python", "I love Python", "preference:python"),
     ("I always deploy on Fridays", "I never deploy on Fridays", "pattern:never_deploy_on_fridays"),
     ("I'll use MongoDB", "I won't use MongoDB", "decision:not_mongodb")],
)
def test_a_newer_opposite_statement_supersedes_the_older_one(make_service, first, second, kept_key):
    mem = make_service()
    old = mem.observe(chat(first), api_key_id="alice", wait=True)[0]
    mem.observe(chat(first), api_key_id="bob", wait=True)
    new = mem.observe(chat(second), api_key_id="alice", wait=True)[0]
    mem.flush()
    assert new.key == kept_key and new.metadata["supersedes"] == [old.id]
    assert [m.key for m in mem.export("alice")] == [kept_key]
    assert mem.get(old.id, api_key_id="alice") is None
    assert [m.key for m in mem.export("bob")] == [old.key]  # another key's memory is never touched
    assert old.id not in mem.vector_store_for_tests.ids("alice")


def test_the_opposite_fact_is_found_by_its_exact_key_past_any_page(make_service):
    """The old lookup listed 50 substring matches, newest first: 60 newer memories mentioning the key hid the
    fact it had to supersede. The lookup is now by exact key."""
    mem = make_service()
    old = mem.observe(chat("I like Python"), api_key_id="alice", wait=True)[0]
    assert old.key == "preference:python"
    for i in range(60):
        mem.add(api_key_id="alice", key=f"note:preference:python:{i}", content=f"preference:python note {i}")
    new = mem.observe(chat("I hate Python"), api_key_id="alice", wait=True)[0]
    assert new.key == "aversion:python" and new.metadata["supersedes"] == [old.id]
    assert mem.get(old.id, api_key_id="alice") is None


def test_session_header_names_the_session(make_service):
    mem = make_service()
    stored = mem.observe(chat("I prefer tabs"), api_key_id="k", headers={"X-Omniroute-Session-Id": " s9 "}, wait=True)
    assert stored[0].session_id == "s9"
    stored = mem.observe(chat("I prefer spaces"), api_key_id="k", session_id="explicit",
                         headers={"x-memroute-session-id": "ignored"}, wait=True)
    assert stored[0].session_id == "explicit"
    mem.flush()
    scoped = mem.explain_augment(chat("tabs or spaces?"), api_key_id="k", headers={"x-memroute-session-id": "s9"},
                                              session_scope=True)
    assert [m.content for m in scoped.preview.memories] == ["tabs"]


def test_a_deeply_nested_body_is_injected_without_copying_it(make_service):
    """Injection copies on write (only the list the block goes into), so a body nested deeper than
    ``copy.deepcopy`` can go gets its memories, and the caller's body is untouched."""
    mem = make_service()
    mem.observe(chat("I prefer tabs"), api_key_id="k", wait=True)
    mem.flush()
    deep: dict = {}
    node = deep
    for _ in range(20_000):  # deeper than copy.deepcopy can go
        node["x"] = {}
        node = node["x"]
    request = {**chat("tabs?"), "metadata": deep}
    messages = request["messages"]
    out = mem.augment(request, api_key_id="k")
    assert out is not request and out["metadata"] is deep
    assert request["messages"] is messages and len(messages) == 1
    assert BLOCK_START in out["messages"][0]["content"]


def test_injection_failure_sends_the_request_unchanged(make_service, caplog, monkeypatch):
    import memroute.pipeline.conversation as conversation

    def broken(*_args, **_kwargs):
        raise RuntimeError("injection broke")

    mem = make_service()
    mem.observe(chat("I prefer tabs"), api_key_id="k", wait=True)
    mem.flush()
    monkeypatch.setattr(conversation, "inject_block", broken)  # a fault no valid body triggers any more
    request = chat("tabs?")
    with caplog.at_level(logging.ERROR, logger="memroute.pipeline"):
        assert mem.augment(request, api_key_id="k") is request
    assert "injection failed" in caplog.text


def test_augment_fills_the_budget_past_vec_top_k(make_service):
    """vec_top_k (20) is a search's default limit, not a cap on what augment can inject (reference: the budget
    walk runs over 100 candidates)."""
    mem = make_service(memory={"vec_top_k": 20, "max_tokens": 4000})
    for i in range(40):
        mem.add(api_key_id="k", key=f"trip:{i}", content=f"Trip to Lisbon number {i} was lovely")
    mem.flush()
    info = mem.explain_augment(chat("How was the Lisbon trip?"), api_key_id="k")
    assert info.injected and info.preview is not None
    assert len(info.preview.memories) == 40
    assert len(mem.search("Lisbon trip", api_key_id="k").hits) == 20  # a plain search keeps its default


def test_augment_with_strategy_recent_injects_the_newest_memories(make_service):
    mem = make_service(memory={"strategy": "recent", "max_tokens": 30})
    for i in range(5):
        mem.add(api_key_id="k", key=f"note:{i}", content=f"Note number {i} about nothing much")
    info = mem.explain_augment(chat("What about the Lisbon trip?"), api_key_id="k")
    assert info.preview is not None and info.preview.resolution.strategy_used == "exact"
    assert len(info.preview.memories) >= 1  # the query is not used as a filter on the recent path
