"""Retrieval operations: ``memroute reindex`` and ``memroute bench``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from memroute.cli.common import CliState, echo_json, open_service


@click.command()
@click.option("--force", is_flag=True, help="Drop every vector and rebuild the whole index.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def reindex(ctx: click.Context, force: bool, as_json: bool) -> None:
    """Embed every memory that has no current vector (resumable: interrupted work continues next time)."""
    from rich.progress import Progress

    service = open_service(ctx)
    with Progress(transient=True, disable=as_json or not sys.stderr.isatty()) as progress:
        task = progress.add_task("reindexing", total=None)

        def report(done: int, remaining: int) -> None:
            progress.update(task, completed=done, total=done + remaining)

        result = service.reindex(force=force, progress=report)
    if as_json:
        echo_json(result)
        return
    if result.reason:
        click.echo(f"nothing to index: {result.reason}")
        return
    click.echo(f"indexed {result.processed} memories; {result.pending} pending; {result.errors} errors")
    if result.errors:
        raise click.ClickException(f"reindex stopped on an error: {result.last_error}")


@click.command()
@click.option("--sizes", default="10000,100000", show_default=True,
              help="Comma-separated numbers of memories for one key.")
@click.option("--single-adds", type=int, default=2000, show_default=True)
@click.option("--tenants", type=int, default=1000, show_default=True)
@click.option("--per-tenant", type=int, default=20, show_default=True)
@click.option("--queries", type=int, default=50, show_default=True)
@click.option("--quick", is_flag=True, help="Small sizes (1,000 / 100 tenants) for a smoke run.")
@click.option("--output", type=click.Path(dir_okay=False), default=None, help="Also write the JSON report here.")
@click.option("--quality", is_flag=True,
              help="Measure retrieval quality instead (R@1 / R@5 / MRR per leg, held-out questions, real chat "
                   "distractors; and evidence recall R@5-R@50 on long conversations; needs memroute[bench]).")
@click.option("--learning", is_flag=True,
              help="Measure what observe learns instead: fact extraction precision / recall per category on "
                   "labelled sentences, and R@5 / R@10 of evidence turns in multi-session conversations through "
                   "observe vs storing every turn (docs/pipeline.md; needs memroute[bench]).")
@click.option("--models", default="static,transformers", show_default=True,
              help="With --quality: the embedding sources to measure (a source, or source:model such as "
                   "transformers:multilingual-e5-small).")
@click.option("--distractors", type=int, default=2000, show_default=True,
              help="With --quality: real chat turns per tenant (distractors, and the conversations' length); "
                   "with --learning: real chat turns mixed into each user's conversations [default there: 500].")
@click.option("--cache-dir", "cache_dir", default="~/.cache/memroute-bench", show_default=True,
              help="With --quality: keep the embedded texts here between runs, so a slow model is paid once (per "
                   "source, model, query or passage, and text); '' embeds everything afresh.")
@click.option("--http", "http", is_flag=True,
              help="Also benchmark memroute serve: search and add over HTTP vs in-process, 1 vs 8 writers, for a "
                   "tenant of each --sizes (default: 5,000 memories; 1,000 with --quick).")
@click.option("--naive", is_flag=True,
              help="Compare memroute with a naive FTS5 + numpy + RRF recipe on real chat turns: the first and warm "
                   "searches after a bulk import, a chat loop (observe, then augment), indexing against the "
                   "embedding source's own batch rate, and where the time goes (--sizes; needs memroute[bench]).")
@click.option("--indexing", is_flag=True,
              help="Measure indexing (import + flush, add + flush) against each embedding source's own batch rate "
                   "on 2,000 real chat turns (--models; --sizes sets the count; needs memroute[bench]).")
@click.option("--proxy", "proxy", is_flag=True,
              help="Benchmark the memory proxy instead: added latency and time to first streamed byte against "
                   "the same requests sent straight to a loopback fake upstream (docs/proxy.md).")
@click.option("--max-tokens", "max_tokens", type=click.IntRange(1, 16000), default=None,
              help="With --proxy: the server's [memory] max_tokens, the budget that decides how many memories go "
                   "into each request [default: 1000, about 55-65 of the bench's memories; 2000 is the embedded "
                   "default's budget].")
@click.option("--async", "async_", is_flag=True,
              help="Also benchmark the async API: search and add throughput, 1 vs 16 tasks against 1 vs 16 sync "
                   "threads, and the event loop's lag (docs/python-api.md).")
@click.option("--async-workers", type=click.IntRange(1, 256), default=None,
              help="With --async: the async API's pool size (max_workers) for the throughput figures "
                   "[default: sized from the service, as open_async does].")
@click.option("--backend", type=click.Choice(["sqlite", "postgres"]), default="sqlite", show_default=True,
              help="postgres: the postgres backend + pgvector store on --dsn against SQLite + sqlite-vec, in one run "
                   "(with 8 concurrent writers and one tenant of --tenants), with ratios.")
@click.option("--dsn", default=None, envvar="MEMROUTE_BENCH_DSN",
              help="With --backend postgres: the database. Each measurement gets a schema of its own "
                   "(memroute_bench_*), dropped afterwards; the role needs CREATE on the database.")
@click.pass_context
def bench(ctx: click.Context, sizes: str, single_adds: int, tenants: int, per_tenant: int, queries: int,
          quick: bool, output: str | None, quality: bool, learning: bool, models: str, distractors: int,
          cache_dir: str, http: bool,
          naive: bool, indexing: bool, proxy: bool, max_tokens: int | None, async_: bool,
          async_workers: int | None, backend: str, dsn: str | None) -> None:
    """Benchmark the configured engine on synthetic data in a temporary directory (your data is untouched);
    with --quality, measure retrieval quality on the held-out set (docs/retrieval.md); with --http, also
    the server against in-process calls; with --naive, hybrid against a naive recipe; with --indexing,
    indexing against the embedding sources' own batch rate; with --proxy, the
    memory proxy against direct calls; with --backend postgres, PostgreSQL against SQLite
    (docs/performance.md); with --async, also the async API against sync threads (docs/python-api.md)."""
    if learning:
        explicit = ctx.get_parameter_source("distractors") is not click.core.ParameterSource.DEFAULT
        _bench_learning(ctx, distractors if explicit else (60 if quick else 500), output)
        return
    if quality:
        _bench_quality(ctx, [m.strip() for m in models.split(",") if m.strip()], distractors, output, cache_dir)
        return
    if naive:
        _bench_naive(ctx, "1000" if quick else sizes, output, quick)
        return
    if indexing:
        explicit = ctx.get_parameter_source("sizes") is not click.core.ParameterSource.DEFAULT
        _bench_indexing(ctx, [m.strip() for m in models.split(",") if m.strip()],
                        sizes if explicit else ("300" if quick else "2000"), output)
        return
    if max_tokens is not None and not proxy:
        raise click.BadParameter("goes with --proxy (the proxy bench's budget)", param_hint="--max-tokens")
    if proxy:
        explicit = ctx.get_parameter_source("sizes") is not click.core.ParameterSource.DEFAULT
        report = _proxy_bench(sizes=sizes if explicit else ("500" if quick else "500,2000"),
                              rounds=30 if quick else 200, max_tokens=max_tokens)
        echo_json(report)
        if output:
            Path(output).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        return
    if backend == "postgres":
        if not dsn:
            raise click.BadParameter("required with --backend postgres (or MEMROUTE_BENCH_DSN)", param_hint="--dsn")
        if http:
            raise click.BadParameter("--http measures the SQLite deployment; run it without --backend postgres",
                                     param_hint="--http")
    from memroute.bench.engine import run_bench
    from memroute.config.settings import load_settings
    from memroute.service import Memroute

    state = ctx.find_object(CliState)
    assert state is not None
    base = load_settings(state.config_path)
    # --http measures the tenant sizes --sizes names (--quick or not); without --sizes, 1,000 / 5,000 memories
    explicit_sizes = ctx.get_parameter_source("sizes") is not click.core.ParameterSource.DEFAULT
    http_sizes = _sizes(sizes) if explicit_sizes else ((1000,) if quick else (5000,))
    if quick:
        sizes, single_adds, tenants, queries = "1000", 300, 100, 20
    size_list = _sizes(sizes)

    def open_fresh(path: Path, **overrides: Any) -> Any:
        return Memroute.open(base, data_dir=str(path), backends={
            "primary": "main", "fallbacks": [], "instances": {"main": {"type": "sqlite", "options": {}}}},
            **overrides)

    if backend == "postgres":
        assert dsn is not None
        report = _compare_postgres(base, dsn, open_fresh, sizes=size_list, single_adds=single_adds, tenants=tenants,
                                   per_tenant=per_tenant, queries=queries)
        echo_json(report)
        if output:
            Path(output).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        return
    report = run_bench(open_fresh, sizes=size_list, single_adds=single_adds, tenants=tenants,
                       per_tenant=per_tenant, queries=queries, progress=lambda m: click.echo(f"... {m}", err=True))
    if async_:
        from memroute.bench.async_api import run_async_bench

        report["async"] = run_async_bench(
            lambda path: open_fresh(path), memories=1000 if quick else 5000, operations=160 if quick else 640,
            max_workers=async_workers, rounds=1 if quick else 2,
            progress=lambda m: click.echo(f"... async: {m}", err=True))
    if http:
        runs = []  # one report for one size, a list of them for several
        for size in http_sizes:
            click.echo(f"... http server ({size} memories)", err=True)
            runs.append(_http_bench(memories=size, searches=queries, adds=min(single_adds, 200)))
        report["http"] = runs[0] if len(runs) == 1 else runs
    echo_json(report)
    if output:
        Path(output).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter("expected comma-separated integers", param_hint="--sizes") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter("expected tenant sizes of 1 memory or more", param_hint="--sizes")
    return sizes


def _compare_postgres(base: Any, dsn: str, open_sqlite: Any, **sizes: Any) -> Any:
    """SQLite + sqlite-vec (the baseline) and postgres + pgvector, measured by the same code in one run."""
    import uuid

    from memroute.bench.engine import compare_engines, drop_postgres_schemas
    from memroute.service import Memroute

    schemas: list[str] = []

    def open_sqlite_vec(path: Path, **overrides: Any) -> Any:
        return open_sqlite(path, **{"vectors": {"store": "sqlite-vec"}, **overrides})

    def open_postgres(path: Path, **overrides: Any) -> Any:
        # One schema per data directory: the keyword-only reopen of a measurement finds its own data.
        schema = f"memroute_bench_{uuid.uuid5(uuid.NAMESPACE_URL, str(path)).hex[:12]}"
        if schema not in schemas:
            schemas.append(schema)
        return Memroute.open(base, data_dir=str(path), backends={
            "primary": "main", "fallbacks": [],
            "instances": {"main": {"type": "postgres", "options": {"dsn": dsn, "schema": schema}}}},
            **{"vectors": {"store": "pgvector"}, **overrides})

    try:
        return compare_engines({"sqlite": open_sqlite_vec, "postgres": open_postgres}, baseline="sqlite",
                               progress=lambda m: click.echo(f"... {m}", err=True), **sizes)
    finally:
        drop_postgres_schemas(dsn, schemas)


HTTP_MIN_SEARCHES = 300


def _http_bench(*, memories: int, searches: int, adds: int) -> Any:
    """The server bench runs in its own interpreter: the CLI does not import the server package (a sibling
    surface), and the server under test gets a process of its own."""
    import subprocess

    # The target compares two p50s a millisecond or two apart: 50 searches (the speed bench's --queries
    # default) leave each p50 ±0.5 ms from run to run on a quiet machine, so the server gets at least 300.
    run = subprocess.run([sys.executable, "-m", "memroute.bench.http", "--memories", str(memories),
                          "--searches", str(max(searches, HTTP_MIN_SEARCHES)), "--adds", str(max(adds, 8)), "--json"],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise click.ClickException(f"the HTTP bench failed: {run.stderr.strip()[-500:]}")
    return json.loads(run.stdout)


def _proxy_bench(*, sizes: str, rounds: int, max_tokens: int | None) -> Any:
    """Like the HTTP bench, in its own interpreter (it starts ``memroute serve`` and a fake upstream), its server's
    ``[memory] max_tokens`` set to ``max_tokens`` (``None``: the bench's own default)."""
    import subprocess

    try:
        size_list = [int(part) for part in sizes.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter("expected comma-separated integers", param_hint="--sizes") from None
    if not size_list or min(size_list) < 1:
        raise click.BadParameter("expected tenant sizes of 1 memory or more", param_hint="--sizes")
    budget = [] if max_tokens is None else ["--max-tokens", str(max_tokens)]
    click.echo(f"... memory proxy ({', '.join(map(str, size_list))} memories, {rounds} rounds"
               f"{'' if max_tokens is None else f', max_tokens {max_tokens}'})", err=True)
    run = subprocess.run([sys.executable, "-m", "memroute.bench.proxy", "--sizes",
                          ",".join(map(str, size_list)), "--rounds", str(rounds), *budget, "--json"],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise click.ClickException(f"the proxy bench failed: {run.stderr.strip()[-500:]}")
    return json.loads(run.stdout)


def _bench_quality(ctx: click.Context, models: list[str], distractors: int, output: str | None,
                   cache_dir: str = "") -> None:
    import tempfile

    from memroute.bench.conversations import run_conversations
    from memroute.bench.conversations import summary as conversation_summary
    from memroute.bench.embedding_cache import VectorCache, bench_opener
    from memroute.bench.quality import run_quality, summary, tables
    from memroute.config.settings import load_settings

    state = ctx.find_object(CliState)
    assert state is not None
    base = load_settings(state.config_path)
    if distractors < 0:
        raise click.BadParameter("must be 0 or more", param_hint="--distractors")
    cache = VectorCache(cache_dir) if cache_dir else None
    open_fresh = bench_opener(cache, base, backends={"primary": "main", "fallbacks": [],
                                                     "instances": {"main": {"type": "sqlite", "options": {}}}})

    def progress(message: str) -> None:
        click.echo(f"... {message}", err=True)

    with tempfile.TemporaryDirectory(prefix="memroute-quality-") as tmp:
        report = run_quality(open_fresh, models=models, per_tenant=distractors, root=Path(tmp), progress=progress)
        talk = run_conversations(open_fresh, models=models, per_tenant=distractors, root=Path(tmp),
                                 progress=progress)
    click.echo(tables(report, "test"))
    click.echo("\n" + summary(report, "test"))
    click.echo("\nDev split (calibration):\n" + summary(report, "dev"))
    click.echo("\nConversations: evidence recall, test split\n" + conversation_summary(talk, "test"))
    click.echo("\nConversations, dev split\n" + conversation_summary(talk, "dev"))
    for category in ("time", "person"):
        click.echo(f"\nConversations, {category} questions, test split\n"
                   + conversation_summary(talk, "test", category))
    if output:
        Path(output).write_text(json.dumps({**report, "conversations": talk}, indent=2, default=str),
                                encoding="utf-8")


def _bench_learning(ctx: click.Context, filler: int, output: str | None) -> None:
    import tempfile

    from memroute.bench.learning import extraction_table, learning_table, run_learning
    from memroute.bench.learning_data import PEOPLE
    from memroute.bench.quality import chat_distractors
    from memroute.config.settings import load_settings
    from memroute.service import Memroute

    state = ctx.find_object(CliState)
    assert state is not None
    base = load_settings(state.config_path)
    if filler < 0:
        raise click.BadParameter("must be 0 or more", param_hint="--distractors")

    def open_fresh(path: Path, extraction: dict[str, Any]) -> Any:
        return Memroute.open(base, data_dir=str(path), memory={"enabled": True}, extraction=extraction,
                             backends={"primary": "main", "fallbacks": [],
                                       "instances": {"main": {"type": "sqlite", "options": {}}}})

    turns = chat_distractors(filler, tuple(PEOPLE)) if filler else {}
    with tempfile.TemporaryDirectory(prefix="memroute-learning-") as tmp:
        report = run_learning(open_fresh, Path(tmp), filler=turns, progress=lambda m: click.echo(f"... {m}", err=True))
    click.echo("Fact extraction (test split)\n" + extraction_table(report, "test"))
    click.echo("\nConversations (test split)\n" + learning_table(report, "test"))
    click.echo("\nConversations (dev split)\n" + learning_table(report, "dev"))
    if output:
        Path(output).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def _bench_naive(ctx: click.Context, sizes: str, output: str | None, quick: bool = False) -> None:
    import tempfile

    from memroute.bench.speed import run_naive_comparison
    from memroute.config.settings import load_settings
    from memroute.service import Memroute

    state = ctx.find_object(CliState)
    assert state is not None
    base = load_settings(state.config_path)
    try:
        size_list = tuple(int(part) for part in sizes.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter("expected comma-separated integers", param_hint="--sizes") from None

    def open_fresh(path: Path) -> Any:
        # [memory] enabled: the chat loop's observe and augment are the product path, on whatever else is configured.
        return Memroute.open(base, data_dir=str(path), memory={"enabled": True}, backends={
            "primary": "main", "fallbacks": [], "instances": {"main": {"type": "sqlite", "options": {}}}})

    def embedder_for(service: Any) -> Any:
        from memroute.embedding import build_embedding_source

        embedder, _resolution = build_embedding_source(base.embedding, service.plugins, service.data_dir)
        if embedder is None:
            raise click.ClickException("--naive needs an embedding source ([embedding] source)")
        return embedder

    scale: dict[str, Any] = {"query_count": 20, "first": 5, "turns": 24} if quick else {}
    with tempfile.TemporaryDirectory(prefix="memroute-naive-") as tmp:
        report = run_naive_comparison(open_fresh, embedder_for, sizes=size_list, root=Path(tmp),
                                      progress=lambda m: click.echo(f"... {m}", err=True), **scale)
    echo_json(report)
    if output:
        Path(output).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def _bench_indexing(ctx: click.Context, models: list[str], count: str, output: str | None) -> None:
    import shutil
    import tempfile

    from memroute.bench.indexing import run_indexing_comparison
    from memroute.bench.quality import embedding_options
    from memroute.config.settings import load_settings
    from memroute.embedding import build_embedding_source
    from memroute.errors import MemrouteError
    from memroute.plugins import get_plugin_manager
    from memroute.service import Memroute

    state = ctx.find_object(CliState)
    assert state is not None
    base = load_settings(state.config_path)
    try:
        size = int(count)
        if size < 1:
            raise ValueError
    except ValueError:
        raise click.BadParameter("expected one positive integer (the number of chat turns)",
                                 param_hint="--sizes") from None
    plugins = get_plugin_manager()
    models_dir = Path(tempfile.mkdtemp(prefix="memroute-indexing-models-"))

    def build_source(name: str) -> Any:
        settings = load_settings(base, embedding=embedding_options(name)).embedding
        try:
            source, resolution = build_embedding_source(settings, plugins, models_dir)
        except MemrouteError as exc:
            return f"{type(exc).__name__}: {exc}"
        if source is None:
            return resolution.reason
        try:
            source.embed_batch(["load the model"])
        except MemrouteError as exc:
            source.close()
            return f"{type(exc).__name__}: {exc}"
        return source

    def open_fresh(path: Path, source: Any) -> Any:
        return Memroute.open(base, data_dir=str(path), embedder=source, backends={
            "primary": "main", "fallbacks": [], "instances": {"main": {"type": "sqlite", "options": {}}}},
            vectors={"store": "sqlite-vec"})

    try:
        with tempfile.TemporaryDirectory(prefix="memroute-indexing-") as tmp:
            report = run_indexing_comparison(open_fresh, build_source, sources=models, count=size, root=Path(tmp),
                                             progress=lambda m: click.echo(f"... {m}", err=True))
    finally:
        shutil.rmtree(models_dir, ignore_errors=True)
    echo_json(report)
    if output:
        Path(output).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


COMMANDS: list[click.Command] = [reindex, bench]
