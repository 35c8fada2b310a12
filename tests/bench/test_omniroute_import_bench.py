"""``memroute import --from omniroute`` against memroute's own import of the same memories, in one run:
``pytest -m bench tests/bench/test_omniroute_import_bench.py -s``. The baseline is ``import_jsonl`` of what
``export_all`` writes after the OmniRoute import (the same memories, ids and all) into a fresh deployment; the
OmniRoute import also opens the foreign database, checks every row and collapses duplicates. Keyword-only
deployments, so the embedding model's speed is not what is measured."""

from __future__ import annotations

import json
import time

import pytest

import memroute
from memroute.config.serialization import dumps_memory
from tests.servers.omniroute_db import build_reference_db

pytestmark = pytest.mark.bench

KEYWORD_ONLY = {"embedding": {"source": "none"}, "vectors": {"store": "none"}}
TARGET_RATIO = 2.0
"""The OmniRoute import may take at most this many times as long as memroute's own import of the same data."""


def _open(path):
    return memroute.open(KEYWORD_ONLY, use_env=False, data_dir=str(path))


def test_omniroute_import_against_the_jsonl_import(tmp_path):
    reference = build_reference_db(tmp_path / "storage.sqlite", per_tenant=10_000)
    timings: dict[str, float] = {}
    with _open(tmp_path / "omniroute") as mem:
        started = time.perf_counter()
        dry = mem.import_omniroute(reference.path, dry_run=True)
        timings["dry_run_s"] = time.perf_counter() - started
        started = time.perf_counter()
        report = mem.import_omniroute(reference.path, skip_uncarried=True)
        timings["omniroute_import_s"] = time.perf_counter() - started
        lines = [dumps_memory(m) for m in mem.export_all()]
    with _open(tmp_path / "jsonl") as mem:
        started = time.perf_counter()
        baseline = mem.import_jsonl(lines)
        timings["jsonl_import_s"] = time.perf_counter() - started
    assert report.imported == baseline.imported == dry.carried == len(lines)
    ratio = timings["omniroute_import_s"] / timings["jsonl_import_s"]
    print(json.dumps({"rows": reference.rows, "carried": report.carried, **{k: round(v, 3) for k, v in
                      timings.items()}, "omniroute_vs_jsonl": round(ratio, 2),
                      "rows_per_s": round(reference.rows / timings["omniroute_import_s"])}, indent=2))
    assert ratio <= TARGET_RATIO
