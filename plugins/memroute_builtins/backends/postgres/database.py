"""Connections to PostgreSQL the way memroute's plugins use them: one psycopg pool, one transaction per call,
the tenant set in that transaction, errors translated to memroute's.

Shared by the ``postgres`` backend, the ``pgvector`` store and the PostgreSQL state store, so a process holds one
pool per database. psycopg and psycopg_pool are imported here, and this module is imported only by the
plugins' factories: memroute without the ``postgres`` extra never loads them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import attrs

from memroute.errors import BackendError, BackendUnavailableError, ConflictError, MemrouteError, ValidationError

__all__ = ["ALL_TENANTS", "Database", "DatabaseSettings", "import_psycopg", "redact_dsn"]

INSTALL_HINT: Final = "pip install 'memroute[postgres]'"


class _AllTenants:
    """The scope of an operation addressed by memory id (or an explicit all-tenant operator call)."""

    def __repr__(self) -> str:
        return "ALL_TENANTS"


ALL_TENANTS: Final = _AllTenants()


def import_psycopg() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, or :class:`BackendUnavailableError` naming the install command."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the PostgreSQL backend and the pgvector store need psycopg 3 and psycopg-pool ({exc.name} is "
            f"missing): {INSTALL_HINT}") from exc
    return psycopg, psycopg_pool


_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@]*@")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (for messages, status and logs)."""
    text = _PASSWORD_IN_URL.sub(r"\1***@", dsn)
    text = _PASSWORD_KV.sub(r"\1***", text)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", text)


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    from memroute.errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{attribute.name}: must be a positive number, got {value!r}", [(attribute.name, "range")])


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    from memroute.errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{attribute.name}: must be an integer >= 0, got {value!r}", [(attribute.name, "range")])


_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_schema_name(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    from memroute.errors import ConfigError

    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise ConfigError(
            f"{attribute.name}: must be a lowercase SQL identifier (letters, digits, _; at most 63), got {value!r}",
            [(attribute.name, "invalid")])


def check_dsn(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    from memroute.errors import ConfigError

    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{attribute.name}: required: a PostgreSQL connection string such as "
            "'postgresql://memroute@127.0.0.1:5432/memroute' (or \"${DATABASE_URL}\")", [(attribute.name, "missing")])


@attrs.frozen(kw_only=True)
class DatabaseSettings:
    """How a plugin connects: the options every PostgreSQL component shares."""

    dsn: str = attrs.field(validator=check_dsn)
    pool_min_size: int = attrs.field(default=1, validator=_non_negative)
    pool_max_size: int = attrs.field(default=10, validator=_positive)
    connect_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    pool_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    statement_timeout_ms: int = attrs.field(default=30_000, validator=_non_negative)
    prepared_statements: bool = True
    application_name: str = "memroute"


class Database:
    """A connection pool plus :meth:`transaction`: one transaction, with the tenant scope set inside it."""

    def __init__(self, settings: DatabaseSettings, *, component: str) -> None:
        self.settings = settings
        self.component = component
        self.where = f"{component} ({redact_dsn(settings.dsn)})"
        self._psycopg, self._pool_module = import_psycopg()
        self._pool: Any = None
        self._lock = threading.Lock()
        self._users = 0

    # --- lifecycle ---------------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the pool and wait for one connection (so a wrong DSN fails here, with a clear message)."""
        with self._lock:
            self._users += 1
            if self._pool is not None:
                return
            s = self.settings
            if s.pool_min_size > s.pool_max_size:
                from memroute.errors import ConfigError

                raise ConfigError(f"pool_min_size ({s.pool_min_size}) is larger than pool_max_size ({s.pool_max_size})",
                                  [("pool_min_size", "range")])
            options = "-c timezone=UTC"
            if s.statement_timeout_ms:
                options += f" -c statement_timeout={int(s.statement_timeout_ms)}"
            kwargs: dict[str, Any] = {
                "autocommit": False, "connect_timeout": max(1, round(s.connect_timeout_s)),
                "application_name": s.application_name, "options": options,
                "prepare_threshold": 5 if s.prepared_statements else None,
            }
            pool = self._pool_module.ConnectionPool(
                s.dsn, min_size=s.pool_min_size, max_size=s.pool_max_size, kwargs=kwargs, open=False,
                timeout=s.pool_timeout_s, name=self.component, reconnect_timeout=0,
            )
            try:
                pool.open(wait=True, timeout=s.connect_timeout_s + 1)
            except Exception as exc:
                pool.close(timeout=0)
                self._users -= 1
                raise BackendUnavailableError(
                    f"{self.where}: cannot connect to PostgreSQL: {_cause(exc)}. Check that the server is running "
                    "and reachable, and that the dsn (host, port, database, user, password) is right.",
                    backend=self.component) from exc
            self._pool = pool

    def close(self) -> None:
        """Close the pool once every user that opened it has closed it."""
        with self._lock:
            if self._users > 0:
                self._users -= 1
            if self._users > 0 or self._pool is None:
                return
            pool, self._pool = self._pool, None
        pool.close(timeout=5)

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    def stats(self) -> dict[str, Any]:
        pool = self._pool
        if pool is None:
            return {"open": False}
        stats = pool.get_stats()
        return {"open": True, "size": stats.get("pool_size"), "available": stats.get("pool_available"),
                "waiting": stats.get("requests_waiting", 0), "max_size": self.settings.pool_max_size}

    # --- transactions ------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, action: str, *, tenant: Any) -> Iterator[Any]:
        """``with db.transaction("list memories", tenant="key-a") as conn:`` — one transaction.

        ``tenant`` is the ``api_key_id`` the transaction acts for, or :data:`ALL_TENANTS` for operations
        addressed by memory id (the interface gives no tenant there; the service checks ownership above) and
        explicit all-tenant operator calls. Row-level security admits only that tenant's rows, so a query
        that forgot its own owner filter still sees nothing of another tenant's. It is set with ``SET LOCAL``
        (:meth:`set_tenant`): transaction-local, so it never outlives the transaction on a pooled connection
        (and works behind pgbouncer in transaction mode), and Citus can pass it on to its workers.

        A connection that died while idle in the pool (a server restart) fails on this first statement:
        it is discarded and the transaction starts again on a fresh one, so a restart costs no caller an
        error once the server is back. Errors after that become memroute errors naming ``action``.
        """
        pool = self._pool
        if pool is None:
            raise BackendUnavailableError(f"{self.where} is not open: call initialize() first (or it was closed).",
                                          backend=self.component)
        psycopg = self._psycopg
        conn = self._begin(pool, action, tenant)
        try:
            yield conn
            conn.commit()
        except BaseException as exc:
            if not conn.closed:
                try:
                    conn.rollback()
                except psycopg.Error:
                    pass
            if isinstance(exc, psycopg.Error):
                raise self.translate(exc, action) from exc
            raise
        finally:
            pool.putconn(conn)

    def _begin(self, pool: Any, action: str, tenant: Any) -> Any:
        psycopg = self._psycopg
        for attempt in range(3):
            try:
                conn = pool.getconn()
            except self._pool_module.PoolTimeout as exc:
                raise BackendUnavailableError(
                    f"{self.where}: no connection to PostgreSQL within {self.settings.pool_timeout_s:g} s while "
                    f"trying to {action}: the server is down or unreachable, or all {self.settings.pool_max_size} "
                    "pooled connections are busy (raise pool_max_size).", backend=self.component) from exc
            try:
                if tenant is ALL_TENANTS:
                    conn.execute("SET LOCAL memroute.all_tenants = 'on'", prepare=False)
                else:
                    self.set_tenant(conn, tenant)
                return conn
            except psycopg.OperationalError as exc:
                pool.putconn(conn)  # broken: the pool discards it
                if attempt == 2 or not conn.broken:
                    raise self.translate(exc, action) from exc
                pool.check()  # the server restarted: replace every dead idle connection before retrying
            except BaseException:
                pool.putconn(conn)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def set_tenant(self, conn: Any, tenant: Any) -> None:
        """Scope the rest of ``conn``'s transaction to ``tenant`` (the row-level security policy reads it).

        A ``SET LOCAL`` statement rather than ``set_config(…, true)``: both are transaction-local, but Citus
        sends ``SET LOCAL`` on to the workers that run a routed query (``citus.propagate_set_commands =
        'local'``), where the policy on each shard reads it, and never a function call's effect. The tenant is a
        quoted literal (a SET takes no bound parameter), sent unprepared: every tenant is another text."""
        if not isinstance(tenant, str) or not tenant:
            raise ValidationError("api_key_id: must be a non-empty string", [("api_key_id", "empty")])
        conn.execute(self.tenant_statement(tenant), prepare=False)

    def tenant_statement(self, tenant: str) -> Any:
        """``SET LOCAL memroute.api_key_id = '<tenant>'`` as a composed statement (see :meth:`set_tenant`)."""
        sql = self._psycopg.sql
        return sql.SQL("SET LOCAL memroute.api_key_id = {}").format(sql.Literal(tenant))

    def translate(self, exc: Exception, action: str) -> MemrouteError:
        """The memroute error for a psycopg error, with a message that says how to fix it."""
        errors = self._psycopg.errors
        where = f"{self.where}: cannot {action}"
        if isinstance(exc, errors.UniqueViolation):
            return ConflictError(f"{where}: {_cause(exc)}", backend=self.component)
        if isinstance(exc, errors.QueryCanceled):
            return BackendUnavailableError(
                f"{where}: the statement took longer than statement_timeout_ms "
                f"({self.settings.statement_timeout_ms} ms): {_cause(exc)}", backend=self.component)
        if isinstance(exc, (errors.InsufficientPrivilege, errors.UndefinedTable, errors.UndefinedObject)):
            return BackendUnavailableError(
                f"{where}: {_cause(exc)}. The role in the dsn needs to own (or be granted) memroute's schema; "
                "see docs/backends/postgres.md.", backend=self.component)
        if isinstance(exc, (errors.CharacterNotInRepertoire, errors.UntranslatableCharacter)):
            return ValidationError(f"{where}: PostgreSQL cannot store this text: {_cause(exc)}",
                                   [("(root)", "invalid text")])
        if isinstance(exc, (self._psycopg.OperationalError, self._psycopg.InterfaceError)):
            return BackendUnavailableError(
                f"{where}: lost the connection to PostgreSQL: {_cause(exc)}. memroute reconnects by itself once "
                "the server answers again.", backend=self.component)
        return BackendError(f"{where}: {type(exc).__name__}: {_cause(exc)}", backend=self.component)


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
