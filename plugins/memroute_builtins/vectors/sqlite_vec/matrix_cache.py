"""In-process matrices for the sqlite-vec store's large tenants: exact KNN by numpy instead of a vec0 scan.

A :class:`TenantMatrix` holds one tenant's vectors as a contiguous float32 matrix (``capacity x dim``, the
first ``n`` rows live) plus parallel arrays of SQLite rowids, 16-byte memory ids and their UUID texts,
session codes and created / expiry times (unix microseconds). Owner, session, expiry and retention are
boolean masks applied before the top-``k``, so ``k`` counts only admitted rows. The store keeps a matrix
in step with its own writes (append; swap-remove) and reloads it from SQLite when the tenant's generation
there changed (another process wrote). :class:`MatrixCache` bounds the total bytes with an LRU over tenants.

Locking: ``TenantMatrix.lock`` guards one matrix (searches and updates hold it, so a search never sees a
half-applied swap-remove); ``MatrixCache`` has its own lock for the LRU order. Order: the store's write
lock, then a matrix lock, then the cache lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from memroute_builtins.vectors.common import CENTER_PRIOR, CENTER_REFRESH, center_of, centered_probe
from memroute_builtins.vectors.hubness import HUB_REFRESH, hub_shrink, neighbourhood

__all__ = [
    "CENTER_PRIOR", "CENTER_REFRESH", "ID_BYTES", "ID_TEXT_BYTES", "MatrixCache", "TenantMatrix", "TenantRows",
    "center_of", "centered_probe", "centered_scores", "id_texts",
]

ID_BYTES = 16
"""A memory id is a UUID's 16 bytes."""
ID_TEXT_BYTES = 8 + 85
"""What a row's id text costs: its slot in an object array and a 36-character ``str`` (``sys.getsizeof``)."""
_NO_MATCH = -1
"""Session code of a session the tenant has never used: no row carries it."""
_NEVER = 2**63 - 1
"""The earliest expiry of a matrix without rows: later than any time."""
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_DIGIT_AT = np.array([at for at in range(36) if at not in (8, 13, 18, 23)])
"""Where a UUID's 32 hex digits go among its 36 characters (the rest are dashes)."""


def id_texts(memory_ids: np.ndarray) -> np.ndarray:
    """The canonical text (``str(uuid.UUID(bytes=...))``) of each 16-byte id of ``memory_ids`` (``n x 16``
    uint8), as an object array of ``str``. Built with array operations: 50 ms for 100,000 ids against 85 ms
    formatting them one by one, on a load of such a tenant that takes ~0.6 s."""
    count = memory_ids.shape[0]
    chars = np.full((count, 36), ord("-"), dtype=np.uint8)
    digits = np.empty((count, 32), dtype=np.uint8)
    digits[:, 0::2] = _HEX[memory_ids >> 4]
    digits[:, 1::2] = _HEX[memory_ids & 15]
    chars[:, _DIGIT_AT] = digits
    return chars.view("S36").reshape(count).astype("U36").astype(object)


_NO_SCORES = np.zeros(0, dtype=np.float32)
_NO_SCORES.flags.writeable = False


def _scores(vectors: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """``vectors @ probe`` on the calling thread. ``@`` hands a matrix-vector product to OpenBLAS's thread
    pool, whose workers sleep between the searches of a request path and must be woken (and scheduled) for
    each one: on a loaded 2-core machine that cost 11 ms p50 for 2,000 x 256 (15 ms for 20,000) where one
    thread takes 0.05 ms (0.9 ms). ``einsum`` without ``optimize`` never calls BLAS."""
    return np.einsum("ij,j->i", vectors, probe)


def centered_scores(vectors: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """Centred scores of ``probe`` against unit ``vectors`` (one tenant's rows): each row's cosine with the
    **centred query**, the query minus the rows' shared mean (:func:`center_of`), renormalised. An embedding
    model puts every text in a narrow cone (a static model more than most), so a short chat turn that shares
    only the cone is close to every question; the centred query keeps only what the question says beyond
    the cone. Only the query moves: the memories stay unit vectors (dividing by each memory's distance to
    the mean as well, the full centred cosine, favours the short chat turns that sit near the mean and lost
    on the quality benchmark's dev split), so any store can rank this way with an ordinary cosine search."""
    centred = centered_probe(probe, center_of(vectors))
    return np.asarray(_scores(vectors, probe if centred is None else centred), dtype=np.float32)


class TenantRows:
    """A batch of rows to load into or append to a :class:`TenantMatrix` (vectors already unit length)."""

    __slots__ = ("created", "expires", "memory_ids", "rowids", "sessions", "vectors")

    def __init__(self, rowids: np.ndarray, memory_ids: np.ndarray, vectors: np.ndarray, sessions: Sequence[str],
                 created: np.ndarray, expires: np.ndarray) -> None:
        self.rowids = rowids
        self.memory_ids = memory_ids
        self.vectors = vectors
        self.sessions = sessions
        self.created = created
        self.expires = expires

    def __len__(self) -> int:
        return int(self.rowids.shape[0])


class TenantMatrix:
    """One tenant's vectors and filter columns, searched exactly with one matrix-vector product."""

    def __init__(self, dimensions: int) -> None:
        self.lock = threading.Lock()
        self.dimensions = dimensions
        self.generation: int | None = None
        """The tenant's generation in SQLite that this matrix reflects; ``None``: not loaded (or invalid)."""
        self.n = 0
        self._earliest_expiry = _NEVER
        """No live row expires before this (a lower bound: removing rows does not raise it)."""
        self._session_codes: dict[str, int] = {}
        self._center: np.ndarray | None = None
        """The tenant's mean vector (shrunk, see :func:`center_of`), or ``None`` until a centred search."""
        self._center_n = 0
        self._hub_basis: tuple[np.ndarray, int] | None = None
        """The center and row count the hub terms were last computed for (``None``: not yet)."""
        self._allocate(0)

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self.vectors = np.empty((capacity, self.dimensions), dtype=np.float32)
        self.rowids = np.empty(capacity, dtype=np.int64)
        self.memory_ids = np.empty((capacity, ID_BYTES), dtype=np.uint8)
        self.texts = np.empty(capacity, dtype=object)
        """Each row's memory id as text (:func:`id_texts`), made once when the row arrives: a search hands out
        these strings instead of formatting 16 bytes per hit (the hits of a search are 63-100 rows)."""
        self.sessions = np.empty(capacity, dtype=np.int32)
        self.created = np.empty(capacity, dtype=np.int64)
        self.expires = np.empty(capacity, dtype=np.int64)
        self.hub = np.full(capacity, np.nan, dtype=np.float32)
        """Each row's hub term (see :func:`memroute_builtins.vectors.hubness.neighbourhood`); NaN until computed."""

    def _arrays(self) -> list[np.ndarray]:
        return [self.vectors, self.rowids, self.memory_ids, self.texts, self.sessions, self.created, self.expires,
                self.hub]

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (allocated capacity, not just the live rows)."""
        return self.bytes_for(self.capacity, self.dimensions)

    @staticmethod
    def bytes_for(rows: int, dimensions: int) -> int:
        """What a matrix of ``rows`` rows of ``dimensions`` holds (see :attr:`nbytes`)."""
        return rows * (dimensions * 4 + 8 + ID_BYTES + ID_TEXT_BYTES + 4 + 8 + 8 + 4)

    def _codes(self, sessions: Sequence[str]) -> np.ndarray:
        codes = self._session_codes
        for session in dict.fromkeys(sessions):  # the distinct sessions, at C speed (a tenant has few)
            codes.setdefault(session, len(codes))
        return np.fromiter(map(codes.__getitem__, sessions), dtype=np.int32, count=len(sessions))

    def replace(self, rows: TenantRows, generation: int | None) -> None:
        """Drop everything and hold exactly ``rows`` (a reload from SQLite). Caller holds ``lock``.

        The batch's arrays are adopted, not copied (a 100k x 256 matrix is 100 MB): they must be writable
        and not shared. The next append grows them by half (one copy), later appends fill the headroom.
        """
        self._session_codes = {}
        self.capacity = self.n = len(rows)
        self.vectors = np.ascontiguousarray(rows.vectors, dtype=np.float32)
        self.rowids = rows.rowids
        self.memory_ids = rows.memory_ids
        self.texts = id_texts(rows.memory_ids)
        self.sessions = self._codes(rows.sessions)
        self.created = rows.created
        self.expires = rows.expires
        self._earliest_expiry = int(rows.expires.min()) if self.n else _NEVER
        self.hub = np.full(self.capacity, np.nan, dtype=np.float32)
        self.generation = generation
        self._center = None
        self._hub_basis = None

    def append(self, rows: TenantRows) -> None:
        """Add rows at the end, growing the arrays by half when full. Caller holds ``lock``."""
        needed = self.n + len(rows)
        if needed > self.capacity:
            live = self.n
            keep = self._arrays()
            self._allocate(max(needed, self.capacity + self.capacity // 2, 64))
            for target, source in zip(self._arrays(), keep, strict=True):
                target[:live] = source[:live]
        self._put(rows)

    def _put(self, rows: TenantRows) -> None:
        start, stop = self.n, self.n + len(rows)
        self.vectors[start:stop] = rows.vectors
        self.rowids[start:stop] = rows.rowids
        self.memory_ids[start:stop] = rows.memory_ids
        self.texts[start:stop] = id_texts(rows.memory_ids)
        self.sessions[start:stop] = self._codes(rows.sessions)
        self.created[start:stop] = rows.created
        self.expires[start:stop] = rows.expires
        if len(rows):
            self._earliest_expiry = min(self._earliest_expiry, int(rows.expires.min()))
        self.hub[start:stop] = np.nan  # an added or re-embedded row: its own term is computed on the next search
        self.n = stop

    def remove(self, rowids: Sequence[int]) -> None:
        """Swap-remove rows by SQLite rowid (unknown rowids are ignored). Caller holds ``lock``."""
        for rowid in rowids:
            found = np.flatnonzero(self.rowids[:self.n] == rowid)
            if found.size == 0:
                continue
            at, last = int(found[0]), self.n - 1
            if at != last:
                for array in self._arrays():
                    array[at] = array[last]
            self.n = last

    def _centering(self) -> np.ndarray:
        """The center, recomputed when the tenant has grown or shrunk by more than :data:`CENTER_REFRESH`
        since it was computed."""
        n = self.n
        if self._center is None or abs(n - self._center_n) > CENTER_REFRESH * max(self._center_n, 1):
            self._center = center_of(self.vectors[:n])
            self._center_n = n
        return self._center

    def prepare_center(self) -> None:
        """Compute the center now (when a load, not a search, should pay for it). Caller holds ``lock``."""
        self._centering()

    def hub_terms(self, neighbours: int, max_rows: int, center: bool, min_rows: int = 0) -> np.ndarray | None:
        """Every live row's hub term, shrunk for a small tenant (:func:`hub_shrink`), or ``None`` when the
        tenant has more than ``max_rows`` rows or at most ``min_rows`` (or too few for ``neighbours``).
        Caller holds ``lock``.

        Kept up to date incrementally: a row added or re-embedded since the last computation gets its own
        term on the next search (against every current row, with the center the terms were computed with);
        a deleted row simply leaves. The other rows' terms are recomputed all at once when the tenant has
        grown or shrunk by :data:`HUB_REFRESH` since they were computed, or the matrix was reloaded."""
        n = self.n
        if n > max_rows or n <= max(neighbours, min_rows):
            return None
        basis = self._hub_basis
        if basis is None or abs(n - basis[1]) > HUB_REFRESH * max(basis[1], 1):
            middle = self._centering() if center else np.zeros(self.dimensions, dtype=np.float32)
            self.hub[:n] = neighbourhood(self.vectors[:n], np.arange(n), middle, neighbours)
            self._hub_basis = (middle, n)
        else:
            missing = np.flatnonzero(np.isnan(self.hub[:n]))
            if missing.size:
                self.hub[missing] = neighbourhood(self.vectors[:n], missing, basis[0], neighbours)
        return self.hub[:n] * np.float32(hub_shrink(n))

    def search(self, probe: np.ndarray, k: int, *, now_us: int, session_id: str | None,
               created_after_us: int | None, center: bool = False, hub_penalty: float = 0.0,
               hub_neighbours: int = 10, hub_min_rows: int = 0,
               hub_max_rows: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The ``k`` best admitted rows, best first, as three columns: their memory ids (text), scores and
        cosines (float32 arrays). Caller holds ``lock``. The score is the cosine, or with ``center`` the
        cosine with the centred query (see :func:`centered_scores`; the center is the whole tenant's, kept
        with the matrix), minus ``hub_penalty`` times the row's hub term (:meth:`hub_terms`, for tenants of
        ``hub_min_rows`` to ``hub_max_rows`` rows) when that is above 0.

        Filters are masks over all live rows before the top-``k``: ``k`` counts only admitted rows. Columns,
        not a tuple per hit: the caller builds its hits from them in one pass.
        """
        n = self.n
        if n == 0:
            return [], _NO_SCORES, _NO_SCORES
        original = probe
        centred = centered_probe(probe, self._centering()) if center else None
        if centred is not None:
            probe = centred
        hub = self.hub_terms(hub_neighbours, hub_max_rows, center, hub_min_rows) if hub_penalty > 0 else None
        # No live row expires before _earliest_expiry: before then the expiry mask is all true (not built).
        mask = self.expires[:n] > now_us if now_us >= self._earliest_expiry else None
        if session_id is not None:
            same = self.sessions[:n] == self._session_codes.get(session_id, _NO_MATCH)
            mask = same if mask is None else mask & same
        if created_after_us is not None:
            recent = self.created[:n] >= created_after_us
            mask = recent if mask is None else mask & recent
        if mask is None or mask.all():
            scores = _scores(self.vectors[:n], probe)
            if hub is not None:
                scores = scores - np.float32(hub_penalty) * hub
            positions = None
        else:
            admitted = np.flatnonzero(mask)
            if admitted.size == 0:
                return [], _NO_SCORES, _NO_SCORES
            # Few admitted rows (a narrow session or window): score only those.
            few = admitted.size * 4 < n
            scores = _scores(self.vectors[admitted], probe) if few else _scores(self.vectors[:n], probe)[admitted]
            if hub is not None:
                scores = scores - np.float32(hub_penalty) * hub[admitted]
            positions = admitted
        count = scores.shape[0]
        # argpartition on the scores themselves (no negated copy): the k largest sit at the end.
        top = np.argpartition(scores, count - k)[count - k:] if k < count else np.arange(count)
        top = top[np.argsort(-scores[top], kind="stable")]
        rows = top if positions is None else positions[top]
        best = scores[top]
        cosines = _scores(self.vectors[rows], original) if centred is not None or hub is not None else best
        return self.texts[rows].tolist(), best, cosines


class MatrixCache:
    """An LRU of :class:`TenantMatrix` by tenant, bounded by the arrays' bytes. The total is kept as a running
    sum of each matrix's bytes when it was last accounted (a matrix grows only before :meth:`account`), so a
    write or a load costs the same with thousands of small tenants cached as with one."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, TenantMatrix] = OrderedDict()
        self._accounted: dict[str, int] = {}
        self._total = 0
        self.loads = 0
        self.evictions = 0

    def _drop(self, api_key_id: str) -> None:
        """Forget a tenant's matrix (caller holds ``_lock``)."""
        self._entries.pop(api_key_id, None)
        self._total -= self._accounted.pop(api_key_id, 0)

    def entry(self, api_key_id: str, dimensions: int) -> TenantMatrix:
        """The tenant's matrix (created empty and unloaded if absent), marked most recently used."""
        with self._lock:
            found = self._entries.get(api_key_id)
            if found is None or found.dimensions != dimensions:
                self._drop(api_key_id)
                found = self._entries[api_key_id] = TenantMatrix(dimensions)
            self._entries.move_to_end(api_key_id)
            return found

    def has_room(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit without evicting anything."""
        with self._lock:
            return self._total + nbytes <= self.max_bytes

    def peek(self, api_key_id: str) -> TenantMatrix | None:
        """The tenant's matrix if cached, without touching the LRU order (for write-through updates)."""
        with self._lock:
            return self._entries.get(api_key_id)

    def account(self, api_key_id: str, matrix: TenantMatrix) -> bool:
        """After ``matrix`` grew: evict least recently used tenants until the total fits. A tenant larger than
        the whole budget is not kept (``False``): its caller uses the matrix once and drops it."""
        with self._lock:
            if matrix.nbytes > self.max_bytes:
                if self._entries.get(api_key_id) is matrix:
                    self._drop(api_key_id)
                return False
            if self._entries.get(api_key_id) is matrix:
                size = matrix.nbytes
                self._total += size - self._accounted.get(api_key_id, 0)
                self._accounted[api_key_id] = size
            while self._total > self.max_bytes and self._entries:
                victim_key = next(iter(self._entries))
                if victim_key == api_key_id:
                    self._entries.move_to_end(victim_key)
                    if next(iter(self._entries)) == api_key_id:
                        break
                    continue
                self._drop(victim_key)
                self.evictions += 1
            return True

    def discard(self, api_key_id: str) -> None:
        with self._lock:
            self._drop(api_key_id)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._accounted.clear()
            self._total = 0

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"tenants": len(self._entries), "bytes": sum(m.nbytes for m in self._entries.values()),
                    "max_bytes": self.max_bytes, "loads": self.loads, "evictions": self.evictions}
