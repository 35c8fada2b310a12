"""Keeping the keyword index in one piece: merging the FTS5 index's segments in the background once writes pause.

FTS5 writes every committed transaction as a new segment and merges them by level only once ``automerge`` (4)
segments pile up on one, so a file written one memory at a time holds 8-11 segments at 500-2,000 memories. A
query looks every one of its terms up in every segment: the bench's five-term shortlist statement took 0.61 ms
against 0.28 ms on the same file merged into one segment (500 memories, paced; 0.69 against 0.38 at 2,000),
with the same rows and the same rank bits. A few new segments are enough to lose most of it (one merged
segment plus 20 single adds: 6 segments, 0.73 ms), so the merge has to follow the writes.

:class:`KeywordIndexUpkeep` does that. Its thread is woken by this process's writes of memories and when the
file is opened with more than one segment; once no write has come for ``quiet_s`` it merges every segment into
one with FTS5's incremental ``merge`` command, :data:`MERGE_PAGES` leaf pages per write transaction, and goes
back to waiting when a write comes in between. A merge changes how the index is stored, never what a query
returns, and moves neither change counts nor data versions. It rewrites the whole index, so it is done only
while the index has at most ``max_pages`` leaf pages; a larger index is left to FTS5's own merging.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["MERGE_PAGES", "KeywordIndexUpkeep", "segments"]

log = logging.getLogger("memroute.sqlite")

MERGE_PAGES = 64
"""Leaf pages one merge step writes (one write transaction of a few milliseconds)."""

_SEGMENTS = "SELECT count(DISTINCT id >> 37), count(*) FROM memory_fts_data WHERE id >= (1 << 37)"
"""Segments and leaf pages: an FTS5 data row's id is ``segment << 37 | height << 31 | page`` (rows below that
are the structure and averages records)."""


def segments(connection: Any) -> tuple[int, int]:
    """The keyword index's segments and leaf pages."""
    count, pages = connection.execute(_SEGMENTS).fetchall()[0]
    return int(count), int(pages)


class KeywordIndexUpkeep:
    """The merging thread of one backend (see the module docstring). ``write`` opens one write transaction of
    the backend and yields its connection; ``read`` returns a connection for reads."""

    def __init__(self, write: Callable[[], AbstractContextManager[Any]], read: Callable[[], Any], *,
                 max_pages: int, quiet_s: float = 0.5) -> None:
        self._write, self._read = write, read
        self.max_pages, self.quiet_s = max_pages, quiet_s
        self._wake = threading.Condition()
        self._last_write: float | None = None
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.merges = 0
        """Merges finished (the index left in one segment)."""
        self.steps = 0
        self.last_error: str | None = None

    @property
    def enabled(self) -> bool:
        return self.max_pages > 0

    def written(self) -> None:
        """A write of memories committed: merge once writes pause."""
        if not self.enabled:
            return
        with self._wake:
            if self._stopped:
                return
            self._last_write = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memroute-fts-upkeep", daemon=True)
                self._thread.start()
            self._wake.notify()

    def opened(self, connection: Any) -> None:
        """The file was opened: merge (after the pause) when its index is in more than one segment."""
        if self.enabled and segments(connection)[0] > 1:
            self.written()

    def stop(self) -> None:
        """Stop the thread (a merge step under way finishes; the next open or write resumes the merge)."""
        with self._wake:
            self._stopped = True
            thread, self._thread = self._thread, None
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is left to merge (for tests and benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._wake:
                if self._last_write is None:
                    return True
            time.sleep(0.01)
        return False

    def stats(self) -> dict[str, Any]:
        try:
            count, pages = segments(self._read())
        except Exception as exc:  # a closed or damaged file: say so, never fail describe()
            count = pages = -1
            self.last_error = self.last_error or f"{type(exc).__name__}: {exc}"
        return {"enabled": self.enabled, "max_pages": self.max_pages, "segments": count, "leaf_pages": pages,
                "merges": self.merges, "steps": self.steps, "last_error": self.last_error}

    # --- the thread --------------------------------------------------------------------------------------

    def _quiet(self) -> Iterator[None]:
        """Yields each time writes have paused for ``quiet_s``; returns when stopped."""
        with self._wake:
            while not self._stopped:
                if self._last_write is None:
                    self._wake.wait()
                    continue
                left = self._last_write + self.quiet_s - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                written = self._last_write
                self._wake.release()
                try:
                    yield
                finally:
                    self._wake.acquire()
                if self._last_write == written:  # no write came while merging: done until the next one
                    self._last_write = None

    def _run(self) -> None:
        for _ in self._quiet():
            try:
                self._merge()
            except Exception as exc:  # a busy or closed file: the next write or open tries again
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.debug("memroute: merging the keyword index stopped: %s", exc)

    def _merge(self) -> None:
        count, pages = segments(self._read())
        if count <= 1 or pages > self.max_pages:
            return
        while True:
            with self._wake:
                interrupted = self._stopped or (
                    self._last_write is not None and time.monotonic() - self._last_write < self.quiet_s)
            if interrupted:  # writes resumed (or closing): merge once they pause again
                return
            with self._write() as connection:
                before = connection.total_changes()
                connection.execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('merge', ?)", (-MERGE_PAGES,))
                worked = connection.total_changes() - before >= 2  # FTS5: a delta below 2 means nothing merged
            self.steps += 1
            if not worked:
                self.merges += 1
                return
