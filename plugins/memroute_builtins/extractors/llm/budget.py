"""Per-tenant budgets and usage of the ``llm`` extractor.

:class:`TenantBudget` is a one-minute sliding window per tenant over requests and tokens: a batch starts only
while the tenant is under both limits, so one chatty tenant cannot spend another's share of the model (or the
operator's bill); it is per process. :class:`Usage` counts what was spent and what went wrong, per tenant and
in total, for ``memroute status``, in a file every process on the machine shares.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from memroute.errors import MemrouteError

__all__ = ["TenantBudget", "Usage"]

log = logging.getLogger("memroute.extractors.llm")

_WINDOW_S = 60.0


class TenantBudget:
    """``requests_per_minute`` / ``tokens_per_minute`` per tenant (0: unlimited)."""

    def __init__(self, requests_per_minute: int, tokens_per_minute: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._clock = clock
        self._lock = threading.Lock()
        self._spent: dict[str, deque[tuple[float, int]]] = {}

    def _window(self, tenant: str, now: float) -> deque[tuple[float, int]]:
        window = self._spent.setdefault(tenant, deque())
        while window and window[0][0] <= now - _WINDOW_S:
            window.popleft()
        return window

    def allows(self, tenant: str) -> bool:
        """Whether ``tenant`` may send one more request now."""
        with self._lock:
            window = self._window(tenant, self._clock())
            if self.requests_per_minute and len(window) >= self.requests_per_minute:
                return False
            return not (self.tokens_per_minute and sum(tokens for _, tokens in window) >= self.tokens_per_minute)

    def spend(self, tenant: str, tokens: int) -> None:
        """Record one request of ``tenant`` that cost ``tokens``."""
        with self._lock:
            now = self._clock()
            self._window(tenant, now).append((now, tokens))
            if len(self._spent) > 10_000:  # forget idle tenants
                for idle in [t for t, w in self._spent.items() if not self._window(t, now)]:
                    del self._spent[idle]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_usage (
    api_key_id TEXT NOT NULL,   -- '' for an explicit `memroute extract` (no tenant)
    grp TEXT NOT NULL,          -- usage | operations | dropped | failures
    name TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (api_key_id, grp, name)
) WITHOUT ROWID;
"""
_USAGE = ("requests", "prompt_tokens", "completion_tokens")
_GROUPS = ("operations", "dropped", "failures")


def _blank() -> dict[str, Any]:
    return {**dict.fromkeys(_USAGE, 0), **{group: {} for group in _GROUPS}}


class Usage:
    """Requests, tokens, operations, dropped answers and failures, per tenant, kept in a small SQLite file in the
    data directory: every process of the deployment on this machine adds to the same counters, so ``memroute
    status`` in another process (or after a restart) shows them."""

    def __init__(self, path: Path) -> None:
        from memroute.deployment.db import ThreadConnections

        self.path = path
        self._connections = ThreadConnections(path, on_open=lambda connection: connection.execute(_SCHEMA))
        self._connections.get()  # a bad path fails when the extractor is built, not on its first request

    def _add(self, tenant: str | None, rows: list[tuple[str, str, int]]) -> None:
        """Counting never breaks extraction: a counter that cannot be written (the file closed or locked past the
        busy timeout) is logged and lost."""
        try:
            with self._connections.transaction() as connection:
                connection.executemany(
                    "INSERT INTO llm_usage (api_key_id, grp, name, n) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (api_key_id, grp, name) DO UPDATE SET n = n + excluded.n",
                    [(tenant or "", group, name, by) for group, name, by in rows if by > 0])
        except (MemrouteError, apsw.Error) as exc:
            log.warning("memroute: the llm extractor's usage counters in %s could not be written: %s", self.path, exc)

    def request(self, tenant: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        self._add(tenant, [("usage", "requests", 1), ("usage", "prompt_tokens", prompt_tokens),
                           ("usage", "completion_tokens", completion_tokens)])

    def count(self, tenant: str | None, group: str, key: str, by: int = 1) -> None:
        """``group``: ``operations`` (add / update / delete / none), ``dropped`` (invalid answers, refused ids)
        or ``failures`` (timeout, rate_limited, budget, ...)."""
        if group not in _GROUPS:
            raise ValueError(f"unknown usage group {group!r}")
        self._add(tenant, [(group, key, by)])

    def _rows(self, tenant: str | None) -> list[tuple[str, str, str, int]]:
        where, args = ("WHERE api_key_id = ?", (tenant,)) if tenant is not None else ("", ())
        return list(self._connections.get().execute(
            f"SELECT api_key_id, grp, name, n FROM llm_usage {where} ORDER BY api_key_id, grp, name", args))

    def of_tenant(self, tenant: str) -> dict[str, Any]:
        """One tenant's counters (zeros when it has none)."""
        row = _blank()
        for _tenant, group, name, n in self._rows(tenant):
            _put(row, group, name, n)
        return row

    def snapshot(self) -> dict[str, Any]:
        """The totals, and each tenant's counters under ``tenants``."""
        total = _blank()
        tenants: dict[str, dict[str, Any]] = {}
        for tenant, group, name, n in self._rows(None):
            _put(total, group, name, n)
            if tenant:
                _put(tenants.setdefault(tenant, _blank()), group, name, n)
        return {**total, "tenants": tenants}

    def close(self) -> None:
        self._connections.close()


def _put(row: dict[str, Any], group: str, name: str, n: int) -> None:
    if group == "usage":
        row[name] = row.get(name, 0) + n
    else:
        row[group][name] = row[group].get(name, 0) + n
