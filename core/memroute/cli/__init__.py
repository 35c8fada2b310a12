"""The ``memroute`` command line. Every read command takes ``--json``; errors are one line on stderr with a
non-zero exit status, never a traceback (``MEMROUTE_DEBUG=1`` shows it).

Exit status: 0 success; 2 the invocation's input is wrong (a usage error, a ``ValidationError`` or
``ConfigError``, text that is not valid Unicode, input nested too deeply); 1 the operation failed (not found,
no backend available, ...); 130 interrupted; 70 an internal error (a bug: please report it).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from memroute.cli import end_users, mcp, memories, omniroute, pipeline, retrieval, scaffold, server
from memroute.cli.common import (
    CliState,
    MemrouteGroup,
    configured_backends,
    echo_json,
    load_cli_settings,
    open_service,
)
from memroute.errors import ConfigError, MemrouteError, ValidationError

__all__ = ["cli", "configured_backends", "echo_json", "load_cli_settings", "main", "open_service"]


@click.group(cls=MemrouteGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="memroute.toml to use (else $MEMROUTE_CONFIG, else ./memroute.toml, else defaults).")
@click.version_option(package_name="memroute", prog_name="memroute")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """memroute: persistent conversational memory for LLM applications."""
    ctx.obj = CliState(config_path=config_path)


for module in (memories, pipeline, retrieval, scaffold, server, mcp, omniroute, end_users):
    for command in module.COMMANDS:
        cli.add_command(command)


def main(argv: list[str] | None = None) -> Any:
    """Console entry point: run the CLI, turning every error into one line on stderr."""
    try:
        return cli.main(args=argv, prog_name="memroute", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("memroute: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (ValidationError, ConfigError) as exc:
        _error(str(exc))
        sys.exit(2)
    except MemrouteError as exc:
        _error(str(exc))
        sys.exit(1)
    except RecursionError:
        # The commands convert the inputs they parse; this is the net for any path that still recurses.
        _error("input is nested too deeply")
        sys.exit(2)
    except UnicodeError as exc:
        _error(f"input is not valid Unicode text ({type(exc).__name__} at position {getattr(exc, 'start', '?')})")
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("memroute: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("MEMROUTE_DEBUG"):
            raise
        click.echo(f"memroute: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
                   "(MEMROUTE_DEBUG=1 shows the traceback)", err=True)
        sys.exit(70)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _error(message: str) -> None:
    # A message may quote the caller's text, lone surrogates included: print it escaped rather than let
    # stderr's encoder raise a second error while reporting the first.
    line = _one_line(message).encode("utf-8", "backslashreplace").decode("utf-8")
    click.echo(f"memroute: error: {line}", err=True)
