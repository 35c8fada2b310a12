"""The primary fails and recovers repeatedly during writes; the outbox replays: nothing acknowledged lost,
primary and fallback equal, indexes consistent."""

from __future__ import annotations

import memroute
from memroute.errors import MemrouteError
from tests.faults.conftest import check_store, store_config
from tests.servers.faulty_sqlite import FaultySqlitePlugin


def test_primary_outage_during_writes_with_replay(tmp_path, register_plugin, plugin_manager):
    faulty = FaultySqlitePlugin()
    register_plugin(faulty, name="faulty-sqlite")
    config = store_config(tmp_path)
    outage = {**config, "backends": {**config["backends"], "main": {"type": "faulty-sqlite",
                                                                    "path": str(tmp_path / "main.db")}}}
    acked: dict[str, str] = {}
    with memroute.open(outage, use_env=False, plugins=plugin_manager) as mem:
        main = faulty.instances["main"]
        kept = None
        for i in range(90):
            if i % 30 == 10:
                main.fail()
            elif i % 30 == 20:
                main.recover()
            try:
                memory = mem.add(api_key_id=f"t{i % 2}", key=f"k{i % 25}", content=f"version {i}")
            except MemrouteError:
                continue
            acked[memory.id] = memory.key
            if i % 7 == 0:
                kept = memory
            elif i % 11 == 0 and kept is not None:
                mem.update(kept.id, api_key_id=kept.api_key_id, content=f"edited at {i}")
        main.recover()
        assert mem.flush(30)
    check_store(config, acked)
