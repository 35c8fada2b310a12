"""A thread-safe LRU cache with a per-entry time to live, and hit/miss counters.

Used for the SQLite backend's get-by-id cache (60 s, 500 entries) and the embedding cache
(``MEMORY_EMBEDDING_CACHE_TTL_MS`` / ``MEMORY_EMBEDDING_CACHE_MAX``). A read refreshes recency (true LRU,
unlike the reference's FIFO); an expired entry is dropped when read.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["MISSING", "TTLCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MISSING: Any = object()
"""Returned by :meth:`TTLCache.get` for a key that is absent or expired."""


class TTLCache(Generic[K, V]):
    def __init__(self, max_entries: int, ttl_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 0 or ttl_seconds < 0:
            raise ValueError("max_entries and ttl_seconds must be >= 0")
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.ttl_seconds > 0

    def get(self, key: K) -> V:
        """The cached value, or :data:`MISSING`."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                self.misses += 1
                return MISSING
            expires, value = entry
            if self._clock() >= expires:
                del self._data[key]
                self.misses += 1
                return MISSING
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def set(self, key: K, value: V) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._data[key] = (self._clock() + self.ttl_seconds, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._data.clear()
            self.hits = 0
            self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "size": len(self._data), "max": self.max_entries}
