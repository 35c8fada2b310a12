"""The logging of a process memroute owns (``memroute serve`` and its workers): records are written by a thread of
their own, never on the event loop.

A log call on the event loop used to format its record there. With a traceback that is not free — and the
``mcp`` SDK, left to itself, installs a ``rich`` handler with rich tracebacks on the root logger, which took
1-3.5 s per 500 to render while no other request was served. :func:`install_logging` puts one
:class:`~logging.handlers.QueueHandler` on the root logger: a log call only enqueues the record (its traceback
objects included, unformatted) and a listener thread formats and writes it. The SDK configures the root logger
only when it has no handler, so once this ran it configures nothing.

A library never calls this: an application embedding memroute keeps its own logging set-up.
"""

from __future__ import annotations

import atexit
import copy
import logging
import logging.handlers
import queue
import sys
from typing import IO, Final

__all__ = ["DEFAULT_FORMAT", "LOG_LEVEL_ENV", "OffThreadQueueHandler", "install_logging"]

DEFAULT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVEL_ENV: Final = "MEMROUTE_LOG_LEVEL"
"""``memroute serve --log-level``, handed to the worker processes (each installs the same logging)."""

_listener: logging.handlers.QueueListener | None = None


class OffThreadQueueHandler(logging.handlers.QueueHandler):
    """A queue handler that leaves all formatting to the listener's thread: the standard one formats the message
    and the traceback in the calling thread (``prepare``), which is the work to keep off the event loop."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record = copy.copy(record)
        record.msg = record.getMessage()  # the arguments may change after the call returns
        record.args = None
        return record


def install_logging(level: str | int = "INFO", *, stream: IO[str] | None = None,
                    fmt: str = DEFAULT_FORMAT) -> logging.handlers.QueueListener:
    """Make the root logger write through a queue to ``stream`` (stderr by default) at ``level``, replacing
    its handlers (uvicorn's and memroute's loggers propagate to it). Called again, it replaces the previous
    set-up. Returns the running listener (stopped, and its queue drained, at exit)."""
    global _listener
    _stop()
    target = logging.StreamHandler(stream if stream is not None else sys.stderr)
    target.setFormatter(logging.Formatter(fmt))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(OffThreadQueueHandler(records))
    root.setLevel(level.upper() if isinstance(level, str) else level)
    _listener = logging.handlers.QueueListener(records, target, respect_handler_level=True)
    _listener.start()
    return _listener


@atexit.register
def _stop() -> None:
    global _listener
    if _listener is not None:
        _listener.stop()  # writes what is still queued
        _listener = None
