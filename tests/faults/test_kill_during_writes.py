"""kill -9 during add loops and imports, repeated: nothing acknowledged lost, nothing duplicated, primary
and fallback equal after replay, FTS and vector index consistent. An import is all or nothing."""

from __future__ import annotations

import json
import random
import time

import pytest

import memroute
from memroute.models import new_memory_id, utcnow
from tests.faults.conftest import check_store, kill, read_until, spawn, store_config


@pytest.mark.parametrize("round_", [1, 2, 3])
def test_kill_9_during_an_add_loop(tmp_path, round_):
    vectors = round_ == 1  # one round with the real embedding + sqlite-vec index (the slow part)
    config = store_config(tmp_path, vectors=vectors)
    proc = spawn("add_loop", config, "alice", "100000")
    seen = read_until(proc, acks=random.randint(15, 40))
    acked = {**seen, **kill(proc)}
    assert len(acked) >= 15, "the worker never got going"
    stored = check_store(config, acked, vectors=vectors, killed=True)
    assert len(acked) <= len(stored) <= len(acked) + 1, "more memories than acknowledged (+1 in flight)"


def _jsonl(path, count: int) -> None:
    now = utcnow().isoformat()
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            out.write(json.dumps({"id": new_memory_id(), "api_key_id": f"t{i % 3}", "key": f"k{i}",
                                  "content": f"imported fact {i}", "type": "factual", "session_id": None,
                                  "metadata": {"n": i}, "created_at": now, "updated_at": now,
                                  "expires_at": None}) + "\n")


@pytest.mark.parametrize("round_", [1, 2, 3])
def test_kill_9_during_an_import_leaves_all_or_nothing(tmp_path, round_):
    config = store_config(tmp_path)
    dump = tmp_path / "dump.jsonl"
    _jsonl(dump, 3000)
    proc = spawn("import_file", config, str(dump))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(random.uniform(0.0, 0.4))
    kill(proc)
    stored = check_store(config, killed=True, in_flight=3000)  # the import is one write: all of it may be in flight
    assert len(stored) in (0, 3000), f"a killed import left a prefix of {len(stored)} memories"
    with memroute.open(config, use_env=False) as mem:  # resumable: running it again completes it
        report = mem.import_jsonl(dump.read_text(encoding="utf-8").splitlines())
        assert report.imported == 3000
    assert len(check_store(config)) == 3000
