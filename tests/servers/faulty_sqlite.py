"""A test plugin: backend type ``faulty-sqlite`` is the real SQLite backend inside a FaultyBackend, so a test
configured like memroute.toml can stop and restart "the database" on command."""

from __future__ import annotations

import memroute
from memroute.interfaces import ComponentContext
from memroute.specs import BackendSpec
from memroute.testing.faults import FaultyBackend
from memroute_builtins.backends.sqlite.backend import SqliteBackend, SqliteSettings


class FaultySqlitePlugin:
    """Register it (``register_plugin(FaultySqlitePlugin())``); ``instances[name]`` is each configured backend."""

    def __init__(self) -> None:
        self.instances: dict[str, FaultyBackend] = {}

    @memroute.hookimpl
    def memroute_backends(self):
        def factory(settings: SqliteSettings, context: ComponentContext) -> FaultyBackend:
            backend = FaultyBackend(SqliteBackend.from_settings(settings, context))
            self.instances[context.instance_name] = backend
            return backend

        yield BackendSpec(name="faulty-sqlite", factory=factory, settings_class=SqliteSettings)
