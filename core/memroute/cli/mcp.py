"""``memroute mcp``: serve the memory tools over stdio to a local MCP client (docs/mcp.md)."""

from __future__ import annotations

import importlib
import os

import click

from memroute.cli.common import open_service

__all__ = ["COMMANDS", "mcp_command"]

_STDIO_MODULE = "memroute.server.mcp.stdio"


@click.command("mcp")
@click.option("--tenant", default=None, metavar="NAME",
              help="Act on this tenant without an API key. Single-user machines only: no authentication, it "
                   "trusts whoever starts the process.")
@click.option("--user", "end_user", default=None, metavar="ID", envvar="MEMROUTE_END_USER",
              help="With an app key (--end-users): the end user this session acts for ($MEMROUTE_END_USER).")
@click.pass_context
def mcp_command(ctx: click.Context, tenant: str | None, end_user: str | None) -> None:
    """Serve memroute's MCP tools over stdin/stdout, bound to the key in $MEMROUTE_API_KEY (or --tenant).

    Refuses to start without a valid, unrevoked key (and, for an app key, an end user: --user). Logs go to
    stderr; stdout carries only the protocol."""
    # Loaded by name, as `memroute serve` loads its app factory: the CLI never imports a sibling surface.
    stdio = importlib.import_module(_STDIO_MODULE)
    server = stdio.stdio_server(open_service(ctx), api_key=os.environ.get(stdio.API_KEY_ENV) or None, tenant=tenant,
                                end_user=end_user)
    stdio.run_stdio(server)


COMMANDS: list[click.Command] = [mcp_command]
