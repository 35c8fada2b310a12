"""``memroute notion``: set up and check the Notion database the ``notion`` backend stores memories in."""

from __future__ import annotations

from typing import Any

import click

from memroute.cli.common import echo_json
from memroute.errors import PluginError
from memroute.serialization import structure_config

__all__ = ["COMMANDS", "notion_group"]

_TOKEN_HELP = "The integration secret (default: $NOTION_TOKEN)."
_BASE_HELP = "API root without /v1 (a proxy or a test server)."
_PRIVATE_HELP = "Let --base-url be a loopback or private address (the SSRF guard refuses them otherwise)."


def _settings(token: str | None, database_id: str, base_url: str, allow_private: bool = False) -> Any:
    try:
        from memroute_builtins.backends.notion.backend import NotionSettings
    except ImportError as exc:  # pragma: no cover - the builtins ship with memroute
        raise PluginError(f"the Notion backend is not installed: {exc}") from exc
    options = {"token": token or "", "database_id": database_id, "base_url": base_url,
               "allow_private": allow_private}
    return structure_config(options, NotionSettings, "notion")


def _snippet(database_id: str) -> str:
    return "\n".join([
        "[backends.notion]",
        'type = "notion"',
        'token = "${NOTION_TOKEN}"',
        f'database_id = "{database_id}"',
    ])


@click.group("notion")
def notion_group() -> None:
    """Set up the Notion database the `notion` backend stores memories in."""


@notion_group.command("init")
@click.option("--parent", "parent", required=True,
              help="The page (id or URL) to create the database under; share it with the integration first.")
@click.option("--title", default="memroute memories", show_default=True, help="The database's title.")
@click.option("--token", envvar="NOTION_TOKEN", default=None, help=_TOKEN_HELP)
@click.option("--base-url", default="https://api.notion.com", show_default=True, help=_BASE_HELP)
@click.option("--allow-private", is_flag=True, help=_PRIVATE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def init_command(parent: str, title: str, token: str | None, base_url: str, allow_private: bool,
                 as_json: bool) -> None:
    """Create a database with memroute's schema under the --parent page; print its id and the config to use."""
    from memroute_builtins.backends.notion.backend import create_database

    settings = _settings(token, parent, base_url, allow_private)
    created = create_database(settings, parent, title)
    if as_json:
        echo_json({**created, "config": _snippet(created["database_id"])})
        return
    click.echo(f"Created Notion database {created['database_id']} (data source {created['data_source_id']}).")
    if created.get("url"):
        click.echo(created["url"])
    click.echo("\nAdd this to memroute.toml (and export NOTION_TOKEN):\n")
    click.echo(_snippet(created["database_id"]))


@notion_group.command("check")
@click.option("--database", "database_id", required=True, help="The database id or URL.")
@click.option("--token", envvar="NOTION_TOKEN", default=None, help=_TOKEN_HELP)
@click.option("--base-url", default="https://api.notion.com", show_default=True, help=_BASE_HELP)
@click.option("--allow-private", is_flag=True, help=_PRIVATE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def check_command(database_id: str, token: str | None, base_url: str, allow_private: bool, as_json: bool) -> None:
    """Check that a database has memroute's schema; say what to fix when it does not."""
    from memroute_builtins.backends.notion.backend import check_database

    described = check_database(_settings(token, database_id, base_url, allow_private))
    if as_json:
        echo_json({"ok": True, **described})
    else:
        click.echo(f"OK: database {described['database_id']} (data source {described['data_source_id']}) "
                   "has memroute's schema.")


COMMANDS: list[click.Command] = [notion_group]
