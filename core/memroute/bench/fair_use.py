"""One tenant floods ``memroute serve``; how slow do another tenant's searches get (``python -m
memroute.bench.fair_use``)?

The real server runs in its own process on a loopback port. Tenant ``quiet`` searches one request at a time and
its p50 is measured three times in one run: unloaded (the baseline), while tenant ``flood`` keeps ``--clients``
searches in flight (50 by default, from a process of its own, retrying at once on every answer, 429s included)
with a key at the default limits (which one user never reaches, so nothing is refused), and the same flood from
a key with limits of its own (``--flood-rate`` requests a minute, 600 by default, and ``--flood-concurrency``
in flight; ``memroute keys limits``). The target: the quiet tenant's p50 under the limited flood within 2x its
unloaded p50. Issue 29 measured 5 ms unloaded and 137 ms under a 50-request flood before fair use.

Measured on the 2-core development VM (200 memories a tenant, 200 searches): 2.1 ms unloaded; 65 ms (31x) under
the flood at the default limits; 2.0 ms (0.96x) under the flood at 600 a minute. A concurrency cap alone does not
help here: a short search runs on the event loop and is done before the next request starts, so a key never
has two in flight; what slows a flood down is its rate limit, with each 429 held a quarter second.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["run_fair_use_bench"]


def _quiet_p50(url: str, secret: str, searches: int) -> dict[str, float]:
    import httpx

    from memroute.bench.http import _QUERIES, _p

    samples = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=60) as client:
        for index in range(searches):
            started = time.perf_counter()
            response = client.post("/api/memory/search", json={"query": _QUERIES[index % len(_QUERIES)]})
            samples.append(time.perf_counter() - started)
            response.raise_for_status()
    return _p(samples)


def _flood(url: str, secret: str, clients: int, stop: threading.Event, answers: dict[str, int]) -> None:
    """``clients`` threads, each with one keep-alive connection and the lightest client (so that the flood is
    limited by the server, not by this process), posting searches back to back until ``stop``."""
    from memroute.bench.http import _QUERIES, _RawClient

    lock = threading.Lock()

    def one(worker: int) -> None:
        client = _RawClient(url, {"Authorization": f"Bearer {secret}"})
        index = worker
        try:
            while not stop.is_set():
                try:
                    status = str(client.post("/api/memory/search", {"query": _QUERIES[index % len(_QUERIES)]}))
                except RuntimeError as refused:  # the raw client raises on 4xx: a 429, expected
                    status = str(refused).split("HTTP ", 1)[1][:3]
                with lock:
                    answers[status] = answers.get(status, 0) + 1
                index += 1
        finally:
            client.close()

    threads = [threading.Thread(target=one, args=(worker,), daemon=True) for worker in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _start_flood(url: str, secret: str, clients: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "memroute.bench.fair_use", "--flood", url, secret, str(clients)],
                            stdout=subprocess.PIPE, text=True)


def _under_flood(url: str, quiet: str, flooder: str, clients: int, searches: int) -> dict[str, Any]:
    flood = _start_flood(url, flooder, clients)
    try:
        time.sleep(2.0)  # the flood at full strength
        measured = _quiet_p50(url, quiet, searches)
    finally:
        flood.terminate()
        out, _ = flood.communicate(timeout=30)
    return {"quiet": measured, "flood_answers": json.loads(out) if out.strip() else None}


def run_fair_use_bench(*, memories: int = 500, searches: int = 200, clients: int = 50,
                       flood_concurrency: int = 2, flood_rate: int = 600) -> dict[str, Any]:
    """The report (a JSON-able dict)."""
    import memroute
    from memroute.bench.engine import synthetic_contents
    from memroute.bench.http import _Server
    from memroute.deployment.fair_use import KeyLimits

    with tempfile.TemporaryDirectory(prefix="memroute-fair-use-bench-") as scratch:
        root = Path(scratch)
        config = root / "bench.toml"
        config.write_text(f'data_dir = "{root.as_posix()}"\n[manager]\nhealth_interval_s = 0\n'
                          '[server]\nmaintenance_interval_s = 0\n', encoding="utf-8")
        mem = memroute.open(str(config))
        server = None
        try:
            for tenant in ("quiet", "flood"):
                for index, content in enumerate(synthetic_contents(memories)):
                    mem.add(api_key_id=tenant, content=content, key=f"{tenant}:{index}")
            mem.flush(timeout=300)
            _key, quiet = mem.keys.create("quiet", scopes="read", tenant="quiet")
            _key, unlimited = mem.keys.create("flood, default limits", scopes="read", tenant="flood")
            limited_key, limited = mem.keys.create("flood, limited", scopes="read", tenant="flood")
            mem.fair_use.set_limits(limited_key.id, KeyLimits(concurrent_requests=flood_concurrency,
                                                              requests_per_minute=flood_rate or None))
            server = _Server(config, root / "serve.log")
            _quiet_p50(server.url, quiet, 20)  # warm-up
            unloaded = _quiet_p50(server.url, quiet, searches)
            default_limits = _under_flood(server.url, quiet, unlimited, clients, searches)
            own_limits = _under_flood(server.url, quiet, limited, clients, searches)
        finally:
            if server is not None:
                server.stop()
            mem.close()
    ratio = round(own_limits["quiet"]["p50_ms"] / unloaded["p50_ms"], 2)
    return {
        "memories_per_tenant": memories, "flood_clients": clients, "flood_concurrency": flood_concurrency,
        "flood_requests_per_minute": flood_rate or "default",
        "quiet_unloaded": unloaded,
        "flood_at_default_limits": {**default_limits,
                                    "ratio_p50": round(default_limits["quiet"]["p50_ms"] / unloaded["p50_ms"], 2)},
        "flood_at_its_own_limits": {**own_limits, "ratio_p50": ratio},
        "target": "quiet tenant's p50 under the limited flood <= 2 x unloaded", "target_met": ratio <= 2.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--flood", nargs=3, metavar=("URL", "SECRET", "CLIENTS"),
                        help="(internal) flood until SIGTERM, then print the answers' status counts")
    parser.add_argument("--memories", type=int, default=500)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--flood-concurrency", type=int, default=2)
    parser.add_argument("--flood-rate", type=int, default=600, help="the flooding key's requests a minute")
    args = parser.parse_args(argv)
    if args.flood:
        import signal

        url, secret, clients = args.flood
        answers: dict[str, int] = {}
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        _flood(url, secret, int(clients), stop, answers)
        print(json.dumps(answers))
        return
    print(json.dumps(run_fair_use_bench(memories=args.memories, searches=args.searches, clients=args.clients,
                                        flood_concurrency=args.flood_concurrency, flood_rate=args.flood_rate),
                     indent=2))


if __name__ == "__main__":
    main()
