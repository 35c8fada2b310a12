"""A deployment's shared state: API keys, runtime settings and maintenance leases.

Every process serving one deployment (``memroute serve`` workers, the CLI, several hosts in front of one
PostgreSQL) must see the same keys, the same runtime settings and agree on who runs scheduled maintenance.
On one machine that is ``state.db`` in the primary's state directory (SQLite, WAL, a busy timeout); a backend
plugin can supply its own store through the ``memroute_state_store`` hook (the PostgreSQL backend keeps it in
its database).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from memroute.config.settings import MemorySettings
from memroute.deployment.db import ThreadConnections
from memroute.deployment.keys import KeyStore, SqliteKeyStore
from memroute.errors import ConfigError, ValidationError

__all__ = [
    "RUNTIME_MEMORY_FIELDS",
    "RUNTIME_SETTINGS_TTL_S",
    "SESSION_HISTORIES",
    "RuntimeMemorySettings",
    "SqliteStateStore",
    "StateStore",
    "StateStoreContext",
    "apply_memory_overrides",
    "lease_holder_id",
    "session_history_name",
    "tenant_histories_prefix",
    "validate_memory_overrides",
]


SESSION_HISTORIES: Final = "session-histories"
"""The namespace of the conversation histories the framework sessions keep (``memroute.integrations.history``)."""


def session_history_name(api_key_id: str, kind: str, session_id: str) -> str:
    """The name of one session's history: JSON, tenant first, so no two ids collide and every history of a
    tenant shares :func:`tenant_histories_prefix`."""
    return json.dumps([api_key_id, kind, session_id])


def tenant_histories_prefix(api_key_id: str) -> str:
    """What the name of every history of ``api_key_id`` (and of no other tenant) starts with."""
    return json.dumps([api_key_id])[:-1] + ","


@attrs.frozen(kw_only=True)
class StateStoreContext:
    """What ``memroute_state_store`` gets besides the primary backend."""

    state_dir: Path
    """The primary's state directory (where the SQLite default keeps ``state.db``)."""
    prepare_connection: Callable[[Any], None] | None = None
    """The ``memroute_prepare_connection`` hooks, for implementations that open SQLite connections."""


class StateStore(ABC):
    """Keys, JSON values by (namespace, name), and named leases, shared by a deployment's processes."""

    @property
    @abstractmethod
    def keys(self) -> KeyStore:
        """The deployment's API keys."""

    @abstractmethod
    def get_value(self, namespace: str, name: str) -> Any | None:
        """The JSON value stored under ``(namespace, name)``, or None."""

    @abstractmethod
    def put_value(self, namespace: str, name: str, value: Any) -> None:
        """Store a JSON-able value under ``(namespace, name)`` (replacing any)."""

    def update_value(self, namespace: str, name: str, change: Callable[[Any | None], Any]) -> Any:
        """Atomically replace the value under ``(namespace, name)`` by ``change(current)`` (``current`` is
        None when nothing is stored) and return what was stored. Two processes updating one value at the
        same instant both take effect, one after the other: neither overwrites the other's change. An
        exception from ``change`` stores nothing and propagates.

        The built-in stores override this with one transaction that holds the value's lock from the read to
        the write. This default (get, then put) is **not** atomic across processes; a plugin's store should
        override it."""
        value = change(self.get_value(namespace, name))
        self.put_value(namespace, name, value)
        return value

    def delete_values(self, namespace: str, name_prefix: str) -> int:
        """Delete every value of ``namespace`` whose name starts with ``name_prefix``; how many were deleted.
        Erasing an end user uses it (their conversation histories, :data:`SESSION_HISTORIES`). The built-in
        stores implement it; a plugin's store that does not raises :class:`NotImplementedError`."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete values by name prefix")

    @abstractmethod
    def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take or renew the lease ``name`` for ``holder`` for ``ttl_s`` seconds. True when ``holder`` holds
        it now: it was free, expired, or already ``holder``'s. Atomic across processes and hosts."""

    @abstractmethod
    def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up, if ``holder`` holds it."""

    @abstractmethod
    def ping(self) -> None:
        """Raise when the store cannot be reached (``/readyz``)."""

    def describe(self) -> dict[str, Any]:
        return {"type": type(self).__name__}

    def close(self) -> None:  # noqa: B027 - optional for implementations without resources
        """Release connections."""


_STATE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS state_values (
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""


class SqliteStateStore(StateStore):
    """The default state store: ``state.db`` (apsw, WAL, busy timeout, one connection per thread)."""

    def __init__(self, path: str | Path, *, prepare: Callable[[Any], None] | None = None,
                 busy_timeout_ms: int = 10_000) -> None:
        self.path = str(path)
        self._db = ThreadConnections(path, prepare=prepare, busy_timeout_ms=busy_timeout_ms)
        with self._db.transaction() as conn:
            conn.execute(_STATE_SCHEMA)
        self._keys = SqliteKeyStore(self._db)

    @property
    def keys(self) -> KeyStore:
        return self._keys

    def get_value(self, namespace: str, name: str) -> Any | None:
        row = self._db.get().execute("SELECT value FROM state_values WHERE namespace = ? AND name = ?",
                                     (namespace, name)).fetchone()
        return None if row is None else json.loads(row[0])

    def put_value(self, namespace: str, name: str, value: Any) -> None:
        with self._db.transaction() as conn:
            self._write(conn, namespace, name, value)

    @staticmethod
    def _write(conn: Any, namespace: str, name: str, value: Any) -> None:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
        conn.execute(
            "INSERT INTO state_values (namespace, name, value, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (namespace, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            (namespace, name, text, time.time()),
        )

    def delete_values(self, namespace: str, name_prefix: str) -> int:
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM state_values WHERE namespace = ? AND substr(name, 1, ?) = ?",
                         (namespace, len(name_prefix), name_prefix))
            return int(conn.changes())

    def update_value(self, namespace: str, name: str, change: Callable[[Any | None], Any]) -> Any:
        """One ``BEGIN IMMEDIATE`` transaction: SQLite's write lock is taken before the read, so another
        process's update waits (busy timeout) and then reads this one's result. A deferred transaction would
        instead fail its upgrade with ``SQLITE_BUSY_SNAPSHOT`` when another writer committed in between."""
        conn = self._db.get()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT value FROM state_values WHERE namespace = ? AND name = ?",
                               (namespace, name)).fetchone()
            value = change(None if row is None else json.loads(row[0]))
            self._write(conn, namespace, name, value)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return value

    def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        now = time.time()
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at "
                "WHERE leases.holder = excluded.holder OR leases.expires_at < ?",
                (name, holder, now + ttl_s, now),
            )
            row = conn.execute("SELECT holder FROM leases WHERE name = ?", (name,)).fetchone()
        return row is not None and row[0] == holder

    def release_lease(self, name: str, holder: str) -> None:
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    def ping(self) -> None:
        self._db.get().execute("SELECT 1 FROM leases LIMIT 1").fetchall()

    def describe(self) -> dict[str, Any]:
        return {"type": "sqlite", "path": self.path}

    def close(self) -> None:
        self._db.close()


log = logging.getLogger("memroute.deployment.state")

_holder_lock = threading.Lock()
_holder: str | None = None


def lease_holder_id() -> str:
    """This process's identity for leases: host, pid and a random suffix (pids repeat across hosts)."""
    global _holder
    import os
    import secrets

    with _holder_lock:
        if _holder is None or not _holder.startswith(f"{socket.gethostname()}:{os.getpid()}:"):
            _holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        return _holder


# --- runtime memory settings -------------------------------------------------------------------------

RUNTIME_MEMORY_FIELDS: Final[dict[str, str]] = {
    "enabled": "enabled",
    "maxTokens": "max_tokens",
    "retentionDays": "retention_days",
    "deleteAfterDays": "delete_after_days",
    "strategy": "strategy",
    "typedDecayEnabled": "typed_decay_enabled",
    "typedDecayEpisodicDays": "typed_decay_episodic_days",
    "typedDecayAccessImmunity": "typed_decay_access_immunity",
}
"""The ``[memory]`` settings that ``PUT /api/settings/memory`` may change at run time (wire name → setting).
The others (backends, embedding source, vector store) shape components built at start-up: they stay in
``memroute.toml``."""

RUNTIME_SETTINGS_TTL_S: Final = 1.0
"""How long a process reuses the runtime overrides it read from the state store before reading them again:
the staleness bound. A change made through one process is applied by that process at once and by every other
process (worker, host) within this many seconds. One indexed read per second per process costs nothing next
to a search, and keeps a PostgreSQL state store off the hot path of every request."""


_SETTINGS_KEY: Final = ("settings", "memory")
_SETTINGS: Final = frozenset(RUNTIME_MEMORY_FIELDS.values())


def _expected_type(setting: str) -> type:
    declared = attrs.fields_dict(MemorySettings)[setting].type
    name = declared if isinstance(declared, str) else getattr(declared, "__name__", "")
    return {"bool": bool, "int": int, "str": str}[name]


def validate_memory_overrides(changes: Mapping[str, Any], base: MemorySettings) -> dict[str, Any]:
    """Strictly check a runtime settings change (wire names, no unknown fields, exact JSON types, the same
    ranges as ``[memory]``): the setting-name → value mapping to store, or :class:`ValidationError` (and
    nothing is stored). A ``None`` (JSON ``null``) value removes that override, so the configured value
    applies again."""
    if not isinstance(changes, Mapping):
        raise ValidationError("settings: expected a JSON object", [("(root)", "type")])
    problems: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    for wire, value in changes.items():
        setting = RUNTIME_MEMORY_FIELDS.get(wire)
        if setting is None:
            problems.append((wire, f"unknown field (allowed: {', '.join(RUNTIME_MEMORY_FIELDS)})"))
            continue
        if value is None:  # drop the override: the configured value applies again
            out[setting] = None
            continue
        expected = _expected_type(setting)
        if isinstance(value, bool) != (expected is bool) or not isinstance(value, expected):
            problems.append((wire, f"expected {expected.__name__}"))
            continue
        out[setting] = value
    if problems:
        raise ValidationError("invalid memory settings:", problems)
    try:
        apply_memory_overrides(base, {k: v for k, v in out.items() if v is not None})
    except ConfigError as exc:
        wire_names = {setting: name for name, setting in RUNTIME_MEMORY_FIELDS.items()}
        fields = [wire_names.get(path, path) for path, _why in exc.problems] or ["(root)"]
        raise ValidationError(f"invalid memory settings: {', '.join(fields)}: {exc}",
                              [(name, str(exc)) for name in fields]) from None
    return out


def apply_memory_overrides(base: MemorySettings, overrides: Mapping[str, Any]) -> MemorySettings:
    """``base`` with the stored runtime overrides applied (validated by the settings class itself)."""
    known = {k: v for k, v in overrides.items() if k in RUNTIME_MEMORY_FIELDS.values()}
    return attrs.evolve(base, **known) if known else base


class RuntimeMemorySettings:
    """The ``[memory]`` settings in effect in one process: the configured ones with the runtime overrides of
    the deployment's state store applied, re-read at most every ``ttl_s`` seconds (the staleness bound, see
    :data:`RUNTIME_SETTINGS_TTL_S`). :meth:`update` applies in this process at once.

    Reading never raises: when the state store cannot be read (or holds a value this version refuses), the
    last settings read stay in effect (the configured ones at first) and a warning is logged, so a state store
    outage never stops retrieval."""

    def __init__(self, base: MemorySettings, store: Callable[[], StateStore], *,
                 ttl_s: float = RUNTIME_SETTINGS_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self._store = store
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._current = base
        self._overrides: dict[str, Any] = {}
        self._fresh_until = float("-inf")

    def current(self, *, fresh: bool = False) -> MemorySettings:
        """The settings in effect (at most ``ttl_s`` old; read from the store now with ``fresh``)."""
        if not fresh and self._clock() < self._fresh_until:
            return self._current
        with self._lock:
            if fresh or self._clock() >= self._fresh_until:
                self._refresh()
            return self._current

    def overrides(self, *, fresh: bool = False) -> dict[str, Any]:
        """The stored overrides (setting name → value) behind :meth:`current`."""
        self.current(fresh=fresh)
        return dict(self._overrides)

    def _refresh(self) -> None:
        try:
            stored = self._store().get_value(*_SETTINGS_KEY) or {}
            if not isinstance(stored, Mapping):
                raise ConfigError("settings/memory: expected a JSON object", [("(root)", "type")])
            settings = apply_memory_overrides(self.base, stored)
        except Exception as exc:  # fail open: keep what was in effect
            log.warning("memroute: cannot read the runtime memory settings (%s: %s); keeping the last ones",
                        type(exc).__name__, exc)
        else:
            self._current, self._overrides = settings, {k: v for k, v in stored.items() if k in _SETTINGS}
        self._fresh_until = self._clock() + self.ttl_s

    def update(self, changes: Mapping[str, Any]) -> MemorySettings:
        """Validate ``changes`` (wire names; ``None`` drops an override) and store them for every process;
        the settings now in effect. Invalid changes raise :class:`ValidationError` and store nothing."""
        checked = validate_memory_overrides(changes, self.base)
        merged: list[MemorySettings] = []

        def merge(current: Any) -> dict[str, Any]:
            # Runs inside the store's transaction: a change made by another process at the same instant is
            # in ``current`` (or waits for this one), so neither is lost.
            previous = current if isinstance(current, Mapping) else {}
            stored = {k: v for k, v in previous.items() if k in _SETTINGS}
            stored.update(checked)
            stored = {k: v for k, v in stored.items() if v is not None}
            merged.append(apply_memory_overrides(self.base, stored))  # the merged whole must hold, too
            return stored

        with self._lock:
            stored = self._store().update_value(*_SETTINGS_KEY, merge)
            settings = merged[-1]
            self._current, self._overrides = settings, stored
            self._fresh_until = self._clock() + self.ttl_s
            return settings


def open_state_store(plugins: Any, primary: Any, state_dir: Path) -> StateStore:
    """The deployment's state store: a plugin's (``memroute_state_store``), else ``state_dir/state.db``."""
    context = StateStoreContext(state_dir=state_dir, prepare_connection=plugins.prepare_connection)
    store = plugins.state_store(primary, context)
    if store is not None:
        if not isinstance(store, StateStore):
            from memroute.errors import PluginError

            raise PluginError(f"memroute_state_store returned {type(store).__name__}, expected a StateStore")
        return store
    return SqliteStateStore(state_dir / "state.db", prepare=plugins.prepare_connection)
