"""A tenant flood against another tenant's searches (``python -m memroute.bench.fair_use``): a ratio of two p50s
measured in one run, not a timing. The target (issue 29): under a 50-connection flood from a key with limits of
its own, the quiet tenant's search p50 stays within 2x of its unloaded value."""

from __future__ import annotations

import json

import pytest

from memroute.bench.fair_use import run_fair_use_bench

pytestmark = pytest.mark.bench


def test_a_limited_flood_leaves_another_tenants_p50_within_2x():
    report = run_fair_use_bench(memories=200, searches=200, clients=50, flood_rate=600)
    print(json.dumps(report, indent=2))
    limited = report["flood_at_its_own_limits"]
    assert limited["flood_answers"].get("429", 0) > 0  # the flood was refused ...
    assert report["target_met"], f"quiet p50 {limited['quiet']['p50_ms']} ms under the limited flood, " \
                                 f"{report['quiet_unloaded']['p50_ms']} ms unloaded"  # ... and the quiet tenant served
