"""Per-tenant storage quotas (issue 29, "Medium 6": a 57 MB import of 45,000 memories was accepted), on the real
SQLite deployment: a write past ``[limits] max_memories_per_tenant`` or ``max_bytes_per_tenant`` is refused whole
with a QuotaExceededError (HTTP 403) naming the quota, another tenant is not affected, a deletion makes room
again, and two services on one deployment (two processes) see each other's writes."""

from __future__ import annotations

import json
import uuid

import pytest

import memroute
from memroute.errors import QuotaExceededError

LIMITS = {"max_memories_per_tenant": 3}


def _open(tmp_path, **limits):
    return memroute.open(data_dir=str(tmp_path), embedding={"source": "none"}, limits={**LIMITS, **limits})


def _line(n: int, tenant: str = "a") -> str:
    return json.dumps({"id": str(uuid.uuid4()), "api_key_id": tenant, "key": f"k{n}", "content": f"memory {n}",
                       "type": "factual", "metadata": {}, "created_at": "2026-01-01T00:00:00Z",
                       "updated_at": "2026-01-01T00:00:00Z"})


def test_a_tenant_may_hold_its_quota_and_no_more(tmp_path):
    with _open(tmp_path) as mem:
        for n in range(3):
            mem.add(api_key_id="a", content=f"I like tea number {n}", key=f"tea:{n}")
        with pytest.raises(QuotaExceededError) as refused:
            mem.add(api_key_id="a", content="one too many", key="tea:4")
        assert refused.value.problems == (("quota", "memories"),)
        assert "holds 3 memories and may hold 3" in str(refused.value)
        mem.add(api_key_id="b", content="another tenant is not affected", key="b")
        mem.delete(mem.list(api_key_id="a").data[0].id, api_key_id="a")
        mem.add(api_key_id="a", content="room again after a deletion", key="tea:5")
        assert mem.list(api_key_id="a").total == 3


def test_an_import_past_the_quota_writes_nothing(tmp_path):
    with _open(tmp_path) as mem:
        mem.add(api_key_id="a", content="already here", key="here")
        with pytest.raises(QuotaExceededError):
            mem.import_jsonl([_line(n) for n in range(3)], api_key_id="a")
        assert mem.list(api_key_id="a").total == 1
        assert mem.import_jsonl([_line(n) for n in range(2)], api_key_id="a").imported == 2


def test_the_bytes_quota(tmp_path):
    with _open(tmp_path, max_memories_per_tenant=0, max_bytes_per_tenant=100) as mem:
        mem.add(api_key_id="a", content="x" * 60, key="one")
        with pytest.raises(QuotaExceededError) as refused:
            mem.add(api_key_id="a", content="y" * 30, key="two", metadata={"note": "z" * 20})
        assert refused.value.problems == (("quota", "bytes"),)
        mem.add(api_key_id="a", content="y" * 30, key="two")


def test_the_quota_holds_across_processes_sharing_a_deployment(tmp_path):
    with _open(tmp_path) as one, _open(tmp_path) as two:
        one.add(api_key_id="a", content="first", key="1")
        one.add(api_key_id="a", content="second", key="2")
        two.add(api_key_id="a", content="third", key="3")
        with pytest.raises(QuotaExceededError):
            one.add(api_key_id="a", content="fourth", key="4")
