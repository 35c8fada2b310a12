"""A tenant flood against another tenant's searches (``python -m memroute.bench.fair_use``): ratios of p50s
measured in one run, not timings. The target (issue 29): under a 50-connection flood from a key at the default
limits, the quiet tenant's search p50 on the fair server stays within 2x of its unloaded value; the same flood on
a first-come-first-served server (``fair_queueing = false``) is the baseline it is measured beside."""

from __future__ import annotations

import json

import pytest

from memroute.bench.fair_use import run_fair_use_bench

pytestmark = pytest.mark.bench


def test_a_flood_at_default_limits_leaves_another_tenants_p50_within_2x():
    report = run_fair_use_bench(memories=200, searches=200, clients=50, flood_rate=600)
    print(json.dumps(report, indent=2))
    fair = report["fair_flood_at_default_limits"]
    assert fair["flood_answers"].get("429", 0) == 0  # nothing refused: the defaults are not what helps
    assert report["fair_flood_at_its_own_limits"]["flood_answers"].get("429", 0) > 0
    assert fair["ratio_p50"] < report["first_come_flood_at_default_limits"]["ratio_p50"]
    assert report["target_met"], f"quiet p50 {fair['quiet']['p50_ms']} ms under the flood at default limits, " \
                                 f"{report['quiet_unloaded']['fair']['p50_ms']} ms unloaded"
