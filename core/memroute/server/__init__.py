"""``memroute serve``: the ASGI app hosting the REST API (``api/``), and the MCP, proxy and dashboard surfaces
that plug into :func:`~memroute.server.app.create_app`. Needs the ``server`` extra (FastAPI, uvicorn)."""

from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str) -> object:
    if name == "create_app":
        from memroute.server.app import create_app

        return create_app
    raise AttributeError(name)
