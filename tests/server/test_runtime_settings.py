"""Runtime memory settings (``PUT /api/settings/memory``) reach retrieval, augmentation and retention in every
process: set over REST on the real server, then observed through REST search / preview / injection preview, the
OpenAI-compatible proxy (the real ``openai`` SDK against the fake upstream model), and a second worker process."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import openai
import pytest

from memroute.deployment.state import RUNTIME_SETTINGS_TTL_S
from memroute.models import utcnow
from memroute.pipeline.inject import BLOCK_START
from tests.servers.memroute_server import MemrouteServer
from tests.servers.proxy_stack import proxy_stack

TEA = {"content": "I prefer green tea in the morning", "key": "preference:tea"}


def _old_memory_line(tenant: str, days: int) -> str:
    created = (utcnow() - timedelta(days=days)).isoformat()
    return json.dumps({"id": "5d0c8a4e-0d7f-4e8e-8f0a-1b2c3d4e5f60", "api_key_id": tenant, "type": "factual",
                       "key": "preference:old-tea", "content": "I used to drink oolong tea", "metadata": {},
                       "created_at": created, "updated_at": created})


def _injected(client, query="what tea do I like?"):
    return client.post("/api/memory/injection-preview", json={"query": query}).json()


def test_settings_set_over_rest_drive_search_preview_augment_and_the_proxy(tmp_path):
    with proxy_stack(tmp_path, memory={"enabled": False}) as stack:
        server = stack.server
        a, b, admin = server.client(server.tenant_a), server.client(server.tenant_b), server.client(server.admin)
        assert a.post("/api/memory", json=TEA).status_code == 201
        assert b.post("/api/memory", json={"content": "I prefer black tea", "key": "preference:tea"}).status_code == 201
        oai = openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys["alice"], max_retries=0)
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "what tea do I like?"}]}

        # memroute.toml says disabled: nothing is injected, through REST or the proxy.
        assert _injected(a)["skipped"].startswith("memory disabled")
        raw = oai.chat.completions.with_raw_response.create(**chat)
        assert raw.headers.get("x-memroute-learning") != "on"
        assert not any(BLOCK_START in str(m["content"]) for m in stack.upstream.last["body"]["messages"])

        changed = admin.put("/api/settings/memory", json={"enabled": True, "maxTokens": 300, "strategy": "recent"})
        assert changed.status_code == 200, changed.text
        assert changed.json()["enabled"] is True and set(changed.json()["overrides"]) == {
            "enabled", "maxTokens", "strategy"}

        injected = _injected(a)
        assert injected["injected"] and "green tea" in injected["block"] and "black tea" not in injected["block"]
        oai.chat.completions.create(**chat)
        sent = stack.upstream.last["body"]["messages"]
        assert sent[0]["content"].startswith(BLOCK_START) and "green tea" in sent[0]["content"]
        assert "black tea" not in sent[0]["content"]  # tenant b's memory never reaches tenant a's request

        # strategy and max tokens are the defaults of search and preview now
        hits = a.post("/api/memory/search", json={"query": "tea"}).json()
        assert hits["provenance"]["strategyRequested"] == "exact"
        preview = a.post("/api/memory/retrieve-preview", json={"query": "tea"}).json()
        assert preview["budgetMaxTokens"] == 300 and preview["resolution"]["strategyRequested"] == "exact"
        assert b.post("/api/memory/retrieve-preview", json={"query": "tea"}).json()["budgetMaxTokens"] == 300

        # maxTokens 0 turns injection off (the reference's gate), through the proxy too
        assert admin.put("/api/settings/memory", json={"maxTokens": 0}).status_code == 200
        assert _injected(a)["skipped"].startswith("memory disabled")
        oai.chat.completions.create(**chat)
        assert not any(BLOCK_START in str(m["content"]) for m in stack.upstream.last["body"]["messages"])

        # null drops an override: the file's value (disabled) applies again
        reset = admin.put("/api/settings/memory", json={"enabled": None, "maxTokens": None}).json()
        assert reset["enabled"] is False and reset["maxTokens"] == 2000 and reset["overrides"] == ["strategy"]
        assert _injected(a)["skipped"].startswith("memory disabled")
        for client in (a, b, admin):
            client.close()


def test_retention_days_set_at_run_time_filter_search_and_delete_after_days_drives_prune(memroute_server):
    a, admin = memroute_server.client(memroute_server.tenant_a), memroute_server.client(memroute_server.admin)
    imported = a.post("/api/memory/import", content=_old_memory_line("tenant-a", days=100),
                      headers={"content-type": "application/x-ndjson"})
    assert imported.status_code == 200, imported.text

    def found() -> list[str]:
        return [h["memory"]["key"] for h in a.post("/api/memory/search", json={"query": "oolong tea"}).json()["hits"]]

    assert found() == ["preference:old-tea"]  # 100 days old: no retrieval window by default
    assert admin.put("/api/settings/memory", json={"retentionDays": 60}).status_code == 200
    assert found() == []
    assert memroute_server.mem.prune("tenant-a", dry_run=True).candidates == ()  # a window never deletes
    assert admin.put("/api/settings/memory", json={"retentionDays": 0}).status_code == 200
    assert found() == ["preference:old-tea"]
    assert admin.put("/api/settings/memory", json={"deleteAfterDays": 60}).status_code == 200
    assert admin.get("/api/settings/memory").json()["deleteAfterDays"] == 60
    assert len(memroute_server.mem.prune("tenant-a", dry_run=True).candidates) == 1
    a.close()
    admin.close()


@pytest.mark.parametrize("bad, field", [
    ({"maxTokens": 16001}, "maxTokens"), ({"maxTokens": -1}, "maxTokens"), ({"maxTokens": 1.5}, "maxTokens"),
    ({"retentionDays": -1}, "retentionDays"), ({"strategy": "psychic"}, "strategy"),
    ({"deleteAfterDays": 36_501}, "deleteAfterDays"),
    ({"enabled": "yes"}, "enabled"), ({"maxTokens": "300"}, "maxTokens"), ({"vectorStore": "qdrant"}, "vectorStore"),
    ({"maxTokens": 500, "retentionDays": -1}, "retentionDays"),  # one bad field: the good one is not stored either
])
def test_bad_values_are_422_with_the_field_and_store_nothing(memroute_server, bad, field):
    admin = memroute_server.client(memroute_server.admin)
    before = admin.get("/api/settings/memory").json()
    answer = admin.put("/api/settings/memory", json=bad)
    assert answer.status_code == 422, answer.text
    details = answer.json()["error"]["details"]
    assert any(field in d["field"] for d in details), details
    assert admin.get("/api/settings/memory").json() == before
    assert memroute_server.mem.memory_overrides(fresh=True) == {}
    assert admin.put("/api/settings/memory", content=b"[1, 2]",
                     headers={"content-type": "application/json"}).status_code == 422
    admin.close()


def test_two_worker_processes_apply_a_change_within_the_staleness_bound(tmp_path):
    config = {"memory": {"enabled": True}, "embedding": {"source": "none"}}  # keyword only: no model to load twice
    with MemrouteServer(tmp_path, workers=2, config=config) as server:
        a, admin = server.client(server.tenant_a), server.client(server.admin)
        assert a.post("/api/memory", json=TEA).status_code == 201

        def strategies(n: int = 12) -> set[str]:  # new connections: spread over both workers
            seen = set()
            for _ in range(n):
                with server.client(server.tenant_a) as fresh:
                    body = fresh.post("/api/memory/search", json={"query": "tea"}).json()
                seen.add(body["provenance"]["strategyRequested"])
            return seen

        assert strategies() == {"hybrid"}  # both workers have read (and cached) the file's strategy
        assert admin.put("/api/settings/memory", json={"strategy": "recent", "maxTokens": 321}).status_code == 200
        time.sleep(RUNTIME_SETTINGS_TTL_S + 0.2)  # the documented bound: no worker may serve older settings now
        assert strategies() == {"exact"}
        budgets = set()
        for _ in range(8):
            with server.client(server.tenant_a) as fresh:
                budgets.add(fresh.post("/api/memory/retrieve-preview", json={"query": "tea"}).json()["budgetMaxTokens"])
        assert budgets == {321}
        a.close()
        admin.close()
