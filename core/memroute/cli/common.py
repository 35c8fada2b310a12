"""Shared CLI plumbing: opening the service once per invocation, JSON output, memory rendering."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import attrs
import click

from memroute.errors import ValidationError

if TYPE_CHECKING:
    from memroute.config.settings import MemrouteSettings
    from memroute.models import Memory
    from memroute.service import Memroute

__all__ = [
    "CliState",
    "MemrouteGroup",
    "configured_backends",
    "echo_json",
    "load_cli_settings",
    "open_service",
    "read_text",
    "read_text_lines",
]


@attrs.define
class CliState:
    config_path: str | None = None
    service: Any = None


def open_service(ctx: click.Context) -> Memroute:
    """The service for this invocation (opened on first use, closed when the command ends)."""
    from memroute.service import Memroute

    state = ctx.find_object(CliState)
    assert state is not None
    if state.service is None:
        state.service = Memroute.open(state.config_path)
        ctx.find_root().call_on_close(state.service.close)
    return state.service


class MemrouteGroup(click.Group):
    """The root ``memroute`` group: memroute's own commands, then the ones plugins add through the
    ``memroute_register_commands`` hook. Plugin commands load the first time the CLI looks past its own
    (running a command it does not define, or listing commands), so ``memroute add`` never waits for them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._own_commands: dict[str, click.Command] | None = None
        self._loaded_from: object = None

    def load_plugin_commands(self) -> None:
        """Register the plugins' commands now: once per process-wide plugin manager (after
        ``reset_plugin_manager()`` the next use starts again from memroute's own commands)."""
        from memroute.plugins import get_plugin_manager

        manager = get_plugin_manager()
        if manager is self._loaded_from:
            return
        if self._own_commands is None:
            self._own_commands = dict(self.commands)
        self.commands = dict(self._own_commands)
        self._loaded_from = manager
        manager.register_commands(self)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None:
            self.load_plugin_commands()
            command = super().get_command(ctx, cmd_name)
        return command

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load_plugin_commands()
        return super().list_commands(ctx)


def load_cli_settings(ctx: click.Context) -> MemrouteSettings:
    """The settings this invocation uses (``--config``, else ``$MEMROUTE_CONFIG``, else ``./memroute.toml``,
    then the environment), without opening the service: for commands that set a backend up before it can
    open."""
    from memroute.config.settings import load_settings

    state = ctx.find_object(CliState)
    return load_settings(state.config_path if state else None)


def configured_backends(ctx: click.Context, type_name: str) -> dict[str, dict[str, Any]]:
    """The options (``${VAR}`` already expanded, not yet structured) of every configured
    ``[backends.NAME]`` table with ``type = type_name``, by instance name."""
    instances = load_cli_settings(ctx).backends.instances
    return {name: dict(config.options) for name, config in instances.items() if config.type == type_name}


def read_text(file: str) -> str:
    """The UTF-8 text of ``file`` (``-``: stdin); bytes that are not UTF-8 are a ``ValidationError`` naming
    the byte offset, not a ``UnicodeDecodeError``."""
    name = "stdin" if file == "-" else file
    try:
        if file == "-":
            data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        else:
            with open(file, "rb") as handle:
                data = handle.read()
        return data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{name}: not UTF-8 text (invalid byte at offset {exc.start})",
                              [(name, "encoding")]) from None
    except OSError as exc:
        raise ValidationError(f"{name}: cannot read: {exc.strerror or exc}", [(name, "unreadable")]) from None


def read_text_lines(file: str) -> list[str]:
    return read_text(file).splitlines()


def echo_json(data: Any) -> None:
    """Print ``data`` (a report, a model, or plain data) as indented JSON through the one converter."""
    from memroute.config.serialization import to_jsonable

    click.echo(json.dumps(to_jsonable(data), ensure_ascii=False, indent=2, default=str))


def memory_line(memory: Memory) -> str:
    session = f" session={memory.session_id}" if memory.session_id else ""
    return f"{memory.id}  [{memory.type.value}] {memory.key}{session}\n    {memory.content}"
