"""The ASGI app ``memroute serve`` runs and its surfaces (REST, MCP, proxy, dashboard)."""
