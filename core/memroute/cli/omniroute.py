"""Coming from the system memroute re-implements (OmniRoute): ``memroute import --from omniroute DB`` (its
body) and ``memroute config import --from omniroute settings.json``. See docs/omniroute-compatibility.md."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from memroute.cli.common import echo_json, open_service

if TYPE_CHECKING:
    from memroute.service.omniroute import OmnirouteImportReport

__all__ = ["import_database"]


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
