"""HTTP benchmark of ``memroute serve`` against the same calls in-process, in one run (``memroute bench --http``
runs this module; ``python -m memroute.bench.http --json`` too).

Measures, on a fresh SQLite deployment in a temporary directory with ``N`` memories for one tenant:

- search p50 / p95 in-process (``mem.search``) and over HTTP (``POST /api/memory/search``, keep-alive), and
  the ratio; target: HTTP p50 ≤ 1.5 x in-process p50 + 1 ms with ``httpx``, judged on the **interleaved** run
  (``search.interleaved``: each query in-process, with ``httpx``, with the ``raw`` client, in turn, so every
  call runs after the same pause, under one machine state; :func:`cold_call_factor` says why that matters and
  is reported as ``search.cold_call_factor``). Each side is also run in a loop of its own and reported
  (``search.in_process``, ``search.http``, ``search.raw_client``, ``search.target_met_back_to_back``), each
  with the CPU milliseconds per search in the server process and in the client, and in-process the CPU per
  search of this process (``search.in_process.cpu_ms``): wall times are noisy on a shared machine, CPU per
  search much less;
- single adds in-process and over HTTP with 1 and 8 concurrent clients (``POST /api/memory``), and the
  8-vs-1 throughput ratio; target: ≥ 3x;
- where an add's time goes: CPU milliseconds per add in the server process (every thread) and in the client
  process, for 1 and for 8 writers, and from them the **ceiling** of the 8-vs-1 ratio on this machine: one
  server process runs Python under one GIL, so it completes at most ``1 / server CPU per add`` adds a second,
  and server and clients together at most ``cores / (server + client CPU per add)`` (``workers`` processes:
  ``workers / server CPU per add``, still at most the cores); divided by one writer's
  measured rate, that bounds what any amount of concurrency can reach (``add.ceiling``).

The server is the real ``memroute serve`` in its own process on a loopback port, on the same deployment as the
in-process baseline. The add runs are made twice, with two clients: ``httpx`` (keep-alive; what an application
would use, ~1 ms of client CPU per request) and ``raw`` (one keep-alive socket per writer, pre-encoded
HTTP/1.1 requests, responses read by ``Content-Length``; ~0.1 ms). Eight ``httpx`` writers in one process burn
most of a core themselves on a 2-core machine, so the ``raw`` run is the one that measures the server's
concurrency; both are reported. Each one-writer run also splits its round trip into client CPU, server CPU and
the rest (waiting: loopback, scheduling, the event loop's hand-offs), ``add.<client>.round_trip_ms``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["run_http_bench"]

_QUERIES = ["what does the user think about the billing service?", "marathon training plan",
            "which language for the dashboard", "trip to Lisbon", "database migration decision",
            "weekend cooking routine", "code review habits", "team offsite plans"]


def _p(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 3)}


def _stat(pid: int | str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU of process ``pid`` and its child processes (``--workers``), every thread, from
    ``/proc``; ``None`` where there is no ``/proc``."""
    import os

    own = _stat(pid)
    if own is None:
        return None
    fields = [own, *(found for entry in os.listdir("/proc") if entry.isdigit()
                     for found in [_stat(entry)] if found is not None and int(found[1]) == pid)]
    return sum(int(f[11]) + int(f[12]) for f in fields) / os.sysconf("SC_CLK_TCK")


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _CpuMeter:
    """CPU spent per operation in the server process and in this (client) process over a ``with`` block.
    Leaves ``server_ms`` / ``client_ms`` per operation (``None`` without ``/proc``)."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.server_ms: float | None = None
        self.client_ms: float | None = None
        self.operations = 0

    def __enter__(self) -> _CpuMeter:
        self._server, self._client = _cpu_seconds(self.pid), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.2)  # the server's background indexing of the last adds belongs to them
        server, client = _cpu_seconds(self.pid), time.process_time()
        count = max(1, self.operations)
        if server is not None and self._server is not None:
            self.server_ms = round((server - self._server) * 1000 / count, 3)
        self.client_ms = round((client - self._client) * 1000 / count, 3)


def _ceiling(one: _CpuMeter, many: _CpuMeter, one_rate: float, workers: int) -> dict[str, Any]:
    """The highest concurrent-vs-one ratio this machine allows, from CPU per add (see the module docstring).

    ``ratio`` divides the bound by one writer's measured rate, which includes time the writer spent waiting
    (for the loopback, for a core on a busy machine); ``ratio_if_one_writer_never_waited`` divides it by the
    rate one writer would reach if its adds cost only their CPU (server + client), the machine-independent
    figure: concurrency can only overlap waiting and use more cores, never make an add cheaper."""
    cores = _cores()
    if not many.server_ms or many.client_ms is None or not one.server_ms or one.client_ms is None:
        return {"cores": cores, "ratio": None, "why": "no /proc: CPU per add not measured"}
    gil_bound = workers * 1000 / many.server_ms  # each server process runs Python under its own GIL
    cores_bound = cores * 1000 / (many.server_ms + many.client_ms)
    bound = min(gil_bound, cores_bound)
    unwaited_rate = 1000 / (one.server_ms + one.client_ms)
    return {"cores": cores, "server_process_max_per_s": round(gil_bound, 1),
            "machine_max_per_s": round(cores_bound, 1), "ratio": round(bound / one_rate, 3),
            "ratio_if_one_writer_never_waited": round(bound / unwaited_rate, 3),
            "limited_by": f"{workers} server process(es) (GIL)" if gil_bound <= cores_bound else f"{cores} CPU cores"}


class _RawClient:
    """The lightest keep-alive HTTP/1.1 client: one socket (``TCP_NODELAY``), a request pre-encoded but for its
    body, the response read by ``Content-Length`` (what uvicorn sends for JSON). Not a general client: no
    chunked bodies, no redirects; enough to post to ``memroute serve`` without measuring an HTTP library."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        lines = [f"host: {host}:{port}", "content-type: application/json",
                 *(f"{name.lower()}: {value}" for name, value in headers.items())]
        self.head = "\r\n".join(lines)
        self.buffer = b""

    def post(self, path: str, body: dict[str, Any]) -> int:
        data = json.dumps(body).encode()
        self.sock.sendall(f"POST {path} HTTP/1.1\r\n{self.head}\r\ncontent-length: {len(data)}\r\n\r\n".encode()
                          + data)
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]
        status = int(head[9:12])
        if status >= 400:
            raise RuntimeError(f"POST {path}: HTTP {status}: {rest[:length][:200]!r}")
        return status

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def _read(self) -> None:
        self.buffer += self._recv()

    def close(self) -> None:
        self.sock.close()


class _HttpxClient:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        import httpx

        self.client = httpx.Client(base_url=url, headers=headers, timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> int:
        return self.client.post(path, json=body).raise_for_status().status_code

    def close(self) -> None:
        self.client.close()


_CLIENTS: dict[str, Callable[[str, dict[str, str]], Any]] = {"httpx": _HttpxClient, "raw": _RawClient}


def _add_runs(kind: str, url: str, headers: dict[str, str], pid: int, *, adds: int, clients: int,
              workers: int) -> dict[str, Any]:
    """One writer, then ``clients`` concurrent writers (threads, a connection each), with ``kind``'s client;
    rates, CPU per add, the one writer's round trip split into client / server / waiting, the ceiling."""
    make = _CLIENTS[kind]
    one_client = make(url, headers)
    try:
        for i in range(10):  # warm the connection and the route
            one_client.post("/api/memory", {"content": f"{kind} warm-up {i}"})
        with _CpuMeter(pid) as one_meter:
            samples = _timed(lambda: one_client.post("/api/memory",
                                                     {"content": f"{kind} add {time.perf_counter_ns()}"}), adds)
            one_meter.operations = adds
    finally:
        one_client.close()
    per_writer = max(1, adds // clients * 2)

    def writer(worker: int) -> int:
        own = make(url, headers)
        try:
            for i in range(per_writer):
                own.post("/api/memory", {"content": f"{kind} writer {worker} add {i}"})
        finally:
            own.close()
        return per_writer

    with _CpuMeter(pid) as many_meter:
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            written = sum(pool.map(writer, range(clients)))
        concurrent_rate = written / (time.perf_counter() - started)
        many_meter.operations = written
    one_rate = len(samples) / sum(samples)
    wall_ms = 1000 / one_rate
    server_ms, client_ms = one_meter.server_ms, one_meter.client_ms
    waiting = None if server_ms is None or client_ms is None else round(wall_ms - server_ms - client_ms, 3)
    ceiling = _ceiling(one_meter, many_meter, one_rate, workers)
    return {
        "http_1_client": {**_p(samples), "per_s": round(one_rate, 1)},
        f"http_{clients}_clients": {"per_s": round(concurrent_rate, 1)},
        "ratio_concurrent_vs_one": round(concurrent_rate / one_rate, 3),
        "round_trip_ms": {"wall": round(wall_ms, 3), "client_cpu": client_ms, "server_cpu": server_ms,
                          "waiting": waiting},
        "cpu_ms_per_add": {"1_client": {"server": server_ms, "client": client_ms},
                           f"{clients}_clients": {"server": many_meter.server_ms, "client": many_meter.client_ms}},
        "ceiling": ceiling,
        "target_met": concurrent_rate >= 3 * one_rate,
    }


def _timed(call: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def _interleaved_search(mem: Any, url: str, headers: dict[str, str], queries: list[str]) -> dict[str, Any]:
    """Every query three ways in turn: in-process, over HTTP with ``httpx``, over HTTP with the raw client;
    p50 / p95 of each. Interleaved, each in-process search runs after the same pause as an HTTP one (the other
    two round trips), under the same machine state, so the two compare the same calls under one condition (see
    :func:`cold_call_factor` for why a loop of back-to-back in-process searches is not that)."""
    clients: dict[str, Any] = {"http": _HttpxClient(url, headers), "raw_client": _RawClient(url, headers)}
    samples: dict[str, list[float]] = {"in_process": [], "http": [], "raw_client": []}
    try:
        for query in _QUERIES:  # warm both connections and the route
            for client in clients.values():
                client.post("/api/memory/search", {"query": query})
        for query in queries:
            started = time.perf_counter()
            mem.search(query, api_key_id="bench")
            samples["in_process"].append(time.perf_counter() - started)
            for kind, client in clients.items():
                started = time.perf_counter()
                client.post("/api/memory/search", {"query": query})
                samples[kind].append(time.perf_counter() - started)
    finally:
        for client in clients.values():
            client.close()
    return {kind: _p(values) for kind, values in samples.items()}


def cold_call_factor(pause_s: float = 0.005, repeat: int = 200) -> dict[str, float]:
    """How much slower this machine runs a small fixed piece of Python + numpy work (a fancy-indexed mean
    over a 4 MB matrix, a JSON encode, a sort) right after a pause than back to back: the pause is a busy
    spin, so the CPU never idles, yet on a virtual machine with noisy neighbours the work's code and data are
    evicted from the shared caches meanwhile. A server answers every request after such a pause (the round
    trip); a loop of in-process calls does not. ``factor`` is the p50 after a pause over the p50 back to
    back (1.0 on a machine of its own)."""
    import numpy as np

    matrix = np.arange(4096 * 256, dtype=np.float32).reshape(4096, 256)
    rows = list(range(0, 4096, 97))
    document = {"hits": [{"id": f"m{i}", "score": i / 7, "content": "x" * 40} for i in range(60)]}
    pairs = [((i * 7919) % 1000 / 1000, f"m{i}") for i in range(200)]

    def work() -> None:
        matrix[rows].mean(axis=0)
        json.dumps(document)
        sorted(pairs)

    def run(pause: float) -> float:
        samples = []
        for _ in range(repeat):
            if pause:
                until = time.perf_counter() + pause
                while time.perf_counter() < until:
                    pass
            started = time.perf_counter()
            work()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    run(0.0)
    hot, cold = run(0.0), run(pause_s)
    return {"back_to_back_us": round(hot * 1e6, 1), "after_pause_us": round(cold * 1e6, 1),
            "pause_ms": pause_s * 1000, "factor": round(cold / hot, 2)}


def _search_run(kind: str, url: str, headers: dict[str, str], pid: int, queries: list[str]) -> dict[str, Any]:
    """``POST /api/memory/search`` for every query with ``kind``'s client (one keep-alive connection, warmed
    first): p50 / p95, and CPU milliseconds per search in the server process (every thread: the search itself
    and the HTTP handling around it) and in this client process."""
    client = _CLIENTS[kind](url, headers)
    try:
        for query in _QUERIES:  # warm the connection, the route and the embedding cache
            client.post("/api/memory/search", {"query": query})
        position = iter(range(10**9))
        with _CpuMeter(pid) as meter:
            samples = _timed(lambda: client.post("/api/memory/search",
                                                 {"query": queries[next(position) % len(queries)]}), len(queries))
            meter.operations = len(queries)
    finally:
        client.close()
    return {**_p(samples), "cpu_ms": {"server": meter.server_ms, "client": meter.client_ms}}


class _Server:
    """``memroute serve`` in its own process (a server sharing the client's process and GIL would measure
    thread hand-offs, not HTTP), on the bench's deployment."""

    def __init__(self, config: Path, log: Path, workers: int = 1) -> None:
        import httpx

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memroute.cli", "--config", str(config), "serve", "--port", str(port),
             "--workers", str(workers), "--log-level", "warning"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"memroute serve did not start: {log.read_text(errors='replace')}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.log.close()


def run_http_bench(*, memories: int = 1000, searches: int = 300, adds: int = 200, clients: int = 8,
                   data_dir: Path | None = None, workers: int = 1) -> dict[str, Any]:
    """The report (a JSON-able dict); ``workers`` server processes (``memroute serve --workers``)."""
    import memroute
    from memroute.bench.engine import synthetic_contents

    with tempfile.TemporaryDirectory(prefix="memroute-http-bench-") as scratch:
        root = Path(data_dir or scratch)
        root.mkdir(parents=True, exist_ok=True)
        config = root / "bench.toml"
        config.write_text(f'data_dir = "{root.as_posix()}"\n[manager]\nhealth_interval_s = 0\n'
                          '[server]\nmaintenance_interval_s = 0\n', encoding="utf-8")
        mem = memroute.open(str(config))
        server = None
        try:
            for index, content in enumerate(synthetic_contents(memories)):
                mem.add(api_key_id="bench", content=content, key=f"bench:{index}")
            mem.flush(timeout=120)
            _key, secret = mem.keys.create("bench", scopes="read,write", tenant="bench")
            server = _Server(config, root / "serve.log", workers)
            headers = {"Authorization": f"Bearer {secret}"}
            queries = [_QUERIES[i % len(_QUERIES)] for i in range(searches)]
            for query in _QUERIES:  # warm the in-process path (embedding cache)
                mem.search(query, api_key_id="bench")
            position = iter(range(10**9))
            cpu_started = time.process_time()
            local = _timed(lambda: mem.search(queries[next(position) % searches], api_key_id="bench"), searches)
            local_cpu_ms = round((time.process_time() - cpu_started) * 1000 / searches, 3)
            remote = {kind: _search_run(kind, server.url, headers, server.process.pid, queries)
                      for kind in ("httpx", "raw")}
            interleaved = _interleaved_search(mem, server.url, headers, queries)
            cold = cold_call_factor()
            counter = iter(range(10**9))
            local_add = _timed(lambda: mem.add(api_key_id="bench", content=f"in-process add {next(counter)}"), adds)
            mem.flush(timeout=60)  # the in-process indexer must not run on the client's CPU during the HTTP runs
            runs = {kind: _add_runs(kind, server.url, headers, server.process.pid, adds=adds, clients=clients,
                                    workers=workers) for kind in ("httpx", "raw")}
        finally:
            if server is not None:
                server.stop()
            mem.close()
    search_local = {**_p(local), "cpu_ms": local_cpu_ms}
    budget = 1.5 * search_local["p50_ms"] + 1.0
    search_http = remote["httpx"]
    paced_budget = 1.5 * interleaved["in_process"]["p50_ms"] + 1.0
    local_rate = len(local_add) / sum(local_add)
    heavy, light = runs["httpx"], runs["raw"]
    return {
        "memories": memories,
        "workers": workers,
        # the httpx figures stay under "http" (the report's earlier shape); "raw_client" is the lighter client
        "search": {"in_process": search_local, "http": search_http, "raw_client": remote["raw"],
                   "ratio_p50": round(search_http["p50_ms"] / search_local["p50_ms"], 3),
                   "target": "http p50 <= 1.5 x in-process p50 + 1 ms", "budget_ms": round(budget, 3),
                   # the runs above: each side in a loop of its own (in-process back to back, "hot")
                   "target_met_back_to_back": search_http["p50_ms"] <= budget,
                   "target_met_back_to_back_by": [kind for kind, run in remote.items() if run["p50_ms"] <= budget],
                   "interleaved": {**interleaved, "budget_ms": round(paced_budget, 3),
                                   "ratio_p50": round(interleaved["http"]["p50_ms"]
                                                      / interleaved["in_process"]["p50_ms"], 3)},
                   # judged on the interleaved run: the same searches, one after the other, under one machine state
                   "target_met": interleaved["http"]["p50_ms"] <= paced_budget,
                   "target_met_by": [kind for kind in ("http", "raw_client")
                                     if interleaved[kind]["p50_ms"] <= paced_budget],
                   "cold_call_factor": cold},
        "add": {"in_process": {**_p(local_add), "per_s": round(local_rate, 1)},
                # the httpx figures stay at the top level (the report's earlier shape); raw is the lighter client
                **{k: v for k, v in heavy.items() if k != "target_met"},
                "ratio_http_vs_in_process": round(local_rate / heavy["http_1_client"]["per_s"], 3),
                "raw_client": light,
                "target": f"{clients} concurrent writers >= 3 x one writer's rate",
                "target_met": heavy["target_met"] or light["target_met"],
                "target_met_by": [kind for kind, run in runs.items() if run["target_met"]],
                "target_possible_here": max((run["ceiling"].get("ratio_if_one_writer_never_waited") or 3.0)
                                            for run in runs.values()) >= 3.0},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--adds", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run_http_bench(memories=args.memories, searches=args.searches, adds=args.adds, workers=args.workers)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
