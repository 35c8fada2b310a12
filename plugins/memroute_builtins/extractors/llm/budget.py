"""Per-tenant budgets and usage of the ``llm`` extractor.

:class:`TenantBudget` is a one-minute sliding window per tenant over requests and tokens: a batch starts only
while the tenant is under both limits, so one chatty tenant cannot spend another's share of the model (or the
operator's bill). :class:`Usage` counts what was spent and what went wrong, per tenant and in total, for
``memroute status``. Both are per process.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["TenantBudget", "Usage"]

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


def _bump(counts: dict[str, int], key: str, by: int = 1) -> None:
    counts[key] = counts.get(key, 0) + by


class Usage:
    """Requests, tokens, operations, dropped answers and failures: per tenant and in total."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total: dict[str, Any] = self._blank()
        self._tenants: dict[str, dict[str, Any]] = {}

    @staticmethod
    def _blank() -> dict[str, Any]:
        return {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "operations": {}, "dropped": {},
                "failures": {}}

    def _rows(self, tenant: str | None) -> list[dict[str, Any]]:
        rows = [self._total]
        if tenant is not None:
            rows.append(self._tenants.setdefault(tenant, self._blank()))
        return rows

    def request(self, tenant: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            for row in self._rows(tenant):
                row["requests"] += 1
                row["prompt_tokens"] += prompt_tokens
                row["completion_tokens"] += completion_tokens

    def count(self, tenant: str | None, group: str, key: str, by: int = 1) -> None:
        """``group``: ``operations`` (add / update / delete / none), ``dropped`` (invalid answers, refused ids)
        or ``failures`` (timeout, rate_limited, budget, ...)."""
        if by <= 0:
            return
        with self._lock:
            for row in self._rows(tenant):
                _bump(row[group], key, by)

    def of_tenant(self, tenant: str) -> dict[str, Any]:
        """One tenant's counters (zeros when it has none)."""
        with self._lock:
            row = self._tenants.get(tenant) or self._blank()
            return {k: dict(v) if isinstance(v, dict) else v for k, v in row.items()}

    def snapshot(self) -> dict[str, Any]:
        def copy(row: dict[str, Any]) -> dict[str, Any]:
            return {k: dict(v) if isinstance(v, dict) else v for k, v in row.items()}

        with self._lock:
            return {**copy(self._total), "tenants": {t: copy(r) for t, r in sorted(self._tenants.items())}}
