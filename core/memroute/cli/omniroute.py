"""Coming from the system memroute re-implements (OmniRoute): ``memroute import --from omniroute DB`` (its
body) and ``memroute config import --from omniroute settings.json``. See docs/omniroute-compatibility.md."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from memroute.cli.common import echo_json, open_service

if TYPE_CHECKING:
    from memroute.service.omniroute import OmnirouteImportReport

__all__ = ["COMMANDS", "import_database", "toml_text"]


def import_database(ctx: click.Context, file: str, *, dry_run: bool, skip_uncarried: bool,
                    unowned_tenant: str | None, duplicates: Any, skip_expired: bool, as_json: bool) -> None:
    """Run :meth:`~memroute.service.Memroute.import_omniroute` with a progress bar (on a terminal) and print
    its report."""
    from rich.progress import Progress

    service = open_service(ctx)
    with Progress(transient=True, disable=not sys.stderr.isatty()) as progress:
        tasks: dict[str, Any] = {}

        def advance(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task("checking rows" if phase == "read" else "writing", total=total)
            progress.update(tasks[phase], completed=done, total=total)

        report = service.import_omniroute(file, dry_run=dry_run, skip_uncarried=skip_uncarried,
                                          unowned_tenant=unowned_tenant, duplicates=duplicates,
                                          skip_expired=skip_expired, progress=advance)
    if as_json:
        echo_json(report)
    else:
        _print_report(report)
    verb = "would import" if report.dry_run else "imported"
    click.echo(f"{verb} {report.carried if report.dry_run else report.imported} of {report.rows} rows into "
               f"{len(report.tenants)} tenant(s); {report.skipped} not carried", err=True)


def _print_report(report: OmnirouteImportReport) -> None:
    click.echo(f"{report.source} (table {report.table}): {report.rows} rows, {report.carried} carried"
               + (" (dry run: nothing written)" if report.dry_run else f", {report.imported} written"))
    for tenant, count in report.tenants.items():
        click.echo(f"  tenant {tenant}: {count}")
    notes = [(report.expired, "already expired (kept with their expiry)"),
             (report.keys_generated, "without a key (given omniroute:<id>)"),
             (report.keys_renamed, "older duplicates kept under KEY#<id prefix>"),
             (report.ids_derived, "ids that were not UUIDs (given one derived from them)"),
             (report.metadata_unreadable, "metadata not a JSON object (carried as {})"),
             (report.replaces, "memories already in memroute replaced")]
    for count, what in notes:
        if count:
            click.echo(f"  {count} {what}")
    if report.skipped:
        click.echo(f"not carried: {report.skipped} ("
                   + ", ".join(f"{reason}: {n}" for reason, n in report.skipped_by_reason.items()) + ")")
        for row in report.skipped_rows[:20]:
            click.echo(f"  {row.id}  [{row.api_key_id or '(no owner)'}] {row.key}: {row.reason}")
        if report.skipped > 20:
            click.echo(f"  ... and {report.skipped - 20} more (--json lists the first {len(report.skipped_rows)})")


# --- memroute config import --from omniroute ---------------------------------------------------------------

@click.group("config")
def config_group() -> None:
    """memroute.toml helpers."""


@config_group.command("import")
@click.option("--from", "source", type=click.Choice(["omniroute"]), required=True,
              help="Whose settings FILE holds: OmniRoute's memory settings JSON (GET /api/settings/memory).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the memroute.toml here (refuses to replace an existing file) instead of stdout.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
def config_import(source: str, output: str | None, file: str) -> None:
    """Turn OmniRoute's memory settings (the JSON its GET /api/settings/memory returns) into memroute.toml.
    Fields with no memroute meaning are listed as comments at the top and on stderr."""
    import json
    from pathlib import Path

    from memroute.cli.common import read_text
    from memroute.config.omniroute import settings_from_json
    from memroute.config.settings import load_settings
    from memroute.errors import ValidationError

    try:
        data = json.loads(read_text(file))
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})", [(file, "json")]) from None
    result = settings_from_json(data)
    # What is written must load: ${VAR} placeholders stand for secrets the operator sets later.
    load_settings(result.config, environ={"OBSIDIAN_API_KEY": "set-later"}, use_env=False)
    text = "".join(f"# {note}\n" for note in result.notes) + ("\n" if result.notes else "") + toml_text(result.config)
    for note in result.notes:
        click.echo(f"memroute: note: {note}", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    target = Path(output)
    if target.exists():
        raise click.UsageError(f"{output} exists; choose another --output or move it away first")
    target.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}", err=True)


def toml_text(config: dict[str, Any]) -> str:
    """``config`` (sections of scalars, lists and tables) as TOML: sections and their sub-tables as ``[a.b]``
    tables, anything deeper inline."""
    import json

    def value(item: Any) -> str:
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, (int, float)):
            return repr(item)
        if isinstance(item, str):
            return json.dumps(item, ensure_ascii=False)  # a JSON string is a TOML basic string
        if isinstance(item, (list, tuple)):
            return "[" + ", ".join(value(v) for v in item) + "]"
        if isinstance(item, dict):
            return "{ " + ", ".join(f"{json.dumps(str(k))} = {value(v)}" for k, v in item.items()) + " }"
        raise TypeError(f"cannot write {type(item).__name__} as TOML")

    lines: list[str] = []

    def table(name: str, data: dict[str, Any], depth: int) -> None:
        nested = {k: v for k, v in data.items() if isinstance(v, dict) and depth < 2}
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {value(v)}" for k, v in data.items() if k not in nested)
        lines.append("")
        for key, sub in nested.items():
            table(f"{name}.{key}", sub, depth + 1)

    for section, data in config.items():
        table(section, data, 1)
    return "\n".join(lines)


COMMANDS: list[click.Command] = [config_group]
