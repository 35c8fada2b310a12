"""HTTP benchmark of ``memroute serve`` against the same calls in-process, in one run (``memroute bench --http``
runs this module; ``python -m memroute.server.bench --json`` too).

Measures, on a fresh SQLite deployment in a temporary directory with ``N`` memories for one tenant:

- search p50 / p95 in-process (``mem.search``) and over HTTP (``POST /api/memory/search``, keep-alive), and
  the ratio; target: HTTP p50 ≤ 1.5 x in-process p50 + 1 ms;
- single adds in-process and over HTTP with 1 and 8 concurrent clients (``POST /api/memory``), and the
  8-vs-1 throughput ratio; target: ≥ 3x.

The server is the real ``memroute serve`` in its own process on a loopback port, on the same deployment as the
in-process baseline; the clients are ``httpx`` clients with keep-alive.
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


def _timed(call: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


class _Server:
    """``memroute serve`` in its own process (a server sharing the client's process and GIL would measure
    thread hand-offs, not HTTP), on the bench's deployment."""

    def __init__(self, config: Path, log: Path) -> None:
        import httpx

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memroute.cli", "--config", str(config), "serve", "--port", str(port),
             "--log-level", "warning"], stdout=self.log, stderr=subprocess.STDOUT)
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


def run_http_bench(*, memories: int = 1000, searches: int = 60, adds: int = 200, clients: int = 8,
                   data_dir: Path | None = None) -> dict[str, Any]:
    import httpx

    import memroute
    from memroute.bench import synthetic_contents

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
            server = _Server(config, root / "serve.log")
            headers = {"Authorization": f"Bearer {secret}"}
            queries = [_QUERIES[i % len(_QUERIES)] for i in range(searches)]
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
                for query in _QUERIES:  # warm both paths (embedding cache, connection)
                    mem.search(query, api_key_id="bench")
                    client.post("/api/memory/search", json={"query": query}).raise_for_status()
                position = iter(range(10**9))
                local = _timed(lambda: mem.search(queries[next(position) % searches], api_key_id="bench"), searches)
                position = iter(range(10**9))
                remote = _timed(lambda: client.post("/api/memory/search",
                                                    json={"query": queries[next(position) % searches]})
                                .raise_for_status(), searches)
                counter = iter(range(10**9))
                local_add = _timed(lambda: mem.add(api_key_id="bench", content=f"in-process add {next(counter)}"),
                                   adds)
                remote_add = _timed(lambda: client.post("/api/memory", json={"content": f"http add {next(counter)}"})
                                    .raise_for_status(), adds)

            def writer(worker: int) -> int:
                with httpx.Client(base_url=server.url, headers=headers, timeout=30) as own:
                    for i in range(adds // clients * 2):
                        own.post("/api/memory", json={"content": f"writer {worker} add {i}"}).raise_for_status()
                return adds // clients * 2

            started = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                written = sum(pool.map(writer, range(clients)))
            concurrent_rate = written / (time.perf_counter() - started)
        finally:
            if server is not None:
                server.stop()
            mem.close()
    search_local, search_http = _p(local), _p(remote)
    one_rate = len(remote_add) / sum(remote_add)
    budget = 1.5 * search_local["p50_ms"] + 1.0
    return {
        "memories": memories,
        "search": {"in_process": search_local, "http": search_http,
                   "ratio_p50": round(search_http["p50_ms"] / search_local["p50_ms"], 3),
                   "target": "http p50 <= 1.5 x in-process p50 + 1 ms", "budget_ms": round(budget, 3),
                   "target_met": search_http["p50_ms"] <= budget},
        "add": {"in_process": {**_p(local_add), "per_s": round(len(local_add) / sum(local_add), 1)},
                "http_1_client": {**_p(remote_add), "per_s": round(one_rate, 1)},
                f"http_{clients}_clients": {"per_s": round(concurrent_rate, 1)},
                "ratio_http_vs_in_process": round((len(local_add) / sum(local_add)) / one_rate, 3),
                "ratio_concurrent_vs_one": round(concurrent_rate / one_rate, 3),
                "target": f"{clients} concurrent writers >= 3 x one writer's rate",
                "target_met": concurrent_rate >= 3 * one_rate},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--searches", type=int, default=60)
    parser.add_argument("--adds", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run_http_bench(memories=args.memories, searches=args.searches, adds=args.adds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
