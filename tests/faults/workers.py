"""Child processes for the fault suite: ``python -m tests.faults.workers MODE CONFIG_JSON [ARGS...]``.

Each prints one line per acknowledged write (``ack <id> <key>``) and flushes it *after* the call returned,
so the parent knows exactly which writes memroute acknowledged before it was killed.
"""

from __future__ import annotations

import json
import os
import sys

import memroute


def _open(config: dict) -> memroute.Memroute:
    return memroute.open(config, use_env=False)


def add_loop(config: dict, tenant: str, count: str) -> None:
    with _open(config) as mem:
        print("ready", flush=True)
        for i in range(int(count)):
            memory = mem.add(api_key_id=tenant, key=f"{tenant}:{os.getpid()}:{i}", content=f"note {i} about ramen")
            print(f"ack {memory.id} {memory.key}", flush=True)


def upsert_loop(config: dict, count: str, keys: str) -> None:
    """Upserts over a few shared keys: the keys collide across processes on purpose."""
    with _open(config) as mem:
        print("ready", flush=True)
        for i in range(int(count)):
            memory = mem.add(api_key_id="shared", key=f"k{i % int(keys)}", content=f"{os.getpid()} wrote {i}")
            print(f"ack {memory.id} {memory.key}", flush=True)
        mem.flush(30)


def import_file(config: dict, path: str) -> None:
    with _open(config) as mem, open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
        print("ready", flush=True)
        report = mem.import_jsonl(lines)
        print(f"imported {report.imported}", flush=True)


def open_once(config: dict) -> None:
    with _open(config) as mem:
        mem.add(api_key_id="first-open", content=f"opened by {os.getpid()}")
    print("opened", flush=True)


MODES = {"add_loop": add_loop, "upsert_loop": upsert_loop, "import_file": import_file, "open_once": open_once}

if __name__ == "__main__":
    mode, config_json, *args = sys.argv[1:]
    MODES[mode](json.loads(config_json), *args)
