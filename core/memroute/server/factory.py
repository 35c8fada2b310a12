"""The app factory uvicorn workers import (``memroute serve --workers N``): each worker process opens its own
service from ``MEMROUTE_CONFIG`` (and the environment) and serves it, sharing the deployment's databases."""

from __future__ import annotations

from fastapi import FastAPI

__all__ = ["app_from_env"]


def app_from_env() -> FastAPI:
    import memroute
    from memroute.server.app import create_app

    mem = memroute.open()
    return create_app(mem, settings=mem.settings.server, close_service=True)
