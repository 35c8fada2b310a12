"""Open file handles stay flat over repeated bursts of short-lived threads (issue 29, "Medium 4").

Every thread that touches a SQLite database gets its own apsw connection (``ThreadConnections``). Server thread
pools retire idle workers and start new ones, and the connection of an ended thread used to stay open until the
service closed: one server held ~157 handles on memroute.db, 153 on state.db and 149 on vectors.db after four
bursts of 120 concurrent requests, growing with each. Counted here through ``/proc/self/fd``, on the real files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import memroute
from memroute.deployment.db import ThreadConnections

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")


def open_handles(under: Path) -> int:
    """File descriptors of this process on files under ``under`` (databases, their -wal and -shm files)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(under))
    return count


def burst(work, threads: int) -> None:
    """``threads`` threads, all alive at once (so none can reclaim another's connection mid-burst), then ended."""
    together = threading.Barrier(threads)

    def run() -> None:
        work()
        together.wait(timeout=30)

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()


def test_an_ended_threads_connection_is_closed_with_its_thread(tmp_path):
    pool = ThreadConnections(tmp_path / "x.db")
    pool.get().execute("CREATE TABLE t (x)")
    try:
        counts = []
        for _ in range(4):
            burst(lambda: pool.get().execute("INSERT INTO t VALUES (1)"), threads=20)
            counts.append(open_handles(tmp_path))
        assert pool.open_count() == 1  # this thread's: each burst's closed as its threads ended
        assert counts == [counts[0]] * 4, counts
        assert counts[0] == open_handles(tmp_path)  # nothing is left for a later thread to reclaim
    finally:
        pool.close()
    assert open_handles(tmp_path) == 0


def test_the_services_handles_stay_flat_over_bursts_of_calls(tmp_path):
    mem = memroute.open(data_dir=str(tmp_path), memory={"enabled": True}, embedding={"source": "none"})
    try:
        mem.add(content="I like green tea", api_key_id="tenant-a", key="pref:tea")

        def work() -> None:
            mem.search("tea", api_key_id="tenant-a")
            mem.list(api_key_id="tenant-a")

        counts = []
        for _ in range(4):
            burst(work, threads=24)
            counts.append(open_handles(tmp_path))
        assert counts[1:] == counts[:1] * 3, counts
    finally:
        mem.close()
