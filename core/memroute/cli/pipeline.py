"""Conversation pipeline commands: extract, augment, summarize, compact, prune, and the ``demo``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from memroute.cli.common import CliState, echo_json, open_service, read_text
from memroute.cli.memories import tenant_or_all
from memroute.errors import ValidationError

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
api_key_option = click.option("--api-key", "api_key", required=True, help="Owner (tenant) of the memories.")


def _read_stdin_json() -> Any:
    raw = read_text("-")
    if not raw.strip():
        raise ValidationError("stdin: expected a JSON request body, got nothing", [("stdin", "empty")])
    try:
        value = json.loads(raw)
        # JSON may spell a lone surrogate as an escape ("\\ud800"): refuse it here, not when printing.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as exc:
        raise ValidationError(f"stdin: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                              [("stdin", "json")]) from None
    except RecursionError:
        raise ValidationError("stdin: JSON nested too deeply", [("stdin", "too deep")]) from None
    except UnicodeEncodeError as exc:
        raise ValidationError(f"stdin: contains a lone UTF-16 surrogate (position {exc.start} of the text)",
                              [("stdin", "invalid")]) from None
    return value


def _fact_dict(fact: Any) -> dict[str, Any]:
    return {"key": fact.key, "content": fact.content, "type": fact.type.value, "category": fact.category,
            "polarity": fact.metadata.get("polarity"), "source": fact.metadata.get("source")}


@click.command()
@json_option
@click.option("--source", type=click.Choice(["user", "assistant"]), default="user", show_default=True,
              help="Whose text it is (recorded in each fact's metadata).")
@click.option("--store", is_flag=True, help="Also store the facts for --api-key (nothing is stored otherwise).")
@click.option("--api-key", "api_key", default=None, help="Owner of the stored facts (with --store).")
@click.option("--session", default=None, help="Session id of the stored facts (with --store).")
@click.pass_context
def extract(ctx: click.Context, as_json: bool, source: str, store: bool, api_key: str | None,
            session: str | None) -> None:
    """Extract facts from text on stdin with the configured extractors ([extraction] extractors)."""
    if store and not api_key:
        raise click.UsageError("--store needs --api-key")
    if api_key and not store:
        raise click.UsageError("--api-key only applies with --store")
    text = read_text("-")
    mem = open_service(ctx)
    facts = mem.extract(text, source=source)
    if store and api_key:
        mem.extract(text, source=source, api_key_id=api_key, store=True, session_id=session)
        mem.flush()
    if as_json:
        echo_json([_fact_dict(f) for f in facts])
        return
    if not facts:
        click.echo("no facts found")
    for fact in facts:
        click.echo(f"{fact.category:<10} {fact.type.value:<8} {fact.key}\n    {fact.content}")
    if store:
        click.echo(f"stored {len(facts)} fact(s) for {api_key}")


@click.command()
@api_key_option
@click.option("--provider", default=None, help="Provider id: placement rules (o1, glm, mimo, anthropic, ...).")
@click.option("--session", default=None, help="Session id (with --session-scope: only this session's memories).")
@click.option("--session-scope", is_flag=True, help="Retrieve only memories of --session.")
@click.option("--api", "api", type=click.Choice(["openai-chat", "anthropic", "responses"]), default=None,
              help="Request shape (default: detected).")
@click.option("--header", "headers", multiple=True, metavar="NAME:VALUE",
              help="A request header (e.g. x-memroute-no-memory:1). Repeatable.")
@click.option("--explain", is_flag=True, help="Also print what was retrieved and why, on stderr.")
@click.pass_context
def augment(ctx: click.Context, api_key: str, provider: str | None, session: str | None, session_scope: bool,
            api: str | None, headers: tuple[str, ...], explain: bool) -> None:
    """Read a chat request (JSON) on stdin; print it with memories of --api-key injected.

    Honours [memory] enabled / max_tokens (MEMORY_ENABLED=true turns memory on) and the opt-out headers."""
    request = _read_stdin_json()
    header_map = {}
    for item in headers:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise click.UsageError(f"--header {item!r}: expected NAME:VALUE")
        header_map[name.strip()] = value.strip()
    mem = open_service(ctx)
    info = mem.explain_augment(request, api_key_id=api_key, session_id=session, provider=provider,
                               headers=header_map, api=api, session_scope=session_scope)  # type: ignore[arg-type]
    echo_json(info.request)
    if info.skipped:
        click.echo(f"memroute: no memories injected: {info.skipped}", err=True)
    if explain and info.preview is not None:
        click.echo(f"query: {info.query}", err=True)
        for hit in info.preview.memories:
            click.echo(f"  {hit.score:.4f} {hit.tier:<8} {hit.content}", err=True)


def _report(report: Any, as_json: bool, verb: str) -> None:
    if as_json:
        echo_json(report)
        return
    count = len(report.candidates)
    if report.dry_run:
        click.echo(f"dry run: {count} memor{'y' if count == 1 else 'ies'} ({report.candidate_tokens} tokens) "
                   f"would be {verb}; nothing changed")
    else:
        click.echo(f"{report.deleted} memor{'y' if report.deleted == 1 else 'ies'} {verb}")
    if getattr(report, "reasons", None) and report.action == "prune":
        tenants = f"{report.tenants} tenant{'' if report.tenants == 1 else 's'}; "
        click.echo("  " + tenants + ", ".join(f"{k}: {v}" for k, v in report.reasons.items()))
    if report.summary_ids:
        click.echo(f"summary memory: {', '.join(report.summary_ids)}")
    if report.summary_preview:
        click.echo(("preview:\n" if report.dry_run else "") + report.summary_preview)


@click.command()
@api_key_option
@click.option("--older-than-days", type=click.IntRange(0, 36500), default=30, show_default=True)
@click.option("--apply", is_flag=True, help="Really replace them (default: a dry run that changes nothing).")
@json_option
@click.pass_context
def summarize(ctx: click.Context, api_key: str, older_than_days: int, apply: bool, as_json: bool) -> None:
    """Replace one key's memories older than N days with an English summary memory."""
    report = open_service(ctx).summarize(api_key, older_than_days, dry_run=not apply)
    _report(report, as_json, "summarized")


@click.command()
@api_key_option
@click.option("--session", default=None, help="Only this session's memories.")
@click.option("--max-tokens", type=click.IntRange(0, 10_000_000), default=4000, show_default=True)
@click.option("--apply", is_flag=True, help="Really replace them (default: a dry run that changes nothing).")
@json_option
@click.pass_context
def compact(ctx: click.Context, api_key: str, session: str | None, max_tokens: int, apply: bool,
            as_json: bool) -> None:
    """Keep the newest memories that fit --max-tokens; summarize the rest."""
    report = open_service(ctx).compact(api_key, session, max_tokens, dry_run=not apply)
    _report(report, as_json, "summarized")


@click.command()
@click.option("--api-key", "api_key", default=None, help="Only this tenant's memories.")
@click.option("--all-tenants", is_flag=True, help="Every tenant's memories (operator maintenance).")
@click.option("--dry-run", is_flag=True, help="Only report what would be deleted (the default).")
@click.option("--apply", "--yes", "apply", is_flag=True, help="Delete for real (without it: a dry run).")
@json_option
@click.pass_context
def prune(ctx: click.Context, api_key: str | None, all_tenants: bool, dry_run: bool, apply: bool,
          as_json: bool) -> None:
    """Delete the memories configured to go, of one tenant (--api-key) or of every tenant (--all-tenants):
    expired ones, those past [memory] delete_after_days (off by default) and, with typed decay on, decayed
    ones. The retrieval window (retention_days) deletes nothing. Shows a dry run unless --apply (or --yes)."""
    tenant_or_all(api_key, all_tenants)
    if dry_run and apply:
        raise click.UsageError("--dry-run and --apply contradict each other; give one")
    mem = open_service(ctx)
    report = mem.prune_all(dry_run=not apply) if api_key is None else mem.prune(api_key, dry_run=not apply)
    mem.flush()
    _report(report, as_json, "deleted")
    if as_json:
        return
    if not mem.memory_settings().deletes_by_age:
        click.echo("deletion by age is off ([memory] delete_after_days = 0): only expired memories are candidates")
    if not apply and report.candidates:
        click.echo("run again with --apply to delete them")


@click.command()
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="SQLite file to use (default: demo.db in the data directory).")
@click.pass_context
def demo(ctx: click.Context, db_path: str | None) -> None:
    """Run a scripted conversation on the embedded default: no network, no model.

    Shows what is extracted from each user turn, what is retrieved for a later question (scores and tiers)
    and the exact request that would be sent to the model; leaves the database for you to explore."""
    from memroute.cli.demo import run_demo

    state = ctx.find_object(CliState)
    run_demo(config_path=state.config_path if state else None, db_path=Path(db_path) if db_path else None)


COMMANDS: list[click.Command] = [extract, augment, summarize, compact, prune, demo]
