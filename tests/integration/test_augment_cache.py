"""augment reuses the retrieval for a repeated message while the tenant's data is unchanged
(memroute.pipeline.augment_cache), on the embedded default: SQLite, the static embedding, sqlite-vec.

Every write that changes what a search reads moves the tenant's data version, also a write from another
process (a real second process here); access telemetry and a re-stated fact do not.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import pytest

import memroute
from memroute.models import utcnow
from memroute.pipeline.inject import BLOCK_START

FACTS = ["Prefers TypeScript for the dashboard frontend", "Runs the billing service on Postgres 16",
         "Trains for a marathon in April", "Reviews code every morning before standup"]


def body(text: str = "which database does the billing service use?") -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": text}]}


@pytest.fixture
def mem(tmp_path):
    service = memroute.open({"memory": {"enabled": True, "max_tokens": 1000}}, data_dir=str(tmp_path),
                            embedding={"source": "static"}, vectors={"store": "sqlite-vec"})
    for tenant in ("alice", "bob"):
        for index, fact in enumerate(FACTS):
            service.add(api_key_id=tenant, content=f"{fact} ({tenant})", key=f"fact:{index}")
    assert service.flush(timeout=60)
    yield service
    service.close()


def searches(service, monkeypatch) -> list[str]:
    """The tenants of every retrieval that really ran (the search behind augment)."""
    ran: list[str] = []
    original = type(service).search

    def spy(self, query, **kwargs):
        ran.append(kwargs["api_key_id"])
        return original(self, query, **kwargs)

    monkeypatch.setattr(type(service), "search", spy)
    return ran


def system_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


def augmented(service, tenant: str = "alice", text: str | None = None) -> dict:
    return service.augment(body(text) if text else body(), api_key_id=tenant)


def test_a_repeated_message_is_served_from_the_first_retrieval(mem, monkeypatch):
    ran = searches(mem, monkeypatch)
    first = augmented(mem)
    assert BLOCK_START in system_text(first) and "Postgres 16 (alice)" in system_text(first)
    for _ in range(3):
        assert augmented(mem) == first
    assert ran == ["alice"]
    augmented(mem, text="what is the marathon plan?")  # another message is another retrieval
    assert ran == ["alice", "alice"]


def test_the_access_counts_it_records_and_a_restated_fact_change_nothing(mem, monkeypatch):
    ran = searches(mem, monkeypatch)
    first = augmented(mem)
    mem._manager._access.drain()  # the accesses of the injected memories reach the file
    mem.add(api_key_id="alice", content=f"{FACTS[1]} (alice)", key="fact:1")  # the same fact, stated again
    assert augmented(mem) == first and ran == ["alice"]


@pytest.mark.parametrize("change", ["add", "edit", "delete", "expire"])
def test_every_write_that_changes_the_answer_is_seen(mem, monkeypatch, change):
    ran = searches(mem, monkeypatch)
    before = system_text(augmented(mem))
    stored = mem.get_by_key("fact:1", api_key_id="alice")
    if change == "add":
        mem.add(api_key_id="alice", content="The billing service database moved to MySQL", key="fact:new")
    elif change == "edit":
        mem.update(stored.id, api_key_id="alice", content="Runs the billing service on SQLite (alice)")
    elif change == "delete":
        mem.delete(stored.id, api_key_id="alice")
    else:
        mem.update(stored.id, api_key_id="alice", expires_at=utcnow() + timedelta(milliseconds=300))
    mem.flush(timeout=60)
    after = system_text(augmented(mem))
    assert len(ran) == 2
    if change == "expire":
        time.sleep(0.4)
        after = system_text(augmented(mem))
        assert "Postgres 16" not in after
    assert after != before
    if change in ("add", "edit"):
        assert {"add": "MySQL", "edit": "SQLite (alice)"}[change] in after
    else:
        assert "Postgres 16" not in after


def test_a_write_from_another_process_is_seen(mem, monkeypatch, tmp_path):
    ran = searches(mem, monkeypatch)
    assert "MySQL" not in system_text(augmented(mem))
    script = textwrap.dedent(f"""
        import memroute
        with memroute.open({{"memory": {{"enabled": True}}}}, data_dir={str(tmp_path)!r},
                           embedding={{"source": "static"}}, vectors={{"store": "sqlite-vec"}}) as other:
            other.add(api_key_id="alice", content="The billing service database moved to MySQL", key="fact:moved")
            assert other.flush(timeout=60)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert "MySQL" in system_text(augmented(mem)) and len(ran) == 2


def test_tenants_never_share_an_entry_and_one_tenants_write_keeps_the_others(mem, monkeypatch):
    ran = searches(mem, monkeypatch)
    alice, bob = augmented(mem, "alice"), augmented(mem, "bob")
    assert "(alice)" in system_text(alice) and "(bob)" not in system_text(alice)
    assert "(bob)" in system_text(bob) and "(alice)" not in system_text(bob)
    mem.add(api_key_id="bob", content="Bob's billing service runs on Oracle", key="fact:oracle")
    assert augmented(mem, "alice") == alice  # bob's write leaves alice's entry alone
    assert "Oracle" in system_text(augmented(mem, "bob")) and "Oracle" not in system_text(augmented(mem, "alice"))
    assert ran == ["alice", "bob", "bob"]


def test_a_reused_retrieval_reads_its_memories_again_as_the_tenants_own(mem, monkeypatch):
    """On a hit the memories are read again by tenant (the key also names it): a memory id that another tenant
    holds is never read back into this tenant's block."""
    from memroute.routing.manager import MemoryManager

    first = augmented(mem, "alice")
    read_as: list[str | None] = []
    original = MemoryManager.get_many

    def spy(self, memory_ids, *, api_key_id=None):
        read_as.append(api_key_id)
        return original(self, memory_ids, api_key_id=api_key_id)

    monkeypatch.setattr(MemoryManager, "get_many", spy)
    assert augmented(mem, "alice") == first
    assert read_as == ["alice"]


def test_cached_only_answers_a_repeat_and_never_searches(mem, monkeypatch):
    ran = searches(mem, monkeypatch)
    quick = mem.explain_augment(body(), api_key_id="alice", preview=False, cached_only=True)
    assert quick.skipped == "not cached" and quick.request == body() and quick.count == 0 and ran == []
    assert mem._conversation.cache.stats()["misses"] == 0  # only a search counts the miss it follows
    searched = mem.explain_augment(body(), api_key_id="alice", preview=False)
    again = mem.explain_augment(body(), api_key_id="alice", preview=False, cached_only=True)
    assert again.skipped is None and again.request == searched.request and again.count == searched.count
    assert ran == ["alice"]
    assert mem.explain_augment(body(), api_key_id="bob", preview=False, cached_only=True).skipped == "not cached"
    preview = mem.explain_augment(body(), api_key_id="alice", cached_only=True)  # a preview always searches
    assert preview.skipped == "not cached" and ran == ["alice"]


def test_settings_sessions_previews_and_typed_decay_are_respected(mem, monkeypatch):
    ran = searches(mem, monkeypatch)
    augmented(mem)
    mem.update_memory_settings({"maxTokens": 20})  # a runtime change is another key
    small = augmented(mem)
    assert len(ran) == 2 and system_text(small).count("\n- ") == 1
    mem.augment(body(), api_key_id="alice", session_id="s1", session_scope=True)
    assert len(ran) == 3
    mem.explain_augment(body(), api_key_id="alice")  # a preview always retrieves afresh
    assert len(ran) == 4
    mem.update_memory_settings({"typedDecayEnabled": True})
    augmented(mem)
    augmented(mem)
    assert len(ran) == 6


def test_the_data_version_moves_with_searched_columns_only(mem):
    backend = mem._manager.primary
    version = backend.data_version("alice")
    stored = mem.get_by_key("fact:0", api_key_id="alice")
    mem.update(stored.id, api_key_id="alice", metadata={"category": "stack"})
    mem._manager.record_access("alice", [stored.id])
    mem._manager._access.drain()
    assert backend.data_version("alice") == version
    # The indexer held off while the version is read: its worker could otherwise embed the new content and clear
    # needs_reindex first, and the flush below would then move nothing.
    with mem._retrieval.indexer.process_lock:
        mem.update(stored.id, api_key_id="alice", content="Prefers Svelte for the dashboard frontend")
        moved = backend.data_version("alice")
    assert moved > version and backend.data_version("bob") == backend.data_version("bob")
    assert mem.flush(timeout=60)  # the new vector lands: needs_reindex goes back to 0
    assert backend.data_version("alice") > moved
    assert backend.data_version("nobody") == 0
