"""A small mutation run: one-line mutations of the code that keeps tenants apart, upserts, sanitises FTS
queries and orders the outbox. Each must be caught by the tests named with it (issue 16: the upsert lookup
matching on ``key`` alone and a dropped FTS owner match both passed the whole suite before).

``python -m tests.mutation.mutants`` runs them all and prints one line per mutant; the test
``tests/mutation/test_mutants.py`` does the same in the default run. Each mutant copies ``core/`` and
``plugins/`` to a temporary directory, applies its one-line change, and runs only its own tests against the
copy (``PYTHONPATH``), so the run stays bounded (a few seconds per mutant).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
SQLITE = "plugins/memroute_builtins/backends/sqlite"
CONFORMANCE = "tests/conformance/test_sqlite_backend.py::TestSqliteBackend"


class Mutant(NamedTuple):
    name: str
    path: str
    original: str
    mutated: str
    tests: tuple[str, ...]


MUTANTS: tuple[Mutant, ...] = (
    Mutant("isolation: the owner filter of every search path", f"{SQLITE}/backend.py",
           'sql = [f"{p}api_key_id = ?", ', 'sql = [f"({p}api_key_id = ? OR 1)", ',
           (f"{CONFORMANCE}::test_tenant_isolation", f"{CONFORMANCE}::test_search_filters_with_two_tenants")),
    Mutant("upsert: the lookup matches on key alone", f"{SQLITE}/schema.py",
           "FROM memories WHERE api_key_id = ? AND key = ?\"",
           "FROM memories WHERE (api_key_id = ? OR 1) AND key = ?\"",
           (f"{CONFORMANCE}::test_upsert_never_touches_another_tenants_key",)),
    Mutant("upsert: a replicated put evicts another tenant's memory with the key", f"{SQLITE}/schema.py",
           "ON m.api_key_id = j.value ->> 0 AND m.key = j.value ->> 1", "ON m.key = j.value ->> 1",
           (f"{CONFORMANCE}::test_same_key_in_two_tenants_update_delete_and_put",
            f"{CONFORMANCE}::test_put_replaces_other_id_with_same_key")),
    Mutant("FTS sanitising: terms are not quoted", f"{SQLITE}/schema.py",
           """return " OR ".join(f'"{term}"' for term in seen.values())""",
           """return " OR ".join(term for term in seen.values())""",
           (f"{CONFORMANCE}::test_search_never_raises_on_query_syntax",)),
    Mutant("FTS owner match dropped", f"{SQLITE}/backend.py",
           """match = f'owner : "{owner}" AND {{content key}} : ({terms})'""",
           """match = f'{{content key}} : ({terms})'""",
           ("tests/unit/test_sqlite_backend.py::test_keyword_search_reads_only_the_tenants_postings",)),
    Mutant("outbox ordering: newest entry first", "core/memroute/routing/outbox.py",
           "FROM outbox WHERE target = ? ORDER BY id LIMIT 1", "FROM outbox WHERE target = ? ORDER BY id DESC LIMIT 1",
           ("tests/unit/test_outbox.py::test_entries_are_fifo_per_target_and_removed_only_explicitly",)),
    Mutant("manager: another tenant's search hits kept", "core/memroute/routing/manager.py",
           "hits = [h for h in raw if h.memory.api_key_id == query.api_key_id]", "hits = list(raw)",
           ("tests/unit/test_manager_foreign_rows.py",)),
)


def run(mutant: Mutant, timeout: float = 120.0) -> tuple[bool, str]:
    """Apply ``mutant`` to a copy of the sources and run its tests; ``(caught, detail)``."""
    with tempfile.TemporaryDirectory(prefix="memroute-mutant-") as tmp:
        copy = Path(tmp)
        for tree in ("core", "plugins"):
            shutil.copytree(ROOT / tree, copy / tree, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        target = copy / mutant.path
        text = target.read_text(encoding="utf-8")
        if text.count(mutant.original) != 1:
            return False, f"the line to mutate is not in {mutant.path} exactly once (the code moved: update it)"
        target.write_text(text.replace(mutant.original, mutant.mutated), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy / "core"), str(copy / "plugins")])}
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
             "-o", "addopts=", *mutant.tests],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
        )
        summary = (result.stdout.strip().splitlines() or [""])[-1]
        return result.returncode == 1, summary


def main() -> int:
    survived = 0
    for mutant in MUTANTS:
        caught, detail = run(mutant)
        survived += not caught
        print(f"{'caught  ' if caught else 'SURVIVED'} {mutant.name}: {detail}")
    print(f"{len(MUTANTS) - survived} of {len(MUTANTS)} mutants caught")
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main())
