"""``memroute serve`` and ``memroute keys``: the HTTP server and the API keys it accepts."""

from __future__ import annotations

import os
from typing import Any

import attrs
import click

from memroute.cli.common import CliState, echo_json, open_service

__all__ = ["COMMANDS"]

_APP_FACTORY = "memroute.server.factory:app_from_env"
FIRST_KEY_HINT = (
    "memroute: no API key exists yet, so every request will be refused (401). Create the first admin key:\n"
    "    memroute keys create --name admin --admin\n"
    "then send it as 'Authorization: Bearer mr_…'."
)


@click.command()
@click.option("--host", default=None, help="Interface to bind (default 127.0.0.1, or [server] host).")
@click.option("--port", type=int, default=None, help="TCP port (default 8765, or [server] port).")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Worker processes, each with its own service on the same deployment.")
@click.option("--ssl-certfile", type=click.Path(dir_okay=False, exists=True), default=None,
              help="TLS certificate (PEM).")
@click.option("--ssl-keyfile", type=click.Path(dir_okay=False, exists=True), default=None,
              help="TLS private key (PEM).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None, workers: int | None, ssl_certfile: str | None,
          ssl_keyfile: str | None, log_level: str) -> None:
    """Serve the REST API (and the surfaces hosted with it) over HTTP. Stops gracefully on Ctrl-C / SIGTERM,
    flushing background work."""
    try:
        import fastapi  # noqa: F401 - only checks that the server extra is installed
        import uvicorn

        from memroute.cli.tcp import http_protocol
    except ImportError as exc:
        raise click.ClickException(
            f"memroute serve needs the server extra: pip install 'memroute[server]' ({exc})") from None
    state = ctx.find_object(CliState)
    assert state is not None
    # Hugging Face tokenizers run every call on their Rayon thread pool. In the server a query is tokenized on a
    # request thread, and waking the pool cost that thread 0.85 ms of CPU per search (1.27 against 0.41 ms for
    # the static model's query embedding) for 0.02 ms of work; a 256-text indexing batch is no slower without it
    # on two cores (7.2 against 8.2 ms). Set before any tokenizer loads; an explicit setting is kept.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    mem = open_service(ctx)
    given: dict[str, Any] = {"host": host, "port": port, "workers": workers, "ssl_certfile": ssl_certfile,
                             "ssl_keyfile": ssl_keyfile}
    server = attrs.evolve(mem.settings.server, **{name: value for name, value in given.items() if value is not None})
    if bool(server.ssl_certfile) != bool(server.ssl_keyfile):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together")
    if not mem.keys.list(include_revoked=False):
        click.echo(FIRST_KEY_HINT, err=True)
    options: dict[str, Any] = {
        "host": server.host, "port": server.port, "log_level": log_level, "proxy_headers": True,
        "forwarded_allow_ips": "127.0.0.1", "timeout_graceful_shutdown": server.graceful_timeout_s,
        "ssl_certfile": server.ssl_certfile, "ssl_keyfile": server.ssl_keyfile, "server_header": False,
        # memroute's own logging (memroute.config.logs), in this process and, through the factory, in each
        # worker: records are formatted and written off the event loop, and no dependency configures it.
        "log_config": None,
        "timeout_keep_alive": server.idle_timeout_s,
        "http": http_protocol(server.header_timeout_s),
    }
    # Every worker process (one by default) builds its own service and app from the same configuration, through
    # the factory uvicorn imports; the CLI itself never imports the server package (a sibling surface).
    mem.close()
    state.service = None
    from memroute.config.logs import LOG_LEVEL_ENV, install_logging

    os.environ[LOG_LEVEL_ENV] = log_level
    install_logging(log_level)
    if state.config_path:
        os.environ["MEMROUTE_CONFIG"] = os.path.abspath(state.config_path)
    if server.workers > 1:
        _run_workers(server.workers, options)
    else:
        uvicorn.run(_APP_FACTORY, factory=True, **options)


def _run_workers(workers: int, options: dict[str, Any]) -> None:
    """``uvicorn.run(..., workers=N)`` with the listening socket of :class:`memroute.cli.tcp.TcpConfig`."""
    from uvicorn.supervisors import Multiprocess

    from memroute.cli.tcp import TcpConfig

    config = TcpConfig(_APP_FACTORY, factory=True, workers=workers, **options)
    Multiprocess(config, sockets=[config.bind_socket()]).run()


@click.group("keys")
def keys_group() -> None:
    """Manage the API keys the server accepts (secrets are stored only as hashes)."""


def _print_key(data: dict[str, Any]) -> None:
    revoked = f"  revoked {data['revokedAt']}" if data.get("revokedAt") else ""
    used = data.get("lastUsedAt") or "never"
    app = "  end-users" if data.get("endUsers") else ""
    click.echo(f"{data['id']}  {data['name']}  tenant={data['tenant']}{app}  scopes={','.join(data['scopes'])}  "
               f"last used {used}{revoked}")


@keys_group.command("create")
@click.option("--name", required=True, help="A label for people.")
@click.option("--scope", "scope", default=None, help="Comma-separated scopes: read, write (default read,write).")
@click.option("--admin", is_flag=True, help="An admin key: every scope, any tenant, key management.")
@click.option("--tenant", default=None, help="The apiKeyId its memories belong to (default: the key's own id).")
@click.option("--end-users", "end_users", is_flag=True,
              help="An app key: every request names an end user of --tenant (x-memroute-user) and acts on that end "
                   "user's memories only.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def keys_create(ctx: click.Context, name: str, scope: str | None, admin: bool, tenant: str | None,
                end_users: bool, as_json: bool) -> None:
    """Create a key and print its secret (shown this once)."""
    if admin and scope:
        raise click.UsageError("--admin and --scope are exclusive")
    key, secret = open_service(ctx).keys.create(name, scopes="admin" if admin else (scope or "read,write"),
                                                tenant=tenant, end_users=end_users)
    if as_json:
        echo_json({"key": key.to_dict(), "secret": secret})
        return
    _print_key(key.to_dict())
    click.echo(f"secret: {secret}")
    click.echo("(shown once: store it now; memroute keeps only its hash)", err=True)


@keys_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def keys_list(ctx: click.Context, as_json: bool) -> None:
    """Every key, oldest first (revoked ones included)."""
    keys = [key.to_dict() for key in open_service(ctx).keys.list()]
    if as_json:
        echo_json(keys)
        return
    for data in keys:
        _print_key(data)
    if not keys:
        click.echo("no keys (create one with: memroute keys create --name admin --admin)", err=True)


@keys_group.command("revoke")
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def keys_revoke(ctx: click.Context, key_id: str, as_json: bool) -> None:
    """Revoke KEY_ID: it fails at once in every server process."""
    key = open_service(ctx).keys.revoke(key_id)
    echo_json(key.to_dict()) if as_json else _print_key(key.to_dict())


@keys_group.command("rotate")
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def keys_rotate(ctx: click.Context, key_id: str, as_json: bool) -> None:
    """Replace KEY_ID by a new key (new id and secret; same name, scopes and tenant) and revoke it."""
    key, secret = open_service(ctx).keys.rotate(key_id)
    if as_json:
        echo_json({"key": key.to_dict(), "secret": secret})
        return
    _print_key(key.to_dict())
    click.echo(f"secret: {secret}")


@keys_group.command("limits")
@click.argument("key_id")
@click.option("--requests-per-minute", type=click.IntRange(0, 10**9), default=None,
              help="Requests a minute across every server process (0: unlimited).")
@click.option("--concurrent-requests", type=click.IntRange(0, 10**9), default=None,
              help="Requests in flight at once, across every server process (0: unlimited).")
@click.option("--default", "use_default", is_flag=True,
              help="Forget the key's own limits: the [server] defaults apply.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def keys_limits(ctx: click.Context, key_id: str, requests_per_minute: int | None, concurrent_requests: int | None,
                use_default: bool, as_json: bool) -> None:
    """Show or set KEY_ID's fair-use limits (429 beyond them). Without options, shows them; an unset limit
    takes the [server] default. Every server process applies a change within 5 seconds."""
    from memroute.deployment.fair_use import KeyLimits

    service = open_service(ctx)
    if service.keys.get(key_id) is None:
        raise click.ClickException(f"no API key with id {key_id!r}")
    limits = service.fair_use.own_limits(key_id)
    if use_default:
        limits = service.fair_use.set_limits(key_id, KeyLimits())
    elif requests_per_minute is not None or concurrent_requests is not None:
        limits = service.fair_use.set_limits(key_id, attrs.evolve(
            limits, **{name: value for name, value in (("requests_per_minute", requests_per_minute),
                                                       ("concurrent_requests", concurrent_requests))
                       if value is not None}))
    effective = service.fair_use.effective(key_id)
    if as_json:
        echo_json({"key": key_id, "own": limits.to_dict(), "effective": effective.to_dict()})
        return

    def shown(value: int | None) -> str:
        return "unlimited" if value == 0 else str(value)

    click.echo(f"{key_id}  requests per minute: {shown(effective.requests_per_minute)}"
               f"{'' if limits.requests_per_minute is not None else ' (default)'}  "
               f"concurrent requests: {shown(effective.concurrent_requests)}"
               f"{'' if limits.concurrent_requests is not None else ' (default)'}")


COMMANDS: list[click.Command] = [serve, keys_group]
