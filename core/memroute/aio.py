"""The async Python API: ``await memroute.open_async()`` returns an :class:`AsyncMemroute`.

One implementation of the logic: every method runs the matching method of the sync
:class:`~memroute.service.Memroute` in a bounded, dedicated thread pool, so results, validation and typed errors
are exactly the sync ones. The methods are forwarded systematically (:func:`_forward`), never re-implemented.

Cancellation and timeouts (``task.cancel()``, ``asyncio.timeout``, ``asyncio.wait_for``) stop the *await*
at once, not the work: a call that already started in its thread runs to completion there (every write is
atomic in the backend, so a memory is stored completely or not at all, never half); a call still queued
behind a full pool is dropped before it starts. ``await mem.settle()`` waits until every call started so far
has finished, so after it the outcome of a cancelled write is decided and visible.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextvars
import functools
import threading
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from memroute.errors import BackendUnavailableError, ValidationError
from memroute.models import Memory
from memroute.retrieval import gil
from memroute.service import Memroute

__all__ = ["HANDOFF_FROM_WORKERS", "AsyncMemroute", "auto_workers", "caller", "default_handoff", "open_async"]

caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("memroute_aio_caller", default=None)
"""Whom the calls made in this context are for (``memroute serve`` sets the request's API key). Calls that name a
caller share the pool's workers fairly between callers (:class:`FairShares`); calls that name none are handed
to the pool as they come."""


class FairShares:
    """A pool's workers shared fairly between callers. At most ``width`` calls (the pool's size) are handed to
    the pool at once; the others wait in a queue per caller, and a worker that comes free goes to the caller
    first in line, who then goes to the back of the line (a newcomer joins just before the caller served
    last). So a caller with a backlog of fifty calls never sits in front of another's call: that one waits for
    the calls running and at most one more of each other busy caller, where a first-come pool queues it behind
    all fifty. Used from one event loop."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.running = 0
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        self._last: str | None = None

    async def enter(self, who: str) -> None:
        """Wait for a worker of ``who``'s share; the caller must :meth:`leave` once its call has finished."""
        if self.running < self.width and not self._waiting:
            self.running += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if who not in self._waiting:
            self._waiting[who] = deque()
            if self._last is not None and self._last in self._waiting:
                self._waiting.move_to_end(self._last)  # a newcomer goes before the caller served last
        self._waiting[who].append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.leave()  # handed a worker as it was cancelled: pass it on
            else:
                queue = self._waiting.get(who)
                if queue is not None and granted in queue:
                    queue.remove(granted)
                    if not queue:
                        del self._waiting[who]
            raise

    def leave(self) -> None:
        """A call finished: its worker goes to the caller first in line (``running`` stays), or is free."""
        while self._waiting:
            who, queue = next(iter(self._waiting.items()))
            granted = queue.popleft()
            if queue:
                self._waiting.move_to_end(who)
            else:
                del self._waiting[who]
            if not granted.done():
                granted.set_result(None)
                self._last = who
                return
        self.running -= 1

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MAX_WORKERS = 8
"""The pool for a service with a component that waits elsewhere (an HTTP API, PostgreSQL, a Qdrant server):
its calls spend most of their time with the GIL released, so more of them can overlap."""
IN_PROCESS_WORKERS = 2
"""The pool for a service whose every component works in this process (the default SQLite stack): its calls
are mostly Python holding the GIL, so more threads add no throughput, only GIL contention that makes the
event loop wait (measured: docs/python-api.md, "The event loop and the GIL")."""
_EXPORT_CHUNK = 500


def auto_workers(service: Memroute) -> int:
    """The pool size ``max_workers=None`` picks for ``service``: :data:`IN_PROCESS_WORKERS` when every
    component works in this process (:meth:`Memroute.runs_in_process`), else :data:`DEFAULT_MAX_WORKERS`."""
    return IN_PROCESS_WORKERS if service.runs_in_process() else DEFAULT_MAX_WORKERS


HANDOFF_FROM_WORKERS = 4
"""The smallest pool whose workers hand the GIL over by default (:func:`default_handoff`)."""


def default_handoff(max_workers: int) -> float:
    """The ``gil_handoff`` that ``None`` picks for a pool of ``max_workers``:
    :data:`memroute.retrieval.gil.DEFAULT_PAUSE` from :data:`HANDOFF_FROM_WORKERS` workers up, else ``0`` (no handoff).

    Measured with ``memroute bench --async`` (docs/python-api.md, "The event loop and the GIL"): with a pool
    of eight the handoff lowered the loop's p99 lag in every run (1.25 to 5 times); with two workers on a
    quiet machine it did not lower the lag and cost 40 % of search throughput (on a crowded host it does
    lower the p99: pass ``gil_handoff`` explicitly there)."""
    return gil.DEFAULT_PAUSE if max_workers >= HANDOFF_FROM_WORKERS else 0.0


def _check_workers(max_workers: int | None) -> None:
    if max_workers is None:
        return
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or not 1 <= max_workers <= 256:
        raise ValidationError("max_workers: must be None (sized from the service) or an integer in [1, 256]",
                              [("max_workers", "range")])


def _check_handoff(gil_handoff: float | None) -> None:
    if gil_handoff is None:
        return
    if isinstance(gil_handoff, bool) or not isinstance(gil_handoff, (int, float)) or not 0 <= gil_handoff <= 0.01:
        raise ValidationError("gil_handoff: must be None (chosen from the pool) or seconds in [0, 0.01]",
                              [("gil_handoff", "range")])


def _forward(
    method: Callable[Concatenate[Memroute, P], R],
) -> Callable[Concatenate[AsyncMemroute, P], Coroutine[Any, Any, R]]:
    """An ``async`` method that runs the sync ``method`` of the wrapped service in the pool: same signature,
    same docstring, same result and exceptions."""

    @functools.wraps(method)
    async def forwarded(self: AsyncMemroute, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(method, self._sync, *args, **kwargs)

    return forwarded


class AsyncMemroute:
    """memroute's async Python API: the sync service's methods as coroutines, run in a bounded thread pool.

    Use ``async with await memroute.open_async(...) as mem:`` (or ``async with memroute.open_async(...)``),
    or call :meth:`aclose`. Build it with :func:`open_async`; ``AsyncMemroute(service)`` wraps a service you
    opened yourself (it is closed with this object unless ``close_service=False``: then :meth:`aclose` only
    settles and stops the pool, and the service stays yours to close). ``max_workers=None`` sizes the pool
    from the service (:func:`auto_workers`); :attr:`max_workers` says what it is. ``gil_handoff`` is how long
    (seconds) a worker sleeps at each stage boundary of a call so the event loop can take the GIL
    (:mod:`memroute.retrieval.gil`; ``0``: never; ``None``: chosen from the pool's size by :func:`default_handoff`;
    not applied to an ``executor`` you pass in)."""

    def __init__(self, service: Memroute, *, max_workers: int | None = None,
                 executor: concurrent.futures.ThreadPoolExecutor | None = None, close_service: bool = True,
                 gil_handoff: float | None = None) -> None:
        _check_workers(max_workers)
        _check_handoff(gil_handoff)
        if max_workers is None:
            max_workers = auto_workers(service)
        if gil_handoff is None:
            gil_handoff = default_handoff(max_workers)
        self._sync = service
        self.gil_handoff = float(gil_handoff)
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="memroute-aio",
            initializer=gil.enable_in_this_thread, initargs=(self.gil_handoff,))
        self.max_workers = max_workers
        self._shares = FairShares(max_workers)
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._inflight_lock = threading.Lock()
        self._closing = False
        self._close_service = close_service

    @property
    def sync(self) -> Memroute:
        """The wrapped sync service (for code that runs in a thread of its own)."""
        return self._sync

    @property
    def settings(self) -> Any:
        return self._sync.settings

    async def run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)`` in this object's pool, awaited like the forwarded methods (counted by
        :meth:`settle` and :meth:`aclose`): for a caller that wraps a service call, e.g. to time it in its
        thread (the server's search does)."""
        return await self._run(fn, *args, **kwargs)

    async def _run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        if self._closing:
            raise BackendUnavailableError("this AsyncMemroute is closed")
        who = caller.get()
        if who is not None:
            await self._shares.enter(who)
        # What loop.run_in_executor does (submit, then wrap_future), keeping the concurrent future so that
        # settle() / aclose() can wait for calls that were cancelled on the loop but still run in a thread.
        # The caller's context variables go with the call, as with asyncio.to_thread.
        context = contextvars.copy_context()
        try:
            future = self._executor.submit(context.run, functools.partial(fn, *args, **kwargs))
        except BaseException:
            if who is not None:
                self._shares.leave()
            raise
        if who is not None:
            future.add_done_callback(functools.partial(_leave_on, asyncio.get_running_loop(), self._shares))
        with self._inflight_lock:
            self._inflight.add(future)
        future.add_done_callback(self._done)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # now, not in a later callback: a queued call is dropped before a worker takes it
            raise

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._inflight_lock:
            self._inflight.discard(future)

    async def settle(self) -> None:
        """Wait until every call started so far has finished in its thread (cancelled ones included)."""
        with self._inflight_lock:
            pending = [asyncio.wrap_future(f) for f in self._inflight]
        if pending:
            await asyncio.wait(pending)  # asyncio.wait never cancels what it waits for

    # --- lifecycle -----------------------------------------------------------------------------------
    async def __aenter__(self) -> AsyncMemroute:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Refuse new calls, wait for those in flight, close the service (off the loop; unless built with
        ``close_service=False``), stop the pool."""
        if self._closing:
            return
        self._closing = True
        await self.settle()
        loop = asyncio.get_running_loop()
        try:
            if self._close_service:
                await loop.run_in_executor(self._executor, self._sync.close)
        finally:
            self._executor.shutdown(wait=False)

    # --- forwarded: CRUD, search, maintenance, operations, conversation pipeline ---------------------
    add = _forward(Memroute.add)
    get = _forward(Memroute.get)
    history = _forward(Memroute.history)
    update = _forward(Memroute.update)
    delete = _forward(Memroute.delete)
    list = _forward(Memroute.list)
    search = _forward(Memroute.search)
    preview = _forward(Memroute.preview)
    record_access = _forward(Memroute.record_access)
    clear = _forward(Memroute.clear)
    stats = _forward(Memroute.stats)
    augment = _forward(Memroute.augment)
    explain_augment = _forward(Memroute.explain_augment)
    observe = _forward(Memroute.observe)
    extract = _forward(Memroute.extract)
    summarize = _forward(Memroute.summarize)
    compact = _forward(Memroute.compact)
    prune = _forward(Memroute.prune)
    prune_all = _forward(Memroute.prune_all)
    flush = _forward(Memroute.flush)
    status = _forward(Memroute.status)
    health = _forward(Memroute.health)
    reindex = _forward(Memroute.reindex)
    import_jsonl = _forward(Memroute.import_jsonl)
    import_memories = _forward(Memroute.import_memories)
    memory_settings = _forward(Memroute.memory_settings)
    memory_overrides = _forward(Memroute.memory_overrides)
    update_memory_settings = _forward(Memroute.update_memory_settings)
    qdrant_settings = _forward(Memroute.qdrant_settings)
    end_users = _forward(Memroute.end_users)
    forget_end_user = _forward(Memroute.forget_end_user)

    # --- export: async iterators ---------------------------------------------------------------------
    def export(self, api_key_id: str) -> AsyncIterator[Memory]:
        """Every memory of ``api_key_id``, oldest first, as an async iterator (read in chunks off the loop).
        Validation errors are raised on the first ``__anext__``."""
        return self._aiter(functools.partial(self._sync.export, api_key_id))

    def export_all(self) -> AsyncIterator[Memory]:
        """Every memory of **every** tenant (an operator's backup), as an async iterator."""
        return self._aiter(self._sync.export_all)

    async def _aiter(self, start: Callable[[], Iterator[Memory]]) -> AsyncIterator[Memory]:
        iterator = await self._run(start)
        while True:
            chunk = await self._run(_take, iterator, _EXPORT_CHUNK)
            for memory in chunk:
                yield memory
            if len(chunk) < _EXPORT_CHUNK:
                return


def _leave_on(loop: asyncio.AbstractEventLoop, shares: FairShares, _future: concurrent.futures.Future[Any]) -> None:
    """A shared call finished in its thread (or was dropped before it started): free its worker on the loop."""
    try:
        loop.call_soon_threadsafe(shares.leave)
    except RuntimeError:
        pass  # the loop has closed: nothing waits on it any more


def _take(iterator: Iterator[Memory], count: int) -> builtins.list[Memory]:
    chunk: builtins.list[Memory] = []
    for memory in iterator:
        chunk.append(memory)
        if len(chunk) == count:
            break
    return chunk



def _open_warm(config: Any, overrides: dict[str, Any]) -> Memroute:
    service = Memroute.open(config, **overrides)
    try:
        service.warm_up()
    except BaseException:
        service.close()
        raise
    return service


class _Opening:
    """What :func:`open_async` returns: awaitable (``mem = await memroute.open_async()``) and an async context
    manager (``async with memroute.open_async() as mem:``)."""

    def __init__(self, config: Any, max_workers: int | None, gil_handoff: float | None,
                 overrides: dict[str, Any]) -> None:
        self._args = (config, max_workers, gil_handoff, overrides)
        self._opened: AsyncMemroute | None = None

    def __await__(self) -> Any:
        return self._open().__await__()

    async def _open(self) -> AsyncMemroute:
        config, max_workers, gil_handoff, overrides = self._args
        _check_workers(max_workers)
        _check_handoff(gil_handoff)
        # Opening reads config, opens databases and may build an embedder: all of it off the loop, in a thread
        # of its own (the pool's size may depend on what was opened). The embedding model is loaded there too
        # (Memroute.warm_up): loaded lazily, it stalled the loop for ~30 ms on the first add (the indexer
        # thread loading it holds the GIL) and ~40 ms on the first search.
        opener = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="memroute-aio-open")
        try:
            service = await asyncio.get_running_loop().run_in_executor(
                opener, functools.partial(_open_warm, config, overrides))
        finally:
            opener.shutdown(wait=False)
        try:
            return AsyncMemroute(service, max_workers=max_workers, gil_handoff=gil_handoff)
        except BaseException:
            service.close()
            raise

    async def __aenter__(self) -> AsyncMemroute:
        self._opened = await self._open()
        return self._opened

    async def __aexit__(self, *exc: object) -> None:
        if self._opened is not None:
            await self._opened.aclose()


def open_async(config: Any = None, *, max_workers: int | None = None, gil_handoff: float | None = None,
               **overrides: Any) -> _Opening:
    """Open memroute for asyncio: the arguments of :func:`memroute.open`, plus ``max_workers`` (the size of
    the dedicated thread pool, 1..256; at most that many memroute calls run at once, the rest queue;
    ``None``: :func:`auto_workers` sizes it from what was opened) and ``gil_handoff`` (see
    :class:`AsyncMemroute`).
    ``await`` it for an :class:`AsyncMemroute`, or use it directly in ``async with``."""
    return _Opening(config, max_workers, gil_handoff, overrides)
