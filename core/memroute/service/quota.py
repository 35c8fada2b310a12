"""Per-tenant storage quotas: how many memories, and how many bytes of content and metadata, one tenant may hold
(``[limits] max_memories_per_tenant`` / ``max_bytes_per_tenant``; 0 is unlimited).

The count comes from the primary (one indexed count), the bytes from reading the tenant's memories, so both hold
across every process that shares the data. Neither is read on every write: a process remembers a tenant's usage
for :data:`USAGE_TTL_S`, adds what it writes itself, and reads the store again whenever a write would come within
:data:`RECHECK_FRACTION` of a limit — so a tenant far from its quota pays nothing, and one near it is checked
exactly. A write past a quota is refused whole (:class:`~memroute.errors.QuotaExceededError`, HTTP 403) before
anything is stored.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs

from memroute.errors import QuotaExceededError

__all__ = ["RECHECK_FRACTION", "USAGE_TTL_S", "TenantQuotas", "Usage", "memory_bytes"]

USAGE_TTL_S: Final = 60.0
RECHECK_FRACTION: Final = 0.9


def memory_bytes(content: str, metadata: Any) -> int:
    """What a memory costs against the bytes quota: its content and its metadata, as UTF-8 (JSON for metadata)."""
    size = len(content.encode("utf-8", "surrogatepass"))
    if metadata:
        size += len(json.dumps(metadata, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    return size


@attrs.define
class Usage:
    memories: int
    bytes: int
    read_at: float


class TenantQuotas:
    """Checks writes against the quotas (thread-safe). ``count(tenant)`` and ``scan(tenant)`` read the store: the
    number of the tenant's memories, and its memories (for their sizes)."""

    def __init__(self, *, max_memories: int, max_bytes: int, count: Callable[[str], int],
                 scan: Callable[[str], Iterable[Any]]) -> None:
        self.max_memories = max_memories
        self.max_bytes = max_bytes
        self._count = count
        self._scan = scan
        self._usage: dict[str, Usage] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.max_memories or self.max_bytes)

    def usage(self, tenant: str, *, fresh: bool = False) -> Usage:
        """The tenant's usage: remembered, or read now (``fresh``, or when older than :data:`USAGE_TTL_S`)."""
        now = time.monotonic()
        with self._lock:
            known = self._usage.get(tenant)
        if known is not None and not fresh and now - known.read_at < USAGE_TTL_S:
            return known
        memories = self._count(tenant) if self.max_memories else 0
        size = sum(memory_bytes(m.content, m.metadata) for m in self._scan(tenant)) if self.max_bytes else 0
        usage = Usage(memories=memories, bytes=size, read_at=now)
        with self._lock:
            self._usage[tenant] = usage
        return usage

    def check(self, tenant: str, writes: Sequence[tuple[str, Any]]) -> None:
        """Refuse ``writes`` (``(content, metadata)`` of each new memory) when they would take ``tenant`` past a
        quota; otherwise count them as written. An upsert of an existing key counts as a new memory until the
        usage is read again: the check errs on the side of the tenant's neighbours."""
        if not self.enabled or not writes:
            return
        adding = len(writes)
        size = sum(memory_bytes(content, metadata) for content, metadata in writes) if self.max_bytes else 0
        usage = self.usage(tenant)
        if self._near(usage, adding, size):
            usage = self.usage(tenant, fresh=True)
        if self.max_memories and usage.memories + adding > self.max_memories:
            raise QuotaExceededError(
                f"quota exceeded: this tenant holds {usage.memories} memories and may hold {self.max_memories} "
                f"([limits] max_memories_per_tenant); {adding} more would pass it", [("quota", "memories")])
        if self.max_bytes and usage.bytes + size > self.max_bytes:
            raise QuotaExceededError(
                f"quota exceeded: this tenant holds {usage.bytes} bytes of memories and may hold {self.max_bytes} "
                f"([limits] max_bytes_per_tenant); {size} more would pass it", [("quota", "bytes")])
        with self._lock:
            usage.memories += adding
            usage.bytes += size

    def _near(self, usage: Usage, adding: int, size: int) -> bool:
        return bool((self.max_memories and usage.memories + adding > self.max_memories * RECHECK_FRACTION)
                    or (self.max_bytes and usage.bytes + size > self.max_bytes * RECHECK_FRACTION))
