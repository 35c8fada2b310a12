"""``memroute users`` and ``memroute forget``: the end users of an app tenant, and erasing one (GDPR-style)."""

from __future__ import annotations

import click

from memroute.cli.common import echo_json, open_service

__all__ = ["COMMANDS"]

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.command("users")
@click.option("--tenant", required=True, help="The app tenant (the --tenant of its app key).")
@json_option
@click.pass_context
def users(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List the end users of an app tenant that hold memories."""
    found = open_service(ctx).end_users(tenant)
    if as_json:
        echo_json({"tenant": tenant, "data": found})
        return
    for end_user in found:
        click.echo(end_user)
    if not found:
        click.echo(f"no end user of {tenant} holds memories", err=True)


@click.command("forget")
@click.option("--tenant", required=True, help="The app tenant (the --tenant of its app key).")
@click.option("--user", "end_user", required=True, help="The end user to erase.")
@click.option("--dry-run", is_flag=True, help="Only report what would be deleted.")
@json_option
@click.pass_context
def forget(ctx: click.Context, tenant: str, end_user: str, dry_run: bool, as_json: bool) -> None:
    """Erase every memory of one end user of an app tenant: from the primary, every fallback (through the
    outbox) and the vector store, then report what each still holds."""
    mem = open_service(ctx)
    report = mem.forget_end_user(tenant, end_user, dry_run=dry_run)
    if as_json:
        echo_json(report)
        return
    if dry_run:
        click.echo(f"dry run: {report.matched} memories of {tenant}/{end_user} would be deleted; nothing changed")
        return
    left = ", ".join(f"{name}: {'unreachable' if n is None else n}" for name, n in report.remaining.items())
    click.echo(f"deleted {report.deleted} memories of {report.api_key_id}; left per backend: {left}; vectors left: "
               f"{'n/a' if report.vectors_remaining is None else report.vectors_remaining}; replication pending: "
               f"{report.replication_pending}")
    if not report.complete:
        raise click.ClickException("erasure not complete yet: what is left is replayed from the outbox; run again "
                                   "to check")


COMMANDS: list[click.Command] = [users, forget]
