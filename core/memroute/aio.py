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
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from memroute.deployment.fair_use import WaitingLine
from memroute.errors import BackendUnavailableError, ValidationError
from memroute.models import Memory
from memroute.retrieval import gil
from memroute.service import Memroute

__all__ = ["HANDOFF_FROM_WORKERS", "AsyncMemroute", "auto_workers", "caller", "default_handoff", "open_async"]

caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("memroute_aio_caller", default=None)
"""Whom the calls made in this context are for (``memroute serve`` sets the request's API key). The pool's
workers are shared fairly between callers (:class:`FairShares`); calls that name none are one caller together,
served as they come."""

_ANONYMOUS = "\x00anonymous"
"""The share of the calls made without a :data:`caller` (no API key id is this)."""


class FairShares:
    """A pool's workers shared fairly between callers, with the light ones first.

    At most ``width`` calls are handed to the pool at once; the others wait in a
    :class:`~memroute.deployment.fair_use.WaitingLine` (a queue per caller, served round-robin), and a worker
    that comes free goes to the next caller in it. So a caller with a backlog of fifty calls never sits in front
    of another's call, where a first-come pool queues it behind all fifty.

    Two more things keep a flood from slowing a light caller (one with no backlog: nothing waiting here):

    - **Headroom**: ``headroom`` more workers than ``width``, only for a caller with nothing running or waiting,
      so its call starts at once instead of waiting for one of the flood's to end.
    - **Stepping aside**: while a light caller's call runs (in the pool, or on the loop: :meth:`in_call`), the
      running calls of a caller with a backlog pause at their next stage boundary
      (:func:`memroute.retrieval.gil.checkpoint`, :meth:`step_aside`) until it ends, at most
      :attr:`max_step_aside_s` at each boundary. On a machine with few cores the calls of one process share
      one GIL: a light call running beside two of the flood's gets a third of it and runs several times slower;
      stepped around, it runs at nearly its unloaded speed, and the flood, which has a backlog anyway, waits.

    Used from one event loop (:meth:`enter`, :meth:`leave`); :meth:`in_call` and :meth:`step_aside` from any
    thread."""

    max_step_aside_s = 0.05
    """The longest a call steps aside at one stage boundary: a stream of light calls slows a flood, never stops it."""

    def __init__(self, width: int, *, headroom: int = 0) -> None:
        self.width = width
        self.headroom = headroom
        self.running = 0
        self._held: dict[str, int] = {}
        """Workers each caller holds (granted on the loop, given back by :meth:`leave`)."""
        self._waiting = WaitingLine()
        self._active: dict[str, int] = {}
        """Calls running now, per caller: in a worker or on the loop (:meth:`in_call`); any thread."""
        self._changed = threading.Condition()

    async def enter(self, who: str) -> None:
        """Wait for a worker of ``who``'s share; the caller must :meth:`leave` once its call has finished."""
        if (self.running < self.width and not self._waiting) or (
                self.running < self.width + self.headroom and who not in self._held and who not in self._waiting):
            self._grant_to(who)
            return
        granted = self._waiting.join(who)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.leave(who)  # handed a worker as it was cancelled: pass it on
            else:
                self._waiting.forget(who, granted)
            raise

    def leave(self, who: str) -> None:
        """A call of ``who`` finished: its worker goes to the caller first in line, or is free."""
        held = self._held.get(who, 0) - 1
        if held > 0:
            self._held[who] = held
        else:
            self._held.pop(who, None)
        self.running -= 1
        while self.running < self.width and self._waiting.grant():
            self._grant_to(cast(str, self._waiting.last))

    def _grant_to(self, who: str) -> None:
        self.running += 1
        self._held[who] = self._held.get(who, 0) + 1

    @contextlib.contextmanager
    def in_call(self, who: str | None) -> Iterator[None]:
        """Count a call of ``who`` as running for as long as the block runs (``None``: nothing is counted)."""
        if who is None:
            yield
            return
        with self._changed:
            self._active[who] = self._active.get(who, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                left = self._active[who] - 1
                if left:
                    self._active[who] = left
                else:
                    del self._active[who]
                self._changed.notify_all()

    def step_aside(self) -> None:
        """At a stage boundary of a call of the current :data:`caller`: when that caller has a backlog and a
        light caller's call is running, wait until it has ended (at most :attr:`max_step_aside_s`)."""
        who = caller.get()
        if who is None or who not in self._waiting:
            return
        deadline = time.monotonic() + self.max_step_aside_s
        with self._changed:
            while who in self._waiting and self._light_running(who):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)

    def _light_running(self, who: str) -> bool:
        return any(other != who and other not in self._waiting for other in self._active)


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
        # One worker more than the share width when the pool is ours: the headroom a light caller's call starts
        # on while a flood holds the others (FairShares). It is started only when used.
        self._shares = FairShares(max_workers, headroom=0 if executor else 1)
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers + 1, thread_name_prefix="memroute-aio",
            initializer=gil.enable_in_this_thread, initargs=(self.gil_handoff, self._shares.step_aside))
        self.max_workers = max_workers
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
        share = _ANONYMOUS if who is None else who
        await self._shares.enter(share)
        # What loop.run_in_executor does (submit, then wrap_future), keeping the concurrent future so that
        # settle() / aclose() can wait for calls that were cancelled on the loop but still run in a thread.
        # The caller's context variables go with the call, as with asyncio.to_thread.
        context = contextvars.copy_context()
        call = functools.partial(fn, *args, **kwargs)
        try:
            future = self._executor.submit(context.run, self._counted, who, call)
        except BaseException:
            self._shares.leave(share)
            raise
        future.add_done_callback(functools.partial(_leave_on, asyncio.get_running_loop(), self._shares, share))
        with self._inflight_lock:
            self._inflight.add(future)
        future.add_done_callback(self._done)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # now, not in a later callback: a queued call is dropped before a worker takes it
            raise

    def _counted(self, who: str | None, call: Callable[[], R]) -> R:
        with self._shares.in_call(who):
            return call()

    def run_inline(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` right here, on the calling thread (the server runs a tenant's short searches
        on the event loop), counted as a running call of the current :data:`caller`: while it runs, the pool's
        calls of a caller with a backlog step aside (:class:`FairShares`)."""
        with self._shares.in_call(caller.get()):
            return fn(*args, **kwargs)

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


def _leave_on(loop: asyncio.AbstractEventLoop, shares: FairShares, who: str,
              _future: concurrent.futures.Future[Any]) -> None:
    """A shared call finished in its thread (or was dropped before it started): free its worker on the loop."""
    try:
        loop.call_soon_threadsafe(shares.leave, who)
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
