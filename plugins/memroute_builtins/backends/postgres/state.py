"""The deployment's shared state in PostgreSQL: API keys, runtime settings and maintenance leases.

When the primary backend is ``postgres``, the ``memroute_state_store`` hook (in
:mod:`memroute_builtins.backends.postgres.backend`) returns a :class:`PostgresStateStore` over the primary's
database, schema and connection pool, so every ``memroute serve`` process on the database — on any host —
authenticates against the same keys: a key revoked through one is refused by all the others on their next
request (nothing is cached). Lease expiry is judged by the database's clock, not by each host's.

The tables (``api_keys``, ``state_values``, ``leases``) are schema version 2 of the backend's migrations. They
hold deployment data, not a tenant's memories, so they carry no row-level security policy.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import attrs

from memroute.deployment.keys import ApiKey, KeyStore, hash_secret, new_key_id, new_secret
from memroute.deployment.state import StateStore
from memroute.errors import ConflictError, NotFoundError
from memroute.models import utcnow
from memroute_builtins.backends.postgres.database import ALL_TENANTS, Database

__all__ = ["PostgresKeyStore", "PostgresStateStore", "state_migration"]


def state_migration(schema: str) -> str:
    s = f'"{schema}"'
    return f"""
        CREATE TABLE {s}.api_keys (
            id           text PRIMARY KEY,
            name         text NOT NULL,
            tenant       text NOT NULL,
            scopes       text[] NOT NULL,
            secret_hash  text NOT NULL UNIQUE,
            created_at   timestamptz NOT NULL,
            last_used_at timestamptz,
            revoked_at   timestamptz,
            replaced_by  text
        );
        CREATE TABLE {s}.state_values (
            namespace  text NOT NULL,
            name       text NOT NULL,
            value      jsonb NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, name)
        );
        CREATE TABLE {s}.leases (
            name       text PRIMARY KEY,
            holder     text NOT NULL,
            expires_at timestamptz NOT NULL
        );
    """


_COLUMNS = "id, name, tenant, scopes, created_at, last_used_at, revoked_at"


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(timezone.utc)


def _key(row: tuple[Any, ...]) -> ApiKey:
    key_id, name, tenant, scopes, created, used, revoked = row
    return ApiKey.from_stored(id=key_id, name=name, tenant=tenant, scopes=frozenset(scopes),
                              created_at=_utc(created), last_used_at=_utc(used), revoked_at=_utc(revoked))


class PostgresKeyStore(KeyStore):
    """Keys in ``"<schema>".api_keys``. Every :meth:`authenticate` is one indexed read (by the secret's hash)."""

    def __init__(self, db: Database, schema: str) -> None:
        super().__init__()
        self._db = db
        self._table = f'"{schema}".api_keys'

    def _tx(self, action: str) -> Any:
        return self._db.transaction(action, tenant=ALL_TENANTS)

    def _insert(self, key: ApiKey, secret_hash: str) -> None:
        with self._tx("create an API key") as conn:
            conn.execute(f"INSERT INTO {self._table} (id, name, tenant, scopes, secret_hash, created_at) "
                         "VALUES (%s, %s, %s, %s, %s, %s)",
                         (key.id, key.name, key.stored_tenant, sorted(key.scopes), secret_hash, key.created_at))

    def list(self, *, include_revoked: bool = True) -> builtins.list[ApiKey]:
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        with self._tx("list API keys") as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM {self._table}{where} ORDER BY created_at, id").fetchall()
        return [_key(row) for row in rows]

    def get(self, key_id: str) -> ApiKey | None:
        if not isinstance(key_id, str):
            return None
        with self._tx("read an API key") as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM {self._table} WHERE id = %s", (key_id,)).fetchone()
        return None if row is None else _key(row)

    def _require(self, conn: Any, key_id: str) -> ApiKey:
        row = conn.execute(f"SELECT {_COLUMNS} FROM {self._table} WHERE id = %s FOR UPDATE", (key_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no API key with id {key_id!r}")
        return _key(row)

    def revoke(self, key_id: str) -> ApiKey:
        with self._tx("revoke an API key") as conn:
            key = self._require(conn, key_id)
            if key.revoked:
                return key
            row = conn.execute(f"UPDATE {self._table} SET revoked_at = %s WHERE id = %s RETURNING {_COLUMNS}",
                               (utcnow(), key_id)).fetchone()
        return _key(row)

    def rotate(self, key_id: str) -> tuple[ApiKey, str]:
        with self._tx("rotate an API key") as conn:
            old = self._require(conn, key_id)  # FOR UPDATE: two rotations of one key cannot both succeed
            if old.revoked:
                raise ConflictError(f"API key {key_id!r} is revoked; create a new key instead")
            new = attrs.evolve(old, id=new_key_id(), created_at=utcnow(), last_used_at=None)
            secret = new_secret()
            conn.execute(f"UPDATE {self._table} SET revoked_at = %s, replaced_by = %s WHERE id = %s",
                         (new.created_at, new.id, old.id))
            conn.execute(f"INSERT INTO {self._table} (id, name, tenant, scopes, secret_hash, created_at) "
                         "VALUES (%s, %s, %s, %s, %s, %s)",
                         (new.id, new.name, new.stored_tenant, sorted(new.scopes), hash_secret(secret), new.created_at))
        return new, secret

    def _find(self, secret_hash: str) -> tuple[ApiKey, str] | None:
        with self._tx("authenticate an API key") as conn:
            row = conn.execute(f"SELECT {_COLUMNS}, secret_hash FROM {self._table} WHERE secret_hash = %s",
                               (secret_hash,)).fetchone()
        return None if row is None else (_key(row[:-1]), str(row[-1]))

    def _touch(self, key_id: str, when: datetime) -> None:
        with self._tx("record an API key's use") as conn:
            conn.execute(f"UPDATE {self._table} SET last_used_at = %s WHERE id = %s", (when, key_id))


class PostgresStateStore(StateStore):
    """Keys, values and leases in the postgres primary's schema, over its connection pool."""

    def __init__(self, db: Database, schema: str) -> None:
        self._db = db
        self._schema = schema
        s = f'"{schema}"'
        self._values = f"{s}.state_values"
        self._leases = f"{s}.leases"
        self._db.open()  # reference-counted: shared with the backend
        self._open = True
        self._keys = PostgresKeyStore(db, schema)

    @property
    def keys(self) -> KeyStore:
        return self._keys

    def get_value(self, namespace: str, name: str) -> Any | None:
        with self._db.transaction("read a state value", tenant=ALL_TENANTS) as conn:
            row = conn.execute(f"SELECT value FROM {self._values} WHERE namespace = %s AND name = %s",
                               (namespace, name)).fetchone()
        return None if row is None else row[0]

    def put_value(self, namespace: str, name: str, value: Any) -> None:
        from psycopg.types.json import Jsonb

        with self._db.transaction("write a state value", tenant=ALL_TENANTS) as conn:
            conn.execute(f"INSERT INTO {self._values} (namespace, name, value) VALUES (%s, %s, %s) "
                         "ON CONFLICT (namespace, name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
                         (namespace, name, Jsonb(value)))

    def delete_values(self, namespace: str, name_prefix: str) -> int:
        with self._db.transaction("delete state values", tenant=ALL_TENANTS) as conn:
            cursor = conn.execute(f"DELETE FROM {self._values} WHERE namespace = %s AND left(name, %s) = %s",
                                  (namespace, len(name_prefix), name_prefix))
            return int(cursor.rowcount)

    def update_value(self, namespace: str, name: str, change: Callable[[Any | None], Any]) -> Any:
        """One transaction holding a transaction-scoped advisory lock on ``(namespace, name)`` from the read
        to the write (a row lock cannot guard a value not stored yet), so concurrent updates serialise."""
        from psycopg.types.json import Jsonb

        with self._db.transaction("update a state value", tenant=ALL_TENANTS) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                         (f"{self._values}/{namespace}/{name}",))  # a collision only serialises more
            row = conn.execute(f"SELECT value FROM {self._values} WHERE namespace = %s AND name = %s",
                               (namespace, name)).fetchone()
            value = change(None if row is None else row[0])
            conn.execute(f"INSERT INTO {self._values} (namespace, name, value) VALUES (%s, %s, %s) "
                         "ON CONFLICT (namespace, name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
                         (namespace, name, Jsonb(value)))
        return value

    def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        # The database's clock decides expiry: hosts whose clocks disagree still agree on who holds a lease.
        with self._db.transaction("take a lease", tenant=ALL_TENANTS) as conn:
            row = conn.execute(
                f"INSERT INTO {self._leases} (name, holder, expires_at) "
                "VALUES (%s, %s, clock_timestamp() + make_interval(secs => %s)) ON CONFLICT (name) DO UPDATE SET "
                f"holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at WHERE {self._leases}.holder = "
                f"EXCLUDED.holder OR {self._leases}.expires_at < clock_timestamp() RETURNING holder",
                (name, holder, float(ttl_s))).fetchone()
        return row is not None and row[0] == holder

    def release_lease(self, name: str, holder: str) -> None:
        with self._db.transaction("release a lease", tenant=ALL_TENANTS) as conn:
            conn.execute(f"DELETE FROM {self._leases} WHERE name = %s AND holder = %s", (name, holder))

    def ping(self) -> None:
        with self._db.transaction("reach the state store", tenant=ALL_TENANTS) as conn:
            conn.execute(f"SELECT 1 FROM {self._leases} LIMIT 1").fetchall()

    def describe(self) -> dict[str, Any]:
        return {"type": "postgres", "where": self._db.where, "schema": self._schema}

    def close(self) -> None:
        if self._open:
            self._open = False
            self._db.close()
