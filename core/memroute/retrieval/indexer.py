"""Keeping the vector index in step with the stored memories.

A write marks the memory as needing a vector: with a primary that keeps reindex flags in its rows (the SQLite
backend's ``needs_reindex``, set in the write's own transaction) the flag is the queue; deletes, and primaries
without flags, go through a durable queue (a small SQLite file). A background worker embeds in batches and
upserts the vectors, so ``add()`` never waits for the model. A crash leaves the work on disk and it resumes on
the next open. When the index's embedding signature changes, the store is reset and every
memory is enqueued again (the rebuild); reads do a bounded amount of that work for the tenant they serve
(lazy backfill), and ``memroute reindex`` drives it explicitly with progress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from memroute.embedding.cache import uncached
from memroute.errors import EmbeddingError, ValidationError
from memroute.interfaces import EmbeddingSource, ReindexMarkers, TenantRoutedDeletes, VectorItem, VectorStore
from memroute.models import Memory
from memroute.retrieval.index_queue import IndexQueue

__all__ = ["IndexQueue", "Indexer", "ReindexMarkers", "store_identity"]

log = logging.getLogger("memroute.index")

POISON_ATTEMPTS = 3
"""An item that fails alone this many times while other items index fine is dead-lettered."""


def store_identity(store: VectorStore) -> str:
    """Which index a store is: its name and, from ``describe()``, where it keeps vectors (path or target, and
    collection). The indexer records it; opening the index on another store rebuilds it there."""
    try:
        describe = getattr(store, "describe", None)
        described = describe() if callable(describe) else {}
    except Exception:
        described = {}
    where = described.get("target") or described.get("path") or ""
    name = getattr(store, "store_name", type(store).__name__)
    parts = [str(name), str(where), str(described.get("collection") or "")]
    return "|".join(parts)


def embedding_text(memory: Memory) -> str:
    """What is embedded for a memory: its content (keys are machine-made slugs that add noise to vectors)."""
    return memory.content


class Indexer:
    """Drains the :class:`IndexQueue` into the vector store. One processor at a time (a lock), shared by the
    background worker, lazy backfill on reads, ``flush`` and ``reindex``."""

    META_SIGNATURE = "signature"
    META_ENUMERATED = "enumerated"
    META_TARGET = "target"

    def __init__(
        self,
        *,
        fetch: Callable[[Sequence[str]], dict[str, Memory]],
        enumerate_memories: Callable[[], Iterable[Memory]],
        count_memories: Callable[[], int] | None = None,
        embedder: EmbeddingSource,
        store: VectorStore,
        queue: IndexQueue,
        markers: ReindexMarkers | None = None,
        quantization: str = "float32",
        batch_size: int = 256,
        background: bool = True,
        target: str | None = None,
    ) -> None:
        self._fetch = fetch
        self.target = target
        self.markers = markers
        self._enumerate = enumerate_memories
        self._count = count_memories
        self.embedder = embedder
        self._index_embedder = uncached(embedder)
        self.store = store
        self.queue = queue
        self.batch_size = batch_size
        self._process_lock = threading.Lock()
        self.process_lock = self._process_lock
        """Held while a batch is processed (a vector-store switch waits on it)."""
        self._bulk_lock = threading.Lock()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        """The helper thread that embeds the next batch ahead (:meth:`_index_marked`), started on first use."""
        self._pool_lock = threading.Lock()
        self.last_error: str | None = None
        self._solo_failures: dict[str, tuple[int, int]] = {}
        """Per memory id: (failures alone, ``_successes`` when it first failed)."""
        self._successes = 0
        # The index's signature includes its quantisation: switching float32 <-> int8 rebuilds it too.
        self.bound_signature = embedder.signature().with_quantization(quantization)
        self.signature = str(self.bound_signature)
        self._prepare_index()
        if background:
            self._thread = threading.Thread(target=self._run, name="memroute-indexer", daemon=True)
            self._thread.start()

    # --- signature and rebuild -------------------------------------------------------------------------
    def _prepare_index(self) -> None:
        signature = self.bound_signature
        kept = self.store.bind(signature)
        recorded = self.queue.get_meta(self.META_SIGNATURE)
        if not kept or recorded != str(signature):
            # The index was built under another signature (or never recorded): it is never queried; every
            # memory is enqueued again.
            self.queue.set_meta(self.META_SIGNATURE, str(signature))
            self.queue.set_meta(self.META_ENUMERATED, None)
        if self.target is not None:
            previous = self.queue.get_meta(self.META_TARGET)
            if previous is not None and previous != self.target:
                # Another store held the index (a vector-store switch at run time, or a changed [vectors]):
                # whatever this one still holds is from before, so it is emptied and rebuilt from the memories.
                log.info("memroute indexer: the index moved from %s to %s: rebuilding", previous, self.target)
                self.queue.clear()
                for memory_id_batch in _chunks(sorted(self.store.ids()), 1000):
                    self.store.delete(memory_id_batch)
                self.queue.set_meta(self.META_ENUMERATED, None)
            self.queue.set_meta(self.META_TARGET, self.target)
        if self.queue.get_meta(self.META_ENUMERATED) is None:
            self.enqueue_all()
        else:
            self.heal()

    def heal(self) -> int:
        """Repair drift left by a crash between a write and its enqueue: when nothing is queued and the
        store's vector count differs from the number of memories, enqueue the difference. Returns how many
        entries were enqueued."""
        if self._count is None or self.depth():
            return 0
        total = self._count()
        if total == self.store.count():
            return 0
        indexed = self.store.ids()
        stored: dict[str, str] = {m.id: m.api_key_id for m in self._enumerate()}
        entries = [(mid, key, "upsert") for mid, key in stored.items() if mid not in indexed]
        entries += [(mid, "", "delete") for mid in indexed - stored.keys()]
        if entries:
            log.info("memroute indexer: healing %d vectors out of step with the stored memories", len(entries))
            self.queue.put(entries)
            self._notify()
        return len(entries)

    def enqueue_all(self) -> int:
        """Enqueue every stored memory (a rebuild); marks enumeration complete."""
        if self.markers is not None:
            self.markers.mark_all_for_reindex()
            count = self.markers.count_pending_reindex()
            self.queue.set_meta(self.META_ENUMERATED, "1")
            self._notify()
            return count
        count = 0
        batch: list[tuple[str, str, str]] = []
        for memory in self._enumerate():
            batch.append((memory.id, memory.api_key_id, "upsert"))
            if len(batch) >= 1000:
                count += self.queue.put(batch)
                batch = []
        count += self.queue.put(batch)
        self.queue.set_meta(self.META_ENUMERATED, "1")
        self._notify()
        return count

    def enqueue_tenant(self, api_key_id: str, memories: Iterable[Memory], *, force: bool) -> int:
        """Enqueue one tenant's ``memories`` (every one with ``force``, else those without a vector): a tenant's
        own reindex. Nothing is deleted first, so the tenant's searches keep their current vectors until each is
        replaced, and no other tenant's vectors or queue entries are touched. Returns how many were enqueued."""
        indexed: set[str] = set() if force else self.store.ids(api_key_id)
        count = 0
        batch: list[tuple[str, str, str]] = []
        for memory in memories:
            if memory.api_key_id == api_key_id and memory.id not in indexed:
                batch.append((memory.id, api_key_id, "upsert"))
            if len(batch) >= 1000:
                count += self.queue.put(batch)
                batch = []
        count += self.queue.put(batch)
        self._notify()
        return count

    def reset(self) -> int:
        """Forget every vector and enqueue every memory (``reindex --force``)."""
        with self._process_lock:
            self.queue.clear()
            self.queue.set_meta(self.META_ENUMERATED, None)
            for memory_id_batch in _chunks(sorted(self.store.ids()), 1000):
                self.store.delete(memory_id_batch)
        return self.enqueue_all()

    # --- writes ----------------------------------------------------------------------------------------
    def enqueue(self, memories: Sequence[Memory]) -> None:
        """Written memories need a vector. With backend markers the write already flagged them (when it reached
        the primary; a fallback-served write is flagged when the outbox replays it), so only wake the worker."""
        if self.markers is None:
            self.queue.put((m.id, m.api_key_id, "upsert") for m in memories)
        self._notify()

    def depth(self, api_key_id: str | None = None) -> int:
        """Entries waiting: queued deletes and upserts, plus flagged rows with backend markers."""
        pending = self.queue.depth(api_key_id)
        if self.markers is not None:
            pending += self.markers.count_pending_reindex(api_key_id)
        return pending

    def enqueue_delete(self, memory_id: str, api_key_id: str) -> None:
        self.queue.put([(memory_id, api_key_id, "delete")])
        self._notify()

    def _notify(self) -> None:
        with self._wake:
            self._wake.notify_all()

    # --- processing ------------------------------------------------------------------------------------
    READ_AHEAD = 8
    """Flagged rows are read up to this many batches at a time, and each batch is embedded while the one before
    it is written (:meth:`_index_marked`)."""

    PIPELINE = True
    """Embed the next batch on a helper thread while this one's vectors and flags are written (the model and
    SQLite release the GIL for much of their work). ``False`` embeds and writes in turn on the caller's
    thread."""

    def process(self, limit: int, api_key_id: str | None = None) -> tuple[int, int]:
        """Process up to ``limit`` queued entries (of one tenant, or the oldest overall); returns
        ``(processed, errors)``. Nothing once :meth:`close` began."""
        processed = errors = 0
        if self._stopping:
            return 0, 0
        with self._process_lock:
            while processed + errors < limit:
                left = limit - processed - errors
                entries = self.queue.take(min(self.batch_size, left), api_key_id)
                if entries:
                    ok, failed = self._process_batch(entries)
                elif self.markers is not None:
                    ok, failed = self._process_marked(min(left, self.batch_size * self.READ_AHEAD), api_key_id)
                    if not ok and not failed:
                        break
                else:
                    break
                processed += ok
                errors += failed
                if failed or self._stopping:
                    break
        return processed, errors

    def _process_marked(self, limit: int, api_key_id: str | None) -> tuple[int, int]:
        assert self.markers is not None
        try:
            memories = self.markers.pending_reindex(limit, api_key_id)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("memroute indexer: batch failed, will retry: %s", self.last_error)
            return 0, max(1, min(limit, self.batch_size))
        if not memories:
            return 0, 0
        return self._index_marked(memories)

    def _index_marked(self, memories: Sequence[Memory]) -> tuple[int, int]:
        """Embed and write ``memories`` batch by batch: while batch N's vectors are upserted and its flags
        cleared (only rows unchanged since they were read), batch N + 1 is embedded on the helper thread — at
        most one batch ahead. Each batch is written whole or not at all (its vectors in one store transaction,
        then its flags), so stopping between batches leaves the rest flagged for next time; a batch that fails
        is retried item by item (:meth:`_isolate_marked`) and ends the call."""
        assert self.markers is not None
        size = self.batch_size
        batches = [memories[start:start + size] for start in range(0, len(memories), size)]
        ok = 0
        pending = self._embed_soon(batches[0], ahead=False)
        for number, batch in enumerate(batches):
            ahead: Future[np.ndarray] | None = None
            try:
                vectors = pending.result()
                if number + 1 < len(batches) and not self._stopping:
                    ahead = self._embed_soon(batches[number + 1], ahead=True)
                self._store_vectors(batch, vectors)
                self.markers.mark_indexed(batch)
            except Exception as exc:
                _settle(ahead)
                self.last_error = f"{type(exc).__name__}: {exc}"
                done, failed = self._isolate_marked(batch)
                return ok + done, failed
            ok += len(batch)
            if ahead is None:
                break
            pending = ahead
        self.last_error = None
        return ok, 0

    def _embed_soon(self, memories: Sequence[Memory], *, ahead: bool) -> Future[np.ndarray]:
        """The vectors of ``memories``: computed on the helper thread when ``ahead`` (and pipelining is on and
        the indexer open), else now."""
        if ahead and self.PIPELINE:
            with self._pool_lock:
                if self._pool is None and not self._stopping:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memroute-embed")
                pool = self._pool
            if pool is not None and not self._stopping:
                try:
                    return pool.submit(self._embed, memories)
                except RuntimeError:  # shut down by close() since
                    pass
        done: Future[np.ndarray] = Future()
        try:
            done.set_result(self._embed(memories))
        except Exception as exc:
            done.set_exception(exc)
        return done

    def _isolate_marked(self, memories: Sequence[Memory]) -> tuple[int, int]:
        """A flagged batch failed: index its memories one by one, so one poison row cannot hold back the rest.
        A memory that keeps failing alone while others succeed (or whose input is invalid) is dead-lettered:
        marked indexed, so it leaves the queue, and recorded for ``status``."""
        assert self.markers is not None
        ok, failed, before = 0, [], self._successes
        for memory in memories:
            try:
                self._upsert_vectors([memory])
                self.markers.mark_indexed([memory])
                ok += 1
            except Exception as exc:
                failed.append((memory, exc))
        for memory, error in failed:
            if self._is_poison(memory.id, error, before):
                self._dead_letter(memory.id, memory.api_key_id, error)
                self.markers.mark_indexed([memory])
        if failed and not ok:
            log.warning("memroute indexer: batch failed, will retry: %s", self.last_error)
        else:
            self.last_error = None
        return ok, len(failed)

    def _is_poison(self, memory_id: str, error: BaseException, successes_before: int) -> bool:
        """An invalid input at once; otherwise an item that failed alone ``POISON_ATTEMPTS`` times while the
        store indexed other items fine in the meantime (an outage fails everything and dead-letters nothing)."""
        count, successes_then = self._solo_failures.get(memory_id, (0, successes_before))
        self._solo_failures[memory_id] = (count + 1, successes_then)
        return isinstance(error, ValidationError) or (count + 1 >= POISON_ATTEMPTS
                                                      and self._successes > successes_then)

    def _dead_letter(self, memory_id: str, api_key_id: str, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self.queue.dead_letter(memory_id, api_key_id, error)
        self._solo_failures.pop(memory_id, None)
        log.warning("memroute indexer: memory %s dead-lettered (it cannot be indexed): %s", memory_id, error)

    def _embed(self, memories: Sequence[Memory]) -> np.ndarray:
        vectors = self._index_embedder.embed_batch([embedding_text(m) for m in memories])
        if len(vectors) != len(memories):
            raise EmbeddingError(f"{self._index_embedder.source} returned {len(vectors)} vectors for "
                                 f"{len(memories)} texts", reason="request_failed", source=self._index_embedder.source)
        return vectors

    def _upsert_vectors(self, memories: Sequence[Memory]) -> None:
        self._store_vectors(memories, self._embed(memories))

    def _store_vectors(self, memories: Sequence[Memory], vectors: np.ndarray) -> None:
        self.store.upsert([
            VectorItem(memory_id=m.id, api_key_id=m.api_key_id, session_id=m.session_id, created_at=m.created_at,
                       expires_at=m.expires_at, vector=vectors[i])
            for i, m in enumerate(memories)
        ])
        self._successes += 1

    def _delete_vectors(self, owned: Sequence[tuple[str, str]]) -> None:
        """Delete the vectors of ``(memory id, owner)`` pairs: per tenant where the store routes by it (an owner
        may be unknown, ``""``, in entries queued without one)."""
        store = self.store
        if not isinstance(store, TenantRoutedDeletes):
            store.delete([memory_id for memory_id, _ in owned])
            return
        by_owner: dict[str, list[str]] = {}
        for memory_id, owner in owned:
            by_owner.setdefault(owner, []).append(memory_id)
        for owner, memory_ids in by_owner.items():
            if owner:
                store.delete_owned(owner, memory_ids)
            else:
                store.delete(memory_ids)

    def _process_batch(self, entries: list[tuple[str, str, str, int]]) -> tuple[int, int]:
        deletes = [(mid, seq) for mid, _key, op, seq in entries if op == "delete"]
        upserts = [(mid, seq) for mid, _key, op, seq in entries if op == "upsert"]
        try:
            if deletes:
                self._delete_vectors([(mid, key) for mid, key, op, _s in entries if op == "delete"])
            found = self._fetch([mid for mid, _ in upserts]) if upserts else {}
            memories = [found[mid] for mid, _ in upserts if mid in found]
            missing = [(mid, key) for mid, key, op, _s in entries if op == "upsert" and mid not in found]
            if missing:
                self._delete_vectors(missing)  # deleted since it was enqueued
            if memories:
                self._upsert_vectors(memories)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            if entries:
                return self._isolate_entries(entries)
            log.warning("memroute indexer: batch failed, will retry: %s", self.last_error)
            self.queue.failed([mid for mid, _k, _o, _s in entries], self.last_error)
            return 0, len(entries)
        self.queue.done(deletes + upserts)
        self.last_error = None
        return len(entries), 0

    def _isolate_entries(self, entries: list[tuple[str, str, str, int]]) -> tuple[int, int]:
        """A queued batch failed: process its entries one by one (see :meth:`_isolate_marked`)."""
        ok, failed, before = 0, [], self._successes
        for entry in entries:
            try:
                if entry[2] == "delete":
                    self._delete_vectors([(entry[0], entry[1])])
                else:
                    found = self._fetch([entry[0]])
                    if entry[0] in found:
                        self._upsert_vectors([found[entry[0]]])
                    else:
                        self._delete_vectors([(entry[0], entry[1])])
                self.queue.done([(entry[0], entry[3])])
                ok += 1
            except Exception as exc:
                failed.append((entry, exc))
        for (memory_id, api_key_id, _op, _seq), error in failed:
            self.queue.failed([memory_id], f"{type(error).__name__}: {error}")
            if self._is_poison(memory_id, error, before):
                self._dead_letter(memory_id, api_key_id, error)
        if failed and not ok:
            log.warning("memroute indexer: batch failed, will retry: %s", self.last_error)
        else:
            self.last_error = None
        return ok, len(failed)

    LINGER_S = 0.05
    """How long the worker lets writes accumulate before embedding them, so a burst of adds is embedded in a
    few batches instead of one call per memory (the per-call overhead dominates a static model's cost)."""

    BULK_THRESHOLD = 2_000
    """A backlog at least this deep (a bulk import, a rebuild) is drained inside the store's ``bulk_load``, so
    a store that builds its index faster in one go than vector by vector can (pgvector's HNSW graph: about
    ten times faster)."""

    def _drain(self, limit: int, deadline: float | None = None) -> tuple[int, int]:
        """``process(limit)``; or, with a deep backlog, everything queued inside ``store.bulk_load`` (one
        drainer at a time, so a flush waits for the store to finish its index)."""
        wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._bulk_lock.acquire(timeout=wait):
            return 0, 0  # another thread is draining a bulk backlog past this caller's deadline
        try:
            depth = self.depth()
            if depth < self.BULK_THRESHOLD:
                return self.process(limit)
            processed = errors = 0
            with self.store.bulk_load(depth):
                while not self._stopping:
                    ok, failed = self.process(self.batch_size * 16)
                    processed, errors = processed + ok, errors + failed
                    if failed or not ok or (deadline is not None and time.monotonic() >= deadline):
                        break
            return processed, errors
        finally:
            self._bulk_lock.release()

    def _run(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                if 0 < self.depth() < self.batch_size:
                    time.sleep(self.LINGER_S)
                processed, errors = self._drain(self.batch_size * 4)
            except Exception as exc:
                processed, errors = 0, 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            if errors:
                with self._wake:
                    self._wake.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 0.05
            if processed == 0:
                with self._wake:
                    if not self._stopping:
                        self._wake.wait(1.0)

    def flush(self, timeout: float | None = None) -> bool:
        """Process the queue until it is empty (or ``timeout`` seconds pass); True when empty. Never raises:
        a failing backend or store leaves the work queued and returns False."""
        try:
            return self._flush(timeout)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False

    def _flush(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopping and self.depth():
            processed, errors = self._drain(self.batch_size * 16, deadline)
            if not processed and not errors:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            if errors:
                if deadline is None:
                    return False
                time.sleep(0.05)
        return self.depth() == 0

    def tenant_ready(self, api_key_id: str, lazy_budget: int) -> tuple[bool, int]:
        """Whether the tenant's vectors are complete, doing up to ``lazy_budget`` of its queued work first.
        Returns ``(ready, still_pending)``."""
        pending = self.depth(api_key_id)
        if pending and lazy_budget > 0:
            self.process(lazy_budget, api_key_id)
            pending = self.depth(api_key_id)
        return pending == 0, pending

    def close(self) -> None:
        """Stop indexing: the worker, a ``flush`` or ``reindex`` on another thread finish the batch they are
        writing (waited for, up to 10 s each) and start no other; what is left stays flagged or queued."""
        self._stopping = True
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._process_lock.acquire(timeout=10):
            self._process_lock.release()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)  # at most the one batch being embedded ahead


def _settle(future: Future[Any] | None) -> None:
    """Wait for a batch embedded ahead that will not be written (its outcome does not matter)."""
    if future is not None:
        try:
            future.result()
        except Exception:
            pass  # the batch stays flagged and is embedded again


def _chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])
