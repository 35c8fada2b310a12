"""Equal scores come back in the same order in every process (issue 13: "equal scores come back in a different
order from run to run").

The parent writes memories whose scores tie on every leg (identical content; some also share a timestamp) to
a real SQLite backend with the sqlite-vec store and the bundled static embeddings, in both of sqlite-vec's
tiers. Then two fresh interpreters, with different hash seeds (so any order that leaked from a set or dict
of strings would differ), open the same data directory and run the same searches. Both must print exactly
the documented order: score, then recency (newest first), then id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import memroute
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, utcnow

_CHILD = """
import json, sys
import memroute
out = {}
for data_dir, promote_at in json.loads(sys.argv[1]):
    with memroute.open({}, data_dir=data_dir, embedding={"source": "static"},
                       vectors={"store": "sqlite-vec", "options": {"sqlite-vec": {"promote_at": promote_at}}}) as mem:
        out[data_dir] = {f"{tenant}/{strategy}": [hit.memory.id for hit in mem.search(
            "walks the dog at noon", api_key_id=tenant, strategy=strategy, limit=12).hits]
            for strategy in ("hybrid", "semantic", "exact") for tenant in ("alice", "bob")}
print(json.dumps(out))
"""


def _open(data_dir: Path, promote_at: int):
    return memroute.open({}, data_dir=str(data_dir), embedding={"source": "static"},
                         vectors={"store": "sqlite-vec", "options": {"sqlite-vec": {"promote_at": promote_at}}})


def _child(stores: list[tuple[str, int]], seed: str) -> dict[str, dict[str, list[str]]]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    run = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(stores)], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_equal_scores_come_back_in_one_order_in_every_process(tmp_path: Path) -> None:
    now = utcnow()
    stores: list[tuple[str, int]] = []
    expected_by_store: dict[str, Any] = {}
    in_process_by_store: dict[str, Any] = {}
    for promote_at, tier in ((4, "large"), (512, "small")):
        data_dir = tmp_path / tier
        expected: dict[str, list[str]] = {}
        lines = []
        for tenant in ("alice", "bob"):
            rows = []
            for i in range(10):  # identical content: every leg ties; pairs share a timestamp
                moment = now - timedelta(minutes=i // 2)
                memory = Memory(id=str(uuid.uuid4()), api_key_id=tenant, key=f"{tenant}:{i}",
                                content="Walks the dog at noon", created_at=moment, updated_at=moment)
                lines.append(json.dumps(memory_to_dict(memory)))
                rows.append((-moment.timestamp(), memory.id))
            other = Memory(id=str(uuid.uuid4()), api_key_id=tenant, key=f"{tenant}:other",
                           content="Prefers tea over coffee", created_at=now, updated_at=now)
            lines.append(json.dumps(memory_to_dict(other)))
            expected[tenant] = [memory_id for _, memory_id in sorted(rows)]
        with _open(data_dir, promote_at) as mem:
            mem.import_jsonl(lines)
            assert mem.flush(timeout=60)
            in_process = {f"{t}/{s}": [h.memory.id for h in mem.search("walks the dog at noon", api_key_id=t,
                                                                       strategy=s, limit=12).hits]
                          for s in ("hybrid", "semantic", "exact") for t in ("alice", "bob")}
        stores.append((str(data_dir), promote_at))
        expected_by_store[str(data_dir)], in_process_by_store[str(data_dir)] = expected, in_process
    first, second = _child(stores, "1"), _child(stores, "2")
    assert first == second == in_process_by_store
    for data_dir, results in first.items():
        expected = expected_by_store[data_dir]
        for name, ids in results.items():
            tenant = name.split("/")[0]
            assert ids[:10] == expected[tenant], (data_dir, name)  # the ties, in the documented order
            assert set(ids[:10]).isdisjoint(expected["bob" if tenant == "alice" else "alice"])  # own tenant only
