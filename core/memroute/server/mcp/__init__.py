"""memroute's MCP tools over the official ``mcp`` SDK (2.x): streamable HTTP at ``/mcp`` inside
``memroute serve`` (:mod:`memroute.server.mcp.http`) and stdio for ``memroute mcp``
(:mod:`memroute.server.mcp.stdio`). Both serve the same tools (:mod:`memroute.server.mcp.tools`), each
session bound to the tenant of one API key. See docs/mcp.md."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from memroute.server.mcp.omniroute import OmnirouteTools
from memroute.server.mcp.tools import Caller, register_tools

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from memroute.service import Memroute

__all__ = ["INSTRUCTIONS", "SERVER_NAME", "Caller", "build_mcp_server"]

SERVER_NAME = "memroute"
INSTRUCTIONS = (
    "Long-term memory about the user, kept across conversations. Call memory_search before answering anything "
    "that may depend on the user's preferences, past decisions, projects or habits. Call memory_add when the "
    "user states a durable fact about themselves (a preference, a decision, a recurring way of working); use a "
    "stable key such as 'preference:editor' so a later change updates the memory instead of duplicating it. "
    "Use memory_update to correct a memory and memory_delete or memory_clear when the user asks to forget; "
    "memory_clear is irreversible, so run it with dry_run first."
)


@contextlib.contextmanager
def _root_logging_untouched() -> Iterator[None]:
    """Undo what ``MCPServer()`` does to the root logger. When the root logger has no handler, the SDK calls
    ``logging.basicConfig`` with a ``rich`` handler that renders tracebacks in colour (1-3.5 s for a deep one,
    on the event loop, in ``memroute serve``) and sets the application's log level. Logging belongs to the
    application (``memroute serve``: :func:`memroute.config.logs.install_logging`), never to a dependency."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)


def build_mcp_server(mem: Memroute, resolve: Callable[[], Caller], **server_options: Any) -> MCPServer:
    """An :class:`mcp.server.MCPServer` with memroute's tools, acting for whoever ``resolve()`` returns on
    each call. ``server_options`` go to ``MCPServer`` (``auth=``, ``token_verifier=`` for HTTP)."""
    from importlib.metadata import version

    from mcp.server import MCPServer

    with _root_logging_untouched():
        server: MCPServer = MCPServer(
            SERVER_NAME, title="memroute memory", version=version("memroute"), instructions=INSTRUCTIONS,
            log_level="WARNING", **server_options,
        )
    # OmniRoute's tool names too, unless the deployment turned them off ([mcp] omniroute_tools).
    extra = [OmnirouteTools(mem)] if mem.settings.mcp.omniroute_tools else []
    register_tools(server, mem, resolve, extra=extra)
    return server
