"""Group commit: concurrent calls that each write one item coalesce into one batched write.

Why: eight HTTP writers on one server process each ran their add alone: one transaction, one commit, one
wake of the indexer, the manager's and SQLite's write locks taken eight times over, a thread hand-off to and
from a worker for each, and every hand-off a wait for the GIL. Eight concurrent writers completed about as
many adds a second as one (docs/performance.md, "The HTTP server"). Under group commit the adds that
arrive while a batch is being written wait for the next one, which is written in one backend call (one
transaction, one commit, one journal append, one indexer wake).

Two ways in, one queue:

- :meth:`GroupCommit.call` (a thread that wants the result, the sync API): leader / follower, no thread of
  its own. When nobody is writing, the caller becomes the *leader*: it takes the queue (its own item and
  whatever arrived before it, at most ``max_batch``), writes that batch, hands every caller of the batch its
  own outcome, and passes the lead to the head of what queued meanwhile. Everyone else sleeps on its own
  slot. A lone caller leads a batch of one at once: nothing waits for company, no timer, no linger.
- :meth:`GroupCommit.submit` (an event loop, which must not block): queues the item and returns a
  :class:`concurrent.futures.Future`; a batch that has no waiting thread to lead it is led by the one
  ``memroute-writer`` thread (started on first use). An event loop's requests therefore reach the database
  with no thread hop of their own: one wake of the writer per batch, one future resolved per request.

Each caller gets exactly its own outcome: ``write_batch`` returns one outcome per item, in order (the
result, or the exception that item raised); an exception raised by ``write_batch`` itself is every caller's
(each gets its own copy, chained to the original). Validation happens before an item is queued, in the
caller's thread, so one caller's bad input is its own error and never enters a batch.
"""

from __future__ import annotations

import concurrent.futures
import copy
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from memroute.errors import BackendUnavailableError

__all__ = ["DEFAULT_MAX_BATCH", "GroupCommit"]

I = TypeVar("I")  # noqa: E741 - the item type
R = TypeVar("R")

DEFAULT_MAX_BATCH = 64
"""Items per batch at most: a batch's transaction holds the database's write lock, so it stays short (64
adds are a few milliseconds of SQLite work) for the other processes sharing the file."""


class _Slot(Generic[I, R]):
    """One caller's item and outcome. A thread caller sleeps on ``_wake`` (a plain lock, the cheapest wake-up
    there is: acquired here, released by whoever writes its batch); a submitted item has a future instead."""

    __slots__ = ("_wake", "future", "item", "lead", "outcome")

    def __init__(self, item: I, future: concurrent.futures.Future[R] | None = None) -> None:
        self.item = item
        self.future = future
        self.outcome: R | BaseException | None = None
        self.lead = False
        self._wake: threading.Lock | None = None
        if future is None:
            self._wake = threading.Lock()
            self._wake.acquire()

    def sleep(self) -> None:
        assert self._wake is not None
        self._wake.acquire()

    def wake(self) -> None:
        assert self._wake is not None
        self._wake.release()

    def settle(self, outcome: R | BaseException) -> None:
        """Hand the caller its outcome (and wake it)."""
        self.outcome = outcome
        if self.future is None:
            self.wake()
            return
        try:  # never cancelled (it is marked running when queued), but one bad future must not strand the rest
            if isinstance(outcome, BaseException):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)
        except concurrent.futures.InvalidStateError:
            pass


class GroupCommit(Generic[I, R]):
    """Coalesce concurrent :meth:`call` s and :meth:`submit` s into batches for ``write_batch``.

    ``write_batch(items)`` must return one outcome per item, in order: the result, or the exception (an
    instance) that item's caller gets. It runs on the thread leading the batch, one batch at a time.
    Thread-safe; calls from inside ``write_batch`` are not supported (they would wait for themselves)."""

    def __init__(self, write_batch: Callable[[Sequence[I]], Sequence[R | BaseException]], *,
                 max_batch: int = DEFAULT_MAX_BATCH, name: str = "memroute-writer") -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._write_batch = write_batch
        self.max_batch = max_batch
        self._name = name
        self._lock = threading.Lock()
        self._queue: deque[_Slot[I, R]] = deque()
        self._writing = False
        self._closed = False
        self._writer: threading.Thread | None = None
        self._writer_turn = threading.Semaphore(0)
        self._writer_leads = False
        self.batches = 0
        """Batches written so far (tests and the benchmark: ``items / batches`` is the mean batch size)."""
        self.items = 0
        self.last_batch = 0
        """Items in the batch written last."""
        self.largest_batch = 0

    def counters(self) -> dict[str, int | float]:
        """Batches and items written since this object was made, the mean / last / largest batch, the batch
        limit and what is queued now: ``status()`` shows them (``group_commit``)."""
        with self._lock:
            return {"batches": self.batches, "items": self.items,
                    "mean_batch": round(self.items / self.batches, 2) if self.batches else 0.0,
                    "last_batch": self.last_batch, "largest_batch": self.largest_batch,
                    "max_batch": self.max_batch, "waiting": len(self._queue)}

    @property
    def waiting(self) -> int:
        """Items queued for the next batch (not counting the batch being written)."""
        with self._lock:
            return len(self._queue)

    def call(self, item: I) -> R:
        """Write ``item`` (with whatever other items are waiting) and return its outcome, or raise the
        exception that is its outcome."""
        slot: _Slot[I, R] = _Slot(item)
        with self._lock:
            self._check_open()
            self._queue.append(slot)
            lead = not self._writing
            self._writing = True
        if not lead:
            slot.sleep()  # until the batch holding this item is written, or this caller is given the lead
            lead = slot.lead
        if lead:
            self._lead()
        outcome = slot.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]

    def submit(self, item: I) -> concurrent.futures.Future[R]:
        """Queue ``item`` without blocking; the future resolves to its outcome (or its exception) once its
        batch is written by the writer thread or by a thread's :meth:`call`."""
        future: concurrent.futures.Future[R] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # queued work cannot be withdrawn: it is as good as started
        with self._lock:
            self._check_open()
            self._queue.append(_Slot(item, future))
            if not self._writing:
                self._writing = True
                self._give_writer_the_lead()
        return future

    def close(self, timeout: float | None = None) -> None:
        """Refuse new items, let the queued ones be written, stop the writer thread."""
        with self._lock:
            self._closed = True
            writer = self._writer
        if writer is not None:
            self._writer_turn.release()
            writer.join(timeout)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError("the memroute service is closed")

    def _give_writer_the_lead(self) -> None:  # caller holds _lock
        if self._writer is None:
            self._writer = threading.Thread(target=self._run_writer, name=self._name, daemon=True)
            self._writer.start()
        self._writer_leads = True
        self._writer_turn.release()

    def _run_writer(self) -> None:
        while True:
            self._writer_turn.acquire()
            with self._lock:
                lead, self._writer_leads = self._writer_leads, False
                stop = self._closed and not self._writing
            if lead:
                self._lead()
            elif stop:
                return

    def _lead(self) -> None:
        """Write one batch from the head of the queue, then pass the lead on (the caller holds the lead: it
        found nobody writing, or was given the lead)."""
        with self._lock:
            batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
        outcomes = self._write(batch)
        with self._lock:
            self.batches += 1
            self.items += len(batch)
            self.last_batch = len(batch)
            self.largest_batch = max(self.largest_batch, len(batch))
            following = self._queue[0] if self._queue else None
            self._writing = following is not None
            if following is not None and following.future is not None:
                self._give_writer_the_lead()  # a submitted item: nobody waits on a thread for it
            elif following is None and self._closed and self._writer is not None:
                self._writer_turn.release()  # a writer thread waiting for work sees the close
        for slot, outcome in zip(batch, outcomes, strict=True):
            slot.settle(outcome)
        if following is not None and following.future is None:
            following.lead = True  # a thread waiting for its result: it writes the next batch
            following.wake()

    def _write(self, batch: list[_Slot[I, R]]) -> list[R | BaseException]:
        try:
            outcomes = list(self._write_batch([slot.item for slot in batch]))
            if len(outcomes) != len(batch):
                raise RuntimeError(f"group commit: {len(outcomes)} outcomes for {len(batch)} items")
            return outcomes
        except BaseException as error:  # the batch's own failure is every caller's, each with its own copy
            return [_own_copy(error) for _ in batch]


def _own_copy(error: BaseException) -> BaseException:
    """A copy of ``error`` for one caller, chained to the original: one exception object raised in several
    threads at once would have its traceback written by all of them."""
    try:
        clone = copy.copy(error)
    except Exception:
        return error
    clone.__cause__ = error
    clone.__traceback__ = None
    return clone
