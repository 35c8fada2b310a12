"""``memroute notion init`` / ``check``: set up and check the Notion database the ``notion`` backend uses.

Added to the ``memroute`` command line by this plugin's ``memroute_register_commands`` hook. Both commands
read the configured ``notion`` backend (``[backends.NAME] type = "notion"``) for ``token``, ``base_url``
and - for ``check`` - ``database_id``. An option given on the command line wins; ``$NOTION_TOKEN`` is the
last resort for the token.
"""

from __future__ import annotations

import os
from typing import Any

import click

from memroute.cli import configured_backends, echo_json
from memroute.config.serialization import structure_config
from memroute.errors import ConfigError
from memroute_builtins.backends.notion.backend import NotionSettings, check_database, create_database

__all__ = ["notion_group"]

_DEFAULT_BASE_URL = "https://api.notion.com"
_TOKEN_HELP = "The integration secret (default: the configured notion backend's token, else $NOTION_TOKEN)."
_BASE_HELP = f"API root without /v1 (default: the configured notion backend's base_url, else {_DEFAULT_BASE_URL})."
_BACKEND_HELP = "Which configured notion backend to read when there are several ([backends.NAME])."
_PRIVATE_HELP = ("Let the base URL be a loopback or private address (a proxy or test server); the SSRF guard "
                 "refuses them otherwise (default: the configured backend's allow_private).")


def _configured(ctx: click.Context, backend: str | None) -> tuple[str, dict[str, Any]]:
    """The chosen configured notion backend's name and options; ``("notion", {})`` when none is configured."""
    found = configured_backends(ctx, "notion")
    if backend is not None:
        if backend not in found:
            known = ", ".join(sorted(found)) or "none"
            raise ConfigError(f"--backend {backend}: no notion backend of that name is configured "
                              f"(configured: {known})", [("backend", "unknown")])
        return backend, found[backend]
    if len(found) > 1:
        raise ConfigError(f"several notion backends are configured ({', '.join(sorted(found))}): pick one with "
                          "--backend NAME", [("backend", "ambiguous")])
    if found:
        ((name, options),) = found.items()
        return name, options
    return "notion", {}


def _settings(ctx: click.Context, backend: str | None, *, token: str | None, base_url: str | None,
              database_id: str | None, allow_private: bool = False) -> tuple[str, NotionSettings]:
    name, options = _configured(ctx, backend)
    merged = dict(options)
    if allow_private:
        merged["allow_private"] = True
    if token:
        merged["token"] = token
    elif not merged.get("token"):
        merged["token"] = os.environ.get("NOTION_TOKEN", "")
    if base_url:
        merged["base_url"] = base_url
    merged.setdefault("base_url", _DEFAULT_BASE_URL)
    if database_id:
        merged["database_id"] = database_id
    if not merged.get("database_id"):
        raise ConfigError("database: give --database, or configure a notion backend's database_id",
                          [("database", "required")])
    return name, structure_config(merged, NotionSettings, f"backends.{name}")


def _snippet(name: str, database_id: str) -> str:
    return "\n".join([
        f"[backends.{name}]",
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
@click.option("--token", default=None, help=_TOKEN_HELP)
@click.option("--base-url", default=None, help=_BASE_HELP)
@click.option("--allow-private", is_flag=True, help=_PRIVATE_HELP)
@click.option("--backend", default=None, help=_BACKEND_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def init_command(ctx: click.Context, parent: str, title: str, token: str | None, base_url: str | None,
                 allow_private: bool, backend: str | None, as_json: bool) -> None:
    """Create a database with memroute's schema under the --parent page; print its id and the config to use."""
    # The new database is under --parent; a configured database_id is not needed (or used) here.
    name, settings = _settings(ctx, backend, token=token, base_url=base_url, database_id=parent,
                               allow_private=allow_private)
    created = create_database(settings, parent, title)
    snippet = _snippet(name, created["database_id"])
    if as_json:
        echo_json({**created, "config": snippet})
        return
    click.echo(f"Created Notion database {created['database_id']} (data source {created['data_source_id']}).")
    if created.get("url"):
        click.echo(created["url"])
    click.echo("\nAdd this to memroute.toml (and export NOTION_TOKEN):\n")
    click.echo(snippet)


@notion_group.command("check")
@click.option("--database", "database_id", default=None,
              help="The database id or URL (default: the configured notion backend's database_id).")
@click.option("--token", default=None, help=_TOKEN_HELP)
@click.option("--base-url", default=None, help=_BASE_HELP)
@click.option("--allow-private", is_flag=True, help=_PRIVATE_HELP)
@click.option("--backend", default=None, help=_BACKEND_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def check_command(ctx: click.Context, database_id: str | None, token: str | None, base_url: str | None,
                  allow_private: bool, backend: str | None, as_json: bool) -> None:
    """Check that a database has memroute's schema; say what to fix when it does not."""
    _, settings = _settings(ctx, backend, token=token, base_url=base_url, database_id=database_id,
                            allow_private=allow_private)
    described = check_database(settings)
    if as_json:
        echo_json({"ok": True, **described})
    else:
        click.echo(f"OK: database {described['database_id']} (data source {described['data_source_id']}) "
                   "has memroute's schema.")
