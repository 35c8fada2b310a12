"""``/mcp``: the memory tools over streamable HTTP inside ``memroute serve``.

Every request carries ``Authorization: Bearer mr_…``. The SDK's bearer middleware hands it to
:class:`KeyStoreTokenVerifier`, which checks it against the deployment's key store **on every request** (no
cache), so a revoked key is refused (401) at its very next request, open session or not; the SDK also binds
each session to the key that opened it, so another key cannot drive it. Tools then act on the tenant of the
key that sent *this* request (:func:`request_caller`) and check their own scope (``read`` for search / list /
get, ``write`` for the rest): any valid key may open a session. The protected-resource metadata (RFC 9728) is
served at ``/.well-known/oauth-protected-resource/mcp``, and the ``Host`` / ``Origin`` of every request are
checked against loopback plus the configured names (DNS-rebinding protection; ``[mcp]`` settings).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from memroute.errors import AuthenticationError
from memroute.server.mcp import build_mcp_server
from memroute.server.mcp.end_users import EndUserSessions, current_end_user
from memroute.server.mcp.tools import Caller, session_tenant

if TYPE_CHECKING:
    from mcp.server import MCPServer
    from mcp.server.auth.provider import AccessToken
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette

    from memroute.config.settings import McpSettings, ServerSettings
    from memroute.service import Memroute

__all__ = ["MCP_PATH", "KeyStoreTokenVerifier", "mcp_routes", "mount_mcp", "request_caller", "transport_security"]

MCP_PATH = "/mcp"
TENANT_CLAIM = "memroute_tenant"
END_USERS_CLAIM = "memroute_end_users"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class KeyStoreTokenVerifier:
    """The SDK's ``TokenVerifier`` over memroute's key store: a live key becomes an ``AccessToken`` carrying
    its id, scopes and tenant; an unknown or revoked one is ``None`` (the SDK answers 401)."""

    def __init__(self, mem: Memroute) -> None:
        self.mem = mem

    async def verify_token(self, token: str) -> AccessToken | None:
        import anyio
        from mcp.server.auth.provider import AccessToken

        from memroute.server.auth import authenticate

        try:
            # A thread: the key store may be PostgreSQL, and a lookup must not stall the event loop.
            principal = await anyio.to_thread.run_sync(authenticate, self.mem, token)
        except AuthenticationError:
            return None
        return AccessToken(token=token, client_id=principal.key_id, subject=principal.key_id,
                           scopes=sorted(principal.scopes),
                           claims={TENANT_CLAIM: principal.tenant, END_USERS_CLAIM: principal.end_users})


def request_caller() -> Caller:
    """The caller of the tool call being served: the key the SDK verified for this HTTP request, acting for the
    end user its session was opened for when it is an app key (:mod:`memroute.server.mcp.end_users`)."""
    from mcp.server.auth.middleware.auth_context import get_access_token

    token = get_access_token()
    if token is None or not token.claims or TENANT_CLAIM not in token.claims:
        raise AuthenticationError("no verified API key on this request")  # unreachable behind the middleware
    tenant = session_tenant(token.claims[TENANT_CLAIM], bool(token.claims.get(END_USERS_CLAIM)),
                            current_end_user(), field="x-memroute-user")
    return Caller(tenant=tenant, scopes=frozenset(token.scopes), key_id=token.client_id)


def _host_patterns(hosts: tuple[str, ...]) -> list[str]:
    patterns: list[str] = []
    for host in hosts:
        host = host.strip().lower()
        if not host:
            continue
        patterns.append(host)
        bare = (host.startswith("[") and host.endswith("]")) or ":" not in host
        if bare:
            patterns.append(f"{host}:*")
    return patterns


def transport_security(server: ServerSettings, mcp: McpSettings) -> TransportSecuritySettings:
    """The SDK's Host / Origin checks for ``/mcp``: loopback names always, plus ``[server] allowed_hosts`` and
    ``[mcp] allowed_hosts`` / ``allowed_origins``."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = _host_patterns((*LOOPBACK_HOSTS, *server.allowed_hosts, *mcp.allowed_hosts))
    origins = [f"{scheme}://{host}{port}" for scheme in ("http", "https") for host in LOOPBACK_HOSTS
               for port in ("", ":*")]
    origins += [origin.strip().rstrip("/").lower() for origin in mcp.allowed_origins if origin.strip()]
    return TransportSecuritySettings(enable_dns_rebinding_protection=mcp.dns_rebinding_protection,
                                     allowed_hosts=hosts, allowed_origins=origins)


def resource_url(server: ServerSettings, mcp: McpSettings) -> str:
    """The public URL of ``/mcp`` (``[mcp] resource_url``, else built from ``[server]`` host and port)."""
    if mcp.resource_url:
        return mcp.resource_url.rstrip("/")
    host = server.host if server.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    scheme = "https" if server.ssl_certfile else "http"
    return f"{scheme}://{host}:{server.port}{MCP_PATH}"


def build_http_server(mem: Memroute, server: ServerSettings, mcp: McpSettings) -> tuple[MCPServer, Starlette]:
    """The MCP server bound to the key store, and the SDK's Starlette app serving it at ``/mcp``."""
    from mcp.server.auth.settings import AuthSettings
    from pydantic import AnyHttpUrl

    url = resource_url(server, mcp)
    parts = urlsplit(url)
    auth = AuthSettings(
        # memroute issues its keys itself (`memroute keys create`): the issuer is the server, and the token
        # is a static bearer key rather than an OAuth grant; the verifier checks it, not a resource claim.
        issuer_url=AnyHttpUrl(f"{parts.scheme}://{parts.netloc}"), resource_server_url=AnyHttpUrl(url),
        validate_token_resource=False,
    )
    mcp_server = build_mcp_server(mem, request_caller, auth=auth, token_verifier=KeyStoreTokenVerifier(mem))
    app = mcp_server.streamable_http_app(streamable_http_path=MCP_PATH,
                                         transport_security=transport_security(server, mcp))
    return mcp_server, app


TOOL_SCOPES = "per-tool"
"""The declared scope of ``/mcp``: any live key opens a session; each tool checks ``read`` or ``write``."""


def mcp_routes(app: Starlette) -> list[Any]:
    """Routes for a host application that forward ``/mcp`` and its metadata document to the SDK's ``app``
    (which keeps its own auth middleware). Each carries its declared scope as ``memroute_scope``: ``per-tool``
    for ``/mcp``, ``public`` for the metadata document (it is how a client learns that a key is needed)."""
    from starlette.routing import Route

    from memroute.server.auth import PUBLIC

    routes = []
    for path in (getattr(route, "path", None) for route in app.routes):
        if not path:
            continue
        route = Route(path, endpoint=EndUserSessions(app) if path == MCP_PATH else app, include_in_schema=False)
        route.memroute_scope = TOOL_SCOPES if path == MCP_PATH else PUBLIC  # type: ignore[attr-defined]
        routes.append(route)
    return routes


def mount_mcp(app: Any, mem: Memroute, server: ServerSettings, mcp: McpSettings) -> MCPServer:
    """Serve ``/mcp`` from the FastAPI/Starlette ``app``: add its routes and run the SDK's session manager
    for as long as ``app``'s lifespan (a mounted sub-application's own lifespan never runs)."""
    mcp_server, sdk_app = build_http_server(mem, server, mcp)
    app.router.routes.extend(mcp_routes(sdk_app))
    outer: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(host: Any) -> AsyncIterator[Any]:
        # The service's lifespan outlives the MCP sessions: they end before it flushes and closes.
        async with outer(host) as state, mcp_server.session_manager.run():
            yield state

    app.router.lifespan_context = lifespan
    return mcp_server
