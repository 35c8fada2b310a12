"""The app factory uvicorn workers import (``memroute serve --workers N``): each worker process opens its own
service from ``MEMROUTE_CONFIG`` (and the environment) and serves it, sharing the deployment's databases."""

from __future__ import annotations

import gc

from fastapi import FastAPI

__all__ = ["app_from_env"]


def app_from_env() -> FastAPI:
    """The service and app of one ``memroute serve`` process, ready before the first request.

    Three things a library leaves to its application (docs/python-api.md, "Garbage collection") are done here,
    because this process is memroute's own:

    - **warm-up**: an in-process embedding source loads its model now (``Memroute.warm_up``), not inside the
      first request that searches (which waited for it: about 1 s on the development VM);
    - **logging** off the event loop (:func:`memroute.config.logs.install_logging`, at ``memroute serve``'s
      ``--log-level``);
    - **``gc.freeze()``** once the service and app exist: the modules, classes and model objects alive after
      start-up (~70,000 tracked objects) move to the permanent generation, so a full collection no longer
      traverses them. Measured in ``memroute serve`` under ``memroute bench --proxy``: a full collection held the
      GIL for 55-70 ms before, in the middle of whichever request set it off (docs/performance.md).
    """
    import os

    import memroute
    from memroute.config.logs import LOG_LEVEL_ENV, install_logging
    from memroute.server.app import create_app

    if LOG_LEVEL_ENV in os.environ:  # set by memroute serve; an application's own factory keeps its logging
        install_logging(os.environ[LOG_LEVEL_ENV])
    mem = memroute.open()
    mem.warm_up()  # a failure is logged there; the first search then retries
    app = create_app(mem, settings=mem.settings.server, close_service=True)
    gc.collect()
    gc.freeze()
    return app
