"""``memroute mcp``: the memory tools over stdio, for a local MCP client that starts memroute itself.

The session's tenant comes from an API key (``MEMROUTE_API_KEY``), checked against the deployment's key store
before anything is served and again on every tool call, so a key revoked while the client runs stops working
at its next call. For a single-user machine with no key store, ``--tenant NAME`` binds the session to a named
tenant with read and write scopes and **no authentication**: it trusts whoever can start the process (the
local user), exactly as that user could open the SQLite file directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memroute.errors import AuthenticationError, ValidationError
from memroute.server.mcp import build_mcp_server
from memroute.server.mcp.tools import Caller, session_tenant
from memroute.tenancy import end_user_tenant

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from memroute.service import Memroute

__all__ = ["API_KEY_ENV", "END_USER_ENV", "key_caller", "run_stdio", "stdio_server", "tenant_caller"]

API_KEY_ENV = "MEMROUTE_API_KEY"
END_USER_ENV = "MEMROUTE_END_USER"
LOCAL_SCOPES = frozenset({"read", "write"})


def key_caller(mem: Memroute, secret: str, end_user: str | None = None) -> Callable[[], Caller]:
    """A resolver for the key ``secret``: validated now (:class:`~memroute.errors.AuthenticationError` when it
    is unknown or revoked) and again on every call. An app key (``--end-users``) needs ``end_user``, the one end
    user the whole session acts for; any other key refuses one."""
    def resolve() -> Caller:
        # The key store itself, not memroute.server.auth (which would import FastAPI into every stdio start).
        key = mem.keys.authenticate(secret)
        return Caller(tenant=session_tenant(key.tenant, key.end_users, end_user, field=END_USER_ENV),
                      scopes=frozenset(key.scopes), key_id=key.id)

    resolve()
    return resolve


def tenant_caller(mem: Memroute, tenant: str) -> Callable[[], Caller]:
    """A resolver that trusts the local user: every call acts on ``tenant`` (validated now)."""
    try:
        mem.list(api_key_id=tenant, limit=1)  # a bad name is refused before serving, not at the first call
    except ValidationError as exc:
        raise ValidationError(f"--tenant: {exc}", exc.problems) from None
    caller = Caller(tenant=tenant, scopes=LOCAL_SCOPES)
    return lambda: caller


def stdio_server(mem: Memroute, *, api_key: str | None, tenant: str | None,
                 end_user: str | None = None) -> MCPServer:
    """The MCP server ``memroute mcp`` runs: bound to ``api_key`` (and, for an app key, to ``end_user``) or,
    explicitly, to ``tenant``."""
    if api_key and tenant:
        raise AuthenticationError(f"give either {API_KEY_ENV} or --tenant, not both")
    if tenant is not None:
        return build_mcp_server(mem, tenant_caller(mem, end_user_tenant(tenant, end_user) if end_user else tenant))
    if not api_key:
        raise AuthenticationError(
            f"memroute mcp needs an API key: set {API_KEY_ENV}=mr_… (create one with `memroute keys create`), "
            "or pass --tenant NAME on a single-user machine (no authentication: it trusts the local user)"
        )
    return build_mcp_server(mem, key_caller(mem, api_key, end_user))


def run_stdio(server: MCPServer) -> None:
    """Serve ``server`` on stdin/stdout until the client closes the stream."""
    import anyio

    anyio.run(server.run_stdio_async)
