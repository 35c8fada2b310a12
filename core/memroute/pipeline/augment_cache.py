"""Reusing a retrieval for a repeated message: what ``augment`` retrieved for one tenant, query and settings,
kept while the tenant's data is unchanged.

An agent's tool loop sends the same conversation again after every tool call, so ``augment`` sees the same last
user message many times in a row; retrieving again finds the same memories. The entry is keyed on everything a
search reads besides the data — tenant, query text, session scope and the ``[memory]`` settings in effect — and
stamped with the tenant's **data version** (:class:`~memroute.interfaces.DataVersions`), which every write that
changes what a search reads moves, in any process (a counter row the primary's own triggers keep). Reading the
version is one indexed lookup per request; a different version is a miss.

What is kept is the ranking (which memories, in which order, with their scores). On a hit the memories are read
again (one ``get_many``), so the block shows them as they are now (a re-stated fact's date, a new category), and
each is checked against the tenant's filters at the current time: one that has expired or left the retention
window since makes the entry a miss. Entries also expire after ``ttl_s`` (30 s), which bounds how long the one
thing the version does not see can matter: a candidate that was *not* injected expiring meanwhile (it could have
shifted the fusion's normalisation). Nothing is reused when there is no version to trust (a primary without
``data_versions``, a fallback serving, replication owed), for degraded or fallback-served results, or with
typed decay on (it reads access telemetry, which moves no version).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import attrs

from memroute.models import Memory, SearchHit, SearchQuery, SearchResult

__all__ = ["AugmentCache"]


@attrs.frozen
class _Entry:
    version: int
    expires: float
    result: SearchResult


class AugmentCache:
    """A bounded LRU of retrievals (see the module docstring). Thread-safe; one per service."""

    def __init__(self, version: Callable[[str], int | None], fetch: Callable[[Sequence[str], str], dict[str, Memory]],
                 *, size: int = 1024, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        """``version(tenant)``: the tenant's data version, or ``None`` when there is none to trust;
        ``fetch(ids, tenant)``: those of the memories with these ids that belong to ``tenant``, as they are now
        (the tenant is also in every key, so an entry never serves another tenant; reading by tenant is the
        second wall, and what lets a backend sharded by tenant read one shard)."""
        self._version = version
        self._fetch = fetch
        self.size = size
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def version(self, tenant: str) -> int | None:
        """Read before searching: an entry stored under it is stale as soon as a write lands, even one that
        lands while the search runs."""
        return self._version(tenant)

    def get(self, key: Hashable, version: int | None, scope: SearchQuery, *,
            count_miss: bool = True) -> SearchResult | None:
        """The retrieval stored for ``key`` under ``version``, with its memories read again and each admitted by
        ``scope`` (the tenant's filters now); ``None`` when there is none or it is stale (counted as a miss
        unless ``count_miss`` is false: a caller that only looks before it searches)."""
        if version is None:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None or entry.version != version or entry.expires <= self._clock():
            if count_miss:
                self._count(hit=False)
            return None
        hits = entry.result.hits
        current = self._fetch([hit.memory.id for hit in hits], scope.api_key_id) if hits else {}
        fresh = []
        for hit in hits:
            memory = current.get(hit.memory.id)
            if memory is None or not scope.admits(memory):
                if count_miss:
                    self._count(hit=False)
                return None
            fresh.append(SearchHit(memory=memory, score=hit.score, tier=hit.tier, ranks=hit.ranks,
                                   leg_scores=hit.leg_scores))
        self._count(hit=True)
        return SearchResult(hits=tuple(fresh), provenance=entry.result.provenance)

    def put(self, key: Hashable, version: int | None, result: SearchResult) -> None:
        """Keep ``result`` (searched after ``version`` was read), unless it was degraded or served by a
        fallback: a later search may well be served better."""
        if version is None or result.provenance.degraded or result.provenance.fallback:
            return
        entry = _Entry(version, self._clock() + self.ttl_s, result)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def _count(self, *, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses,
                    "ttl_s": self.ttl_s}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
