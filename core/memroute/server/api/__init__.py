"""The REST API routers. Each module exposes ``router`` (a :class:`~memroute.server.auth.ScopedRouter`)."""
