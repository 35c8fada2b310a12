"""Input checks, conversions and the centred-query ranking shared by the built-in vector stores.

The stores validate a whole batch before writing anything, so a bad item never leaves a partial write.
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from memroute.errors import ValidationError, VectorStoreError
from memroute.interfaces import VectorItem

__all__ = [
    "CENTER_PRIOR", "CENTER_REFRESH", "MAX_K", "TenantCenters", "canonical_uuid", "center_of", "centered_probe",
    "check_items", "check_k", "check_vector", "check_vectors", "unix_micros", "unix_seconds", "uuid_bytes",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

MAX_K = 4096
"""The largest ``k`` a query may ask for (sqlite-vec's own KNN limit; Qdrant accepts it too)."""


_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def canonical_uuid(value: Any, field: str = "memory_id") -> str:
    """The canonical lowercase hyphenated form of a UUID string, or :class:`ValidationError`."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a UUID string, got {type(value).__name__}", [(field, "type")])
    if _CANONICAL.fullmatch(value):
        return value  # already canonical (memroute's own ids): skip parsing it into a UUID and back
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ValidationError(f"{field} must be a UUID, got {value!r}", [(field, "invalid")]) from None


def uuid_bytes(canonical: str) -> bytes:
    """The 16 bytes of a canonical UUID string (as ``uuid.UUID(canonical).bytes``, without the object)."""
    return bytes.fromhex(canonical.replace("-", ""))


def check_vector(vector: Any, dimensions: int, field: str = "vector") -> np.ndarray:
    """``vector`` as a 1-D, finite, non-zero, L2-normalised float32 array of ``dimensions`` components.

    A wrong length is a :class:`VectorStoreError` (the index was built for another model); anything else
    malformed is a :class:`ValidationError`. Rows are re-normalised: callers promise unit vectors, but a
    float32 round trip through another library can drift, and cosine scores must stay in [-1, 1].
    """
    try:
        array = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{field} must be a numeric array: {exc}", [(field, "type")]) from None
    if array.ndim != 1:
        raise ValidationError(f"{field} must be one-dimensional, got shape {array.shape}", [(field, "shape")])
    if array.shape[0] != dimensions:
        raise VectorStoreError(
            f"{field} has {array.shape[0]} dimensions but the index holds {dimensions}-d vectors: the embedding "
            "model changed without a re-bind; bind the new signature and reindex"
        )
    # np.linalg.norm's own computation for a 1-D array, without its dispatch: sqrt(x . x) in float32. A NaN or
    # infinite component makes it non-finite, so the components are checked only when it is.
    flat = array.ravel(order="K")
    norm = float(np.sqrt(flat.dot(flat)))
    if norm == 0.0 or not math.isfinite(norm):
        if not np.isfinite(array).all():
            raise ValidationError(f"{field} contains NaN or infinity", [(field, "invalid")])
        raise ValidationError(f"{field} is the zero vector: it has no direction to compare", [(field, "invalid")])
    return array / np.float32(norm)


def check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValidationError(f"k must be an integer in [1, {MAX_K}], got {k!r}", [("k", "range")])
    return k


def check_items(items: Sequence[VectorItem], dimensions: int) -> list[tuple[VectorItem, str, np.ndarray]]:
    """Validate a batch: ``(item, canonical id, unit vector)`` per item. Raises before anything is written.

    When one id appears twice in a batch, the last one wins (as it would across two calls).
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise ValidationError("items must be a sequence of VectorItem", [("items", "type")])
    checked: dict[str, tuple[VectorItem, str, int]] = {}
    for index, item in enumerate(items):
        where = f"items[{index}]"
        if not isinstance(item, VectorItem):
            raise ValidationError(f"{where} must be a VectorItem, got {type(item).__name__}", [(where, "type")])
        memory_id = canonical_uuid(item.memory_id, f"{where}.memory_id")
        if not isinstance(item.api_key_id, str) or not item.api_key_id:
            raise ValidationError(f"{where}.api_key_id must be a non-empty string", [(f"{where}.api_key_id", "empty")])
        if item.session_id is not None and not isinstance(item.session_id, str):
            raise ValidationError(f"{where}.session_id must be a string or None", [(f"{where}.session_id", "type")])
        for name in ("created_at", "expires_at"):
            value = getattr(item, name)
            if (value is not None or name == "created_at") and (
                not isinstance(value, datetime) or value.tzinfo is None
            ):
                raise ValidationError(f"{where}.{name} must be an aware datetime", [(f"{where}.{name}", "type")])
        checked.pop(memory_id, None)
        checked[memory_id] = (item, memory_id, index)
    vectors = check_vectors([item.vector for item in items], dimensions)
    return [(item, memory_id, vectors[index]) for item, memory_id, index in checked.values()]


def check_vectors(vectors: Sequence[Any], dimensions: int) -> np.ndarray:
    """:func:`check_vector` for a batch at once: one matrix of unit rows. A batch that fails the matrix
    checks is checked row by row, so the error names the first bad item exactly as :func:`check_vector`
    would (``items[i].vector``). Checking row by row was a fifth of static indexing time."""
    if not vectors:
        return np.zeros((0, dimensions), dtype=np.float32)
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        matrix = None
    norms = None
    if matrix is not None and matrix.ndim == 2 and matrix.shape[1] == dimensions and np.isfinite(matrix).all():
        norms = np.linalg.norm(matrix, axis=1)
    if matrix is None or norms is None or not (norms > 0).all() or not np.isfinite(norms).all():
        return np.stack([check_vector(vector, dimensions, f"items[{index}].vector")
                         for index, vector in enumerate(vectors)])
    return matrix / norms[:, None]


def unix_micros(value: datetime) -> int:
    """Microseconds since the epoch: exact for Python datetimes, so boundary comparisons match
    :meth:`memroute.models.SearchQuery.admits` to the microsecond."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def unix_seconds(value: datetime) -> float:
    return unix_micros(value) / 1_000_000


# --- centred-query ranking -------------------------------------------------------------------------------

CENTER_PRIOR = 10
"""Centring shrinks the mean toward zero by ``n / (n + CENTER_PRIOR)``: a tenant with a handful of memories
is barely centred (its mean says little about the model's bias), one with hundreds fully."""
CENTER_REFRESH = 0.1
"""A tenant's center is recomputed once its row count has changed by this share since it was computed."""


def center_of(vectors: np.ndarray) -> np.ndarray:
    """The (shrunk) mean of unit ``vectors``: the direction every embedding of this tenant shares."""
    n = vectors.shape[0]
    if n == 0:
        return np.zeros(vectors.shape[1], dtype=np.float32)
    return (vectors.mean(axis=0) * (n / (n + CENTER_PRIOR))).astype(np.float32)


def centered_probe(probe: np.ndarray, middle: np.ndarray) -> np.ndarray | None:
    """The unit ``probe - middle``: the query with the tenant's shared direction taken out, or ``None`` when
    nothing is left of it (the query *is* the center).

    Every store with ``center = true`` ranks by each memory's cosine with this vector (only the query moves,
    so a store that ranks on a server — Qdrant, pgvector — runs its ordinary cosine search with it)."""
    query = probe - middle
    flat = query.ravel(order="K")
    norm = float(np.sqrt(flat.dot(flat)))  # np.linalg.norm's own computation, as in check_vector
    return None if norm == 0.0 else (query / norm).astype(np.float32, copy=False)


class TenantCenters:
    """Each tenant's mean vector for stores that rank on a server (Qdrant, pgvector), computed there on
    demand and cached in this process.

    ``compute(api_key_id)`` returns ``(mean of the tenant's unit vectors, count)``; ``count(api_key_id)``
    the tenant's vector count, a cheap query. A cached center is used until this process has written (or
    deleted) more than :data:`CENTER_REFRESH` of the tenant's count since it was computed; every
    ``check_seconds`` the count is asked again, so other processes' writes move it too. A tenant's mean moves
    slowly: a center a few writes old ranks the same."""

    def __init__(self, compute: Callable[[str], tuple[np.ndarray | None, int]], count: Callable[[str], int],
                 *, check_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._compute = compute
        self._count = count
        self.check_seconds = check_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[np.ndarray | None, int, float, int]] = {}
        """``api_key_id -> (center, count when computed, last checked, writes since)``."""
        self.computed = 0

    def get(self, api_key_id: str) -> np.ndarray | None:
        """The tenant's shrunk mean, or ``None`` when it holds no vectors."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(api_key_id)
        if entry is not None:
            center, n, checked, writes = entry
            fresh = writes <= CENTER_REFRESH * max(n, 1)
            if fresh and now - checked < self.check_seconds:
                return center
            if fresh and abs(self._count(api_key_id) - n) <= CENTER_REFRESH * max(n, 1):
                with self._lock:
                    self._entries[api_key_id] = (center, n, now, writes)
                return center
        mean, n = self._compute(api_key_id)
        center = None if mean is None or n == 0 else (np.asarray(mean, dtype=np.float32) * (n / (n + CENTER_PRIOR)))
        with self._lock:
            self._entries[api_key_id] = (center, n, now, 0)
            self.computed += 1
        return center

    def wrote(self, api_key_ids: Sequence[str | None]) -> None:
        """Count writes against the tenants' centers (``None``: a write whose tenant is unknown, a delete by
        id, which counts against every cached tenant)."""
        with self._lock:
            for api_key_id in api_key_ids:
                targets = list(self._entries) if api_key_id is None else [api_key_id]
                for key in targets:
                    entry = self._entries.get(key)
                    if entry is not None:
                        center, n, checked, writes = entry
                        self._entries[key] = (center, n, checked, writes + 1)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
