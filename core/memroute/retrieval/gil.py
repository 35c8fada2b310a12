"""Hand the GIL to the event loop between the stages of a call, in the async API's worker threads only.

Why: a search is mostly Python (building memories from rows, ranking, fusion) and holds the GIL while it
runs; apsw releases the GIL around every SQLite call, but only for microseconds at a time, and the worker
takes it straight back before the event loop's thread (woken, but still being scheduled) can. CPython's GIL
then lets the waiting loop force a switch only after a full switch interval (5 ms) *without* any switch,
and every one of those short releases restarts that wait. So the loop can stand behind a busy worker for
far longer than 5 ms. A worker that *sleeps* briefly at a stage boundary lets the loop's thread actually
take the GIL, run what is due (a few microseconds to a millisecond of callbacks) and go back to waiting on
I/O.

:func:`checkpoint` is that boundary: a no-op (one thread-local read) on every thread except the pools that
called :func:`enable_in_this_thread` (the async API's workers), so the sync API and any other thread never
sleep. Nothing here touches ``sys.setswitchinterval`` or any other process-wide setting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["DEFAULT_PAUSE", "checkpoint", "enable_in_this_thread"]

DEFAULT_PAUSE = 0.0002
"""Seconds a worker sleeps at a checkpoint: long enough for a woken thread to be scheduled and take the GIL
on a busy machine, short against a search (about 0.2 ms at each of three or four stages of a 5-10 ms call)."""

_local = threading.local()
_sleep = time.sleep


def enable_in_this_thread(pause: float = DEFAULT_PAUSE, step_aside: Callable[[], None] | None = None) -> None:
    """Make :func:`checkpoint` sleep ``pause`` seconds on the calling thread (``0``: never), after calling
    ``step_aside`` (the pool's way to let another caller's call go first: :class:`memroute.aio.FairShares`)."""
    _local.pause = float(pause)
    _local.step_aside = step_aside


def checkpoint() -> None:
    """A stage boundary in a call: on a thread that enabled it, let the pool pause the call for another
    caller's, then release the GIL briefly so that another thread waiting for it (the event loop's) can run;
    elsewhere, nothing."""
    step_aside = getattr(_local, "step_aside", None)
    if step_aside is not None:
        step_aside()
    pause = getattr(_local, "pause", 0.0)
    if pause:
        _sleep(pause)
