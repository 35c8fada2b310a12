"""Daemon worker threads that run one backend's calls, so the manager can abandon a call that hangs."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["BackendRunner"]


class BackendRunner:
    """Daemon worker threads for one backend, so a call that hangs can be abandoned after a timeout.

    Workers are long-lived (backends keep per-thread connections) and started on demand up to ``size``.
    """

    def __init__(self, name: str, size: int = 8) -> None:
        self.name = name
        self._size = size
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._waiting = 0

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            self._waiting += 1
            if self._waiting > self._idle and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._work, name=f"memroute-{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            if item is None:
                return
            future, fn, args = item
            # A call whose caller already gave up (timed out while queued) must not run late.
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

    def shutdown(self) -> None:
        with self._lock:
            count = len(self._threads)
        for _ in range(count):
            self._queue.put(None)
