"""memroute serve: the ASGI app (REST, MCP, proxy, dashboard)."""
