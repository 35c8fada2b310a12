"""Memory CRUD, search, import/export, and the operator commands (plugins, status, health)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from memroute.cli.common import echo_json, memory_line, open_service, read_text_lines
from memroute.config.serialization import memory_to_dict, write_jsonl
from memroute.errors import NotFoundError, ValidationError
from memroute.models import ORDER_FIELDS, STRATEGY_ALIASES, MemoryType

TYPES = click.Choice([t.value for t in MemoryType])
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _metadata(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"--metadata: not valid JSON ({exc.msg})", [("metadata", "json")]) from None
    except RecursionError:
        raise ValidationError("--metadata: nested too deeply", [("metadata", "too deep")]) from None
    if not isinstance(value, dict):
        raise ValidationError("--metadata: expected a JSON object", [("metadata", "type")])
    return value


@click.command()
@click.option("--api-key", "api_key", required=True, help="Owner (tenant) of the memory.")
@click.option("--key", default=None, help="Upsert key (default: derived from the content).")
@click.option("--type", "type_", type=TYPES, default="factual", show_default=True)
@click.option("--session", default=None, help="Session id.")
@click.option("--metadata", default=None, help="JSON object of metadata.")
@click.option("--expires-at", default=None, help="ISO-8601 expiry time.")
@click.option("--consolidate", is_flag=True,
              help="Update a memory this one restates (or supersede the same key) instead of adding a second.")
@json_option
@click.argument("content")
@click.pass_context
def add(ctx: click.Context, api_key: str, key: str | None, type_: str, session: str | None, metadata: str | None,
        expires_at: str | None, consolidate: bool, as_json: bool, content: str) -> None:
    """Store CONTENT for --api-key (an upsert on the key)."""
    memory = open_service(ctx).add(api_key_id=api_key, content=content, key=key, type=type_, session_id=session,
                                   metadata=_metadata(metadata), expires_at=expires_at, actor="cli",
                                   consolidate=consolidate)
    if as_json:
        echo_json(memory_to_dict(memory))
    else:
        click.echo(memory.id)


tenant_option = click.option("--api-key", "api_key", required=True,
                             help="Owner (tenant) of the memory: another tenant's id is reported as not found.")


@click.command()
@tenant_option
@json_option
@click.argument("memory_id")
@click.pass_context
def get(ctx: click.Context, api_key: str, as_json: bool, memory_id: str) -> None:
    """Show one memory of --api-key."""
    memory = open_service(ctx).get(memory_id, api_key_id=api_key)
    if memory is None:
        raise NotFoundError(f"no memory with id {memory_id}")
    if as_json:
        echo_json(memory_to_dict(memory))
    else:
        click.echo(memory_line(memory))


@click.command()
@tenant_option
@json_option
@click.argument("memory_id")
@click.pass_context
def history(ctx: click.Context, api_key: str, as_json: bool, memory_id: str) -> None:
    """Show the history of a memory of --api-key (also after it was deleted): every change, oldest first."""
    report = open_service(ctx).history(memory_id, api_key_id=api_key)
    if report is None:
        raise NotFoundError(f"no memory with id {memory_id}")
    if as_json:
        echo_json(report)
        return
    click.echo(memory_line(report.current) if report.current is not None else f"{memory_id}  (deleted)")
    if not report.recorded:
        click.echo("  this deployment's backends keep no history")
    for entry in report.entries:
        click.echo(f"  {entry.at.isoformat(timespec='seconds')}  {entry.event.value:<10}  by {entry.actor}")
        if entry.old_key is not None and entry.new_key is not None:
            click.echo(f"      key:  {entry.old_key} -> {entry.new_key}")
        if entry.old_type is not None and entry.new_type is not None:
            click.echo(f"      type: {entry.old_type} -> {entry.new_type}")
        if entry.old_content is not None:
            click.echo(f"      was:  {entry.old_content}")
        if entry.new_content is not None:
            click.echo(f"      now:  {entry.new_content}")


@click.command()
@tenant_option
@click.option("--content", default=None)
@click.option("--key", default=None)
@click.option("--type", "type_", type=TYPES, default=None)
@click.option("--session", default=None)
@click.option("--metadata", default=None, help="JSON object; replaces the stored metadata.")
@click.option("--expires-at", default=None, help="ISO-8601 time, or 'never' to clear.")
@json_option
@click.argument("memory_id")
@click.pass_context
def update(ctx: click.Context, api_key: str, content: str | None, key: str | None, type_: str | None,
           session: str | None, metadata: str | None, expires_at: str | None, as_json: bool, memory_id: str) -> None:
    """Change fields of a memory of --api-key."""
    changes: dict[str, Any] = {}
    for name, value in (("content", content), ("key", key), ("type", type_), ("session_id", session)):
        if value is not None:
            changes[name] = value
    if metadata is not None:
        changes["metadata"] = _metadata(metadata)
    if expires_at is not None:
        changes["expires_at"] = None if expires_at == "never" else expires_at
    updated = open_service(ctx).update(memory_id, api_key_id=api_key, actor="cli", **changes)
    if updated is None:
        raise NotFoundError(f"no memory with id {memory_id}")
    if as_json:
        echo_json(memory_to_dict(updated))
    else:
        click.echo("updated")


@click.command()
@tenant_option
@click.argument("memory_id")
@click.pass_context
def delete(ctx: click.Context, api_key: str, memory_id: str) -> None:
    """Delete a memory of --api-key."""
    if not open_service(ctx).delete(memory_id, api_key_id=api_key, actor="cli"):
        raise NotFoundError(f"no memory with id {memory_id}")
    click.echo("deleted")


@click.command()
@click.option("--api-key", "api_key", required=True, help="Owner (tenant) of the memories.")
@click.option("--type", "type_", type=TYPES, default=None, help="Only memories of this type.")
@click.option("--session", default=None, help="Only memories of this session.")
@click.option("--older-than-days", type=int, default=None, help="Only memories created more than N days ago.")
@click.option("--dry-run", is_flag=True, help="Only report what would be deleted.")
@json_option
@click.pass_context
def clear(ctx: click.Context, api_key: str, type_: str | None, session: str | None, older_than_days: int | None,
          dry_run: bool, as_json: bool) -> None:
    """Delete every memory of --api-key matching the filters (all of them when none is given)."""
    mem = open_service(ctx)
    report = mem.clear(api_key, type=type_, session_id=session, older_than_days=older_than_days, dry_run=dry_run)
    mem.flush()
    if as_json:
        echo_json(report)
    elif dry_run:
        click.echo(f"dry run: {report.matched} memories would be deleted; nothing changed")
    else:
        click.echo(f"deleted {report.deleted} memories")


@click.command()
@click.option("--api-key", "api_key", required=True, help="Owner (tenant) of the memories.")
@json_option
@click.pass_context
def stats(ctx: click.Context, api_key: str, as_json: bool) -> None:
    """Count the memories of --api-key by type, with tokens used and the embedding cache's counters."""
    report = open_service(ctx).stats(api_key)
    if as_json:
        echo_json(report)
        return
    click.echo(f"{report.total} memories ({report.tokens_used} tokens)")
    for name, count in report.by_type.items():
        click.echo(f"  {name:<11} {count}")
    click.echo(f"embedding cache: {report.cache.hits} hits, {report.cache.misses} misses")


@click.command(name="list")
@click.option("--api-key", "api_key", required=True)
@click.option("--type", "type_", type=TYPES, default=None)
@click.option("--session", default=None)
@click.option("--query", default=None, help="Substring filter over content and key.")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True)
@click.option("--order-by", type=click.Choice(list(ORDER_FIELDS)), default="created_at",
              help="Order field; by last_accessed_at, never-accessed memories sort as the oldest.")
@click.option("--order-dir", type=click.Choice(["asc", "desc"]), default="desc")
@json_option
@click.pass_context
def list_(ctx: click.Context, api_key: str, type_: str | None, session: str | None, query: str | None, limit: int,
          offset: int, order_by: str, order_dir: str, as_json: bool) -> None:
    """List the memories of --api-key."""
    page = open_service(ctx).list(api_key_id=api_key, type=type_, session_id=session, query=query, limit=limit,
                                  offset=offset, order_by=order_by, order_dir=order_dir)
    if as_json:
        echo_json({"data": [memory_to_dict(m) for m in page.data], "total": page.total, "by_type": page.by_type})
        return
    for memory in page.data:
        click.echo(memory_line(memory))
    click.echo(f"({len(page.data)} of {page.total})")


@click.command()
@click.option("--api-key", "api_key", required=True)
@click.option("--strategy", type=click.Choice(list(STRATEGY_ALIASES)), default=None)
@click.option("--limit", type=int, default=None, help="At most this many memories (1-100; default 20).")
@click.option("--max-tokens", type=int, default=None, help="Token budget (default: [memory] max_tokens).")
@click.option("--session", default=None)
@json_option
@click.argument("query")
@click.pass_context
def search(ctx: click.Context, api_key: str, strategy: str | None, limit: int | None, max_tokens: int | None,
           session: str | None, as_json: bool, query: str) -> None:
    """Search the memories of --api-key for QUERY: what retrieval would inject, with ranks and resolution."""
    preview = open_service(ctx).preview(query, api_key_id=api_key, strategy=strategy, limit=limit,
                                        max_tokens=max_tokens, session_id=session)
    if as_json:
        echo_json(preview)
        return
    r = preview.resolution
    note = f" (degraded: {r.fallback_reason})" if r.degraded else ""
    budget = f" of {preview.budget_max_tokens}" if preview.budget_max_tokens is not None else ""
    click.echo(f"{len(preview.memories)} result(s), {preview.total_tokens}{budget} tokens, from {r.backend} via "
               f"{'+'.join(r.legs) or 'none'}{note}")
    for m in preview.memories:
        said = f" (said {m.said_at:%Y-%m-%d})" if m.said_at is not None else ""
        click.echo(f"{m.score:.4f} {m.tier:<8} {m.id}  [{m.type}] {m.key}{said}\n    {m.content}")


@click.command(name="import")
@click.option("--from", "source", type=click.Choice(["memroute", "omniroute"]), default="memroute", show_default=True,
              help="What FILE is: memroute's JSONL, or the SQLite database of the system memroute re-implements "
                   "(OmniRoute; every api_key_id becomes a tenant).")
@click.option("--api-key", "api_key", default=None,
              help="Every line must belong to this tenant (a line naming none is given to it).")
@click.option("--all-tenants", is_flag=True,
              help="Lines may belong to any tenant, each naming its own (the default without --api-key).")
@click.option("--dry-run", is_flag=True, help="--from omniroute: report what would be carried, write nothing.")
@click.option("--skip-uncarried", is_flag=True,
              help="--from omniroute: import even though some rows cannot be carried (they are reported).")
@click.option("--unowned-tenant", default=None,
              help="--from omniroute: the tenant for rows with an empty api_key_id (else they are not carried).")
@click.option("--duplicates", type=click.Choice(["newest", "keep"]), default="newest", show_default=True,
              help="--from omniroute: for rows sharing an api_key_id and key, keep the newest, or keep all (the "
                   "older under KEY#<id prefix>).")
@click.option("--skip-expired", is_flag=True, help="--from omniroute: leave out rows already past their expiry.")
@json_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.pass_context
def import_(ctx: click.Context, source: str, api_key: str | None, all_tenants: bool, dry_run: bool,
            skip_uncarried: bool, unowned_tenant: str | None, duplicates: str, skip_expired: bool, as_json: bool,
            file: str) -> None:
    """Import memories from FILE: a JSONL file (as `export` writes; '-' reads stdin), or with --from omniroute
    an OmniRoute SQLite database. With --api-key, every line belongs to that tenant; without it (an operator's
    restore of `export --all-tenants`), each line names its own tenant in `api_key_id`. A line's missing `id`,
    `created_at` and `updated_at` are filled in. Every line (row) is validated before the first write, and the
    memories are written in one transaction (on SQLite / PostgreSQL)."""
    from rich.progress import Progress

    if source == "omniroute":
        from memroute.cli.omniroute import import_database

        if api_key is not None or all_tenants:
            raise click.UsageError("--from omniroute imports every tenant of the database: drop --api-key / "
                                   "--all-tenants")
        import_database(ctx, file, dry_run=dry_run, skip_uncarried=skip_uncarried, unowned_tenant=unowned_tenant,
                        duplicates=duplicates, skip_expired=skip_expired, as_json=as_json)
        return
    if dry_run or skip_uncarried or unowned_tenant is not None or skip_expired or duplicates != "newest":
        raise click.UsageError("--dry-run, --skip-uncarried, --unowned-tenant, --duplicates and --skip-expired "
                               "go with --from omniroute")
    if api_key is not None and all_tenants:
        raise click.UsageError("give --api-key KEY (one tenant) or --all-tenants (every tenant), not both")
    lines = read_text_lines(file)
    service = open_service(ctx)
    total = sum(1 for line in lines if line.strip())
    with Progress(transient=True, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task("importing", total=total)
        report = service.import_jsonl(lines, api_key_id=api_key, progress=lambda n: progress.advance(task, n))
    if as_json:
        echo_json(report)
    click.echo(f"imported {report.imported} memories", err=True)


def tenant_or_all(api_key: str | None, all_tenants: bool) -> None:
    """Exactly one of ``--api-key`` / ``--all-tenants``: reaching every tenant is never a default."""
    if (api_key is None) == (not all_tenants):
        raise click.UsageError("give --api-key KEY (one tenant) or --all-tenants (every tenant), not both"
                               if all_tenants else "give --api-key KEY (one tenant) or --all-tenants (every tenant)")


@click.command()
@click.option("--api-key", "api_key", default=None, help="Only this tenant.")
@click.option("--all-tenants", is_flag=True, help="Every tenant (an operator's backup).")
@click.pass_context
def export(ctx: click.Context, api_key: str | None, all_tenants: bool) -> None:
    """Write memories as JSONL to stdout (oldest first): one tenant (--api-key) or every one (--all-tenants)."""
    tenant_or_all(api_key, all_tenants)
    mem = open_service(ctx)
    count = write_jsonl(sys.stdout, mem.export_all() if api_key is None else mem.export(api_key))
    click.echo(f"exported {count} memories", err=True)


@click.command()
@json_option
@click.pass_context
def plugins(ctx: click.Context, as_json: bool) -> None:
    """List installed plugins, the components and commands they provide, and the ones that failed."""
    from rich.console import Console
    from rich.table import Table

    from memroute.cli.common import MemrouteGroup
    from memroute.plugins import get_plugin_manager

    root = ctx.find_root().command
    if isinstance(root, MemrouteGroup):
        root.load_plugin_commands()
    infos = get_plugin_manager().infos()
    if as_json:
        echo_json([
            {"name": i.name, "kind": i.kind, "distribution": i.distribution, "version": i.version,
             "status": i.status, "error": i.error, "plugin": i.plugin}
            for i in infos
        ])
        return
    table = Table("kind", "name", "distribution", "version", "status")
    for info in infos:
        status = info.status if info.status == "ok" else f"{info.status}: {info.error}"
        table.add_row(info.kind, info.name, info.distribution or "-", info.version or "-", status)
    Console().print(table)


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Engine status: backends, keyword tier, embedding, vector store, caches."""
    report = open_service(ctx).status()
    if as_json:
        echo_json(report)
        return
    from memroute.cli.status_text import status_lines

    click.echo("\n".join(status_lines(report)))


@click.command()
@json_option
@click.pass_context
def health(ctx: click.Context, as_json: bool) -> None:
    """Probe every backend now; exit status 1 when the primary is unhealthy."""
    report = open_service(ctx).health()
    if as_json:
        echo_json(report)
    else:
        for backend in report.backends:
            state = "ok" if backend.ok else f"FAILING: {backend.error}"
            click.echo(f"{backend.name:<12} {backend.role:<9} {state} ({backend.latency_ms:.1f} ms)")
        click.echo(f"outbox depth: {report.outbox.depth}")
    if report.primary is not None and not report.primary.ok:
        ctx.exit(1)


@click.command()
@click.option("--repair", is_flag=True, help="Replay the primary's version of every difference to the fallback.")
@json_option
@click.pass_context
def verify(ctx: click.Context, repair: bool, as_json: bool) -> None:
    """Compare every fallback with the primary, memory by memory; exit status 1 when they differ (and
    --repair was not given or did not finish)."""
    report = open_service(ctx).verify(repair=repair)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(f"primary {report.primary}: {report.memories} memories")
        for replica in report.replicas:
            if not replica.checked:
                click.echo(f"{replica.backend:<12} not checked: {replica.reason}")
                continue
            state = "in step" if replica.in_step else (
                f"{replica.missing} missing, {replica.stale} stale, {replica.extra} extra")
            fixed = f"; {replica.repaired} repair entries journaled" if replica.repaired else ""
            click.echo(f"{replica.backend:<12} {state}{fixed}")
    if not report.ok and not (repair and report.flushed):
        ctx.exit(1)


COMMANDS: list[click.Command] = [add, get, history, update, delete, clear, list_, stats, search, import_, export,
                                 plugins, status, health, verify]
