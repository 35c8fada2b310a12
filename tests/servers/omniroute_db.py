"""A database of the reference system (OmniRoute's memory subsystem), built as its migrations build it and
filled the way its code writes, quirks included. Used by the import tests (docs/omniroute-compatibility.md).

The schema is the reference's ``memories`` table after migrations 015 (the table), 023 / 203 (``memory_id``
and the FTS5 index with its triggers), 083 (``needs_reindex``) and 111 (access telemetry), written with the
standard library's ``sqlite3`` as a foreign writer (the reference uses better-sqlite3), never with memroute's
own code. What it holds, for ``build_reference_db(path, per_tenant=N)``:

* tenants ``tenant-a``, ``tenant-b`` and ``tenant-c`` with N memories each, plus a few ownerless rows
  (``api_key_id = ""``, which the reference's REST and MCP surfaces allowed);
* camelCase JSON metadata as its extractor writes it (``{"category", "extractedAt", "source"}``), some
  metadata that is not JSON and some that is a JSON array (the reference reads both back as ``{}``);
* ``""`` sessions (the app's "no session") and real ones; JS ISO timestamps (``…T…Z``) and SQLite's
  ``datetime('now')`` default (no ``T``, no zone);
* expired rows, rows with a ``NULL`` or ``""`` key, and duplicate ``(api_key_id, key)`` pairs (the reference
  has no unique index there);
* one needle per tenant (``needle(tenant)``) that a keyword search must find after the import.
"""

from __future__ import annotations

import json
import random
import sqlite3
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs

__all__ = ["ReferenceDb", "TENANTS", "build_reference_db", "needle"]

TENANTS = ("tenant-a", "tenant-b", "tenant-c")

SCHEMA = """
-- 015_create_memories.sql (its header says 014)
CREATE TABLE IF NOT EXISTS memories (
  id TEXT PRIMARY KEY,
  api_key_id TEXT NOT NULL,
  session_id TEXT,
  type TEXT NOT NULL CHECK (type IN ('factual','episodic','procedural','semantic')),
  key TEXT,
  content TEXT NOT NULL,
  metadata TEXT,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  updated_at TEXT NOT NULL DEFAULT (datetime('now')),
  expires_at TEXT
);
CREATE INDEX IF NOT EXISTS idx_memories_api_key ON memories(api_key_id);
CREATE INDEX IF NOT EXISTS idx_memories_session ON memories(session_id);
CREATE INDEX IF NOT EXISTS idx_memories_type ON memories(type);
CREATE INDEX IF NOT EXISTS idx_memories_expires ON memories(expires_at);
-- 023: the INTEGER join key
ALTER TABLE memories ADD COLUMN memory_id INTEGER;
CREATE UNIQUE INDEX IF NOT EXISTS idx_memories_memory_id ON memories(memory_id);
-- 083: the vector side
ALTER TABLE memories ADD COLUMN needs_reindex INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS idx_memories_needs_reindex ON memories(needs_reindex) WHERE needs_reindex = 1;
CREATE TABLE IF NOT EXISTS memory_vec_meta (
  id INTEGER PRIMARY KEY CHECK (id = 1), active_dim INTEGER, embedding_signature TEXT, last_reset_at TEXT,
  vec_loaded INTEGER NOT NULL DEFAULT 0);
INSERT OR IGNORE INTO memory_vec_meta VALUES (1, NULL, NULL, NULL, 0);
-- 111: access telemetry
ALTER TABLE memories ADD COLUMN access_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN last_accessed_at TEXT;
-- 203_memory_fts_content_rowid.sql
CREATE VIRTUAL TABLE memory_fts USING fts5(content, key, content='memories', content_rowid='memory_id');
CREATE TRIGGER memory_fts_ai AFTER INSERT ON memories WHEN new.memory_id IS NOT NULL BEGIN
  INSERT INTO memory_fts(rowid, content, key) VALUES (new.memory_id, new.content, new.key);
END;
CREATE TRIGGER memory_fts_ai_assign AFTER INSERT ON memories WHEN new.memory_id IS NULL BEGIN
  UPDATE memories SET memory_id = (SELECT COALESCE(MAX(memory_id), 0) + 1 FROM memories) WHERE id = new.id;
END;
CREATE TRIGGER memory_fts_ad AFTER DELETE ON memories WHEN old.memory_id IS NOT NULL BEGIN
  INSERT INTO memory_fts(memory_fts, rowid, content, key) VALUES ('delete', old.memory_id, old.content, old.key);
END;
CREATE TRIGGER memory_fts_au AFTER UPDATE ON memories
WHEN old.content IS NOT new.content OR old.key IS NOT new.key OR old.memory_id IS NOT new.memory_id BEGIN
  INSERT INTO memory_fts(memory_fts, rowid, content, key)
    SELECT 'delete', old.memory_id, old.content, old.key WHERE old.memory_id IS NOT NULL;
  INSERT INTO memory_fts(rowid, content, key)
    SELECT new.memory_id, new.content, new.key WHERE new.memory_id IS NOT NULL;
END;
"""

_SUBJECTS = ("TypeScript", "Rust", "Postgres", "Kubernetes", "vim", "dark mode", "green tea", "cycling",
             "jazz", "Go", "React", "tabs", "Linux", "hiking", "sushi", "chess", "Python", "Terraform")
_FRAMES = ("I prefer {} for side projects", "I always use {} at work", "I decided to adopt {}",
           "I usually reach for {} first", "I never liked {} much", "My team picked {} last quarter")
_NEEDLES = {"tenant-a": "Alice's cat is called Miso and sleeps on the keyboard",
            "tenant-b": "Bob keeps his sourdough starter named Clint in the fridge",
            "tenant-c": "Carol's favourite mountain is Kilimanjaro"}


def needle(tenant: str) -> str:
    """The one memory of ``tenant`` a keyword search must find after the import."""
    return _NEEDLES[tenant]


@attrs.frozen(kw_only=True)
class ReferenceDb:
    """What was written, for the tests to compare with the import's report."""

    path: Path
    rows: int
    per_tenant: dict[str, int]
    """Rows per tenant, duplicates included."""
    unowned: int
    expired: dict[str, int]
    duplicates: dict[str, int]
    """Older rows of a duplicated (api_key_id, key), per tenant: superseded by the newest."""
    no_key: int
    bad_metadata: int
    sample: dict[str, Any]
    """One carried row as stored (its column values), for a field-by-field check."""


def _iso(when: datetime) -> str:
    # What JavaScript's toISOString() writes.
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def build_reference_db(path: Path, *, per_tenant: int = 1000, seed: int = 31) -> ReferenceDb:
    """Write the reference's database at ``path`` (see the module docstring)."""
    rng = random.Random(seed)
    now = datetime.now(timezone.utc)
    connection = sqlite3.connect(path)
    connection.executescript(SCHEMA)
    rows: list[tuple[Any, ...]] = []
    per: dict[str, int] = {}
    expired: dict[str, int] = {}
    duplicates: dict[str, int] = {}
    no_key = bad_metadata = 0
    sample: dict[str, Any] = {}

    def add(tenant: str, key: str | None, content: str, *, created: datetime, meta: Any = None,
            session: str = "", kind: str = "factual", expires: str | None = None, sqlite_time: bool = False,
            accessed: int = 0) -> tuple[Any, ...]:
        stamp = created.strftime("%Y-%m-%d %H:%M:%S") if sqlite_time else _iso(created)
        metadata = meta if isinstance(meta, str) or meta is None else json.dumps(meta)
        row = (str(uuid.uuid4()), tenant, session, kind, key, content, metadata, stamp, stamp, expires,
               accessed, _iso(created + timedelta(days=1)) if accessed else None)
        rows.append(row)
        return row

    for tenant in TENANTS:
        per[tenant] = expired[tenant] = duplicates[tenant] = 0
        for i in range(per_tenant):
            created = now - timedelta(days=rng.randint(1, 300), seconds=rng.randint(0, 86_399))
            subject = rng.choice(_SUBJECTS)
            content = rng.choice(_FRAMES).format(subject) + f" (note {i} of {tenant})"
            category = rng.choice(("preference", "decision", "pattern"))
            kind = {"preference": "factual", "decision": "episodic", "pattern": "factual"}[category]
            meta: Any = {"category": category, "extractedAt": _iso(created), "source": "llm_response"}
            key: str | None = f"{category}:{subject.lower().replace(' ', '_')}_{i}"
            expires = None
            if i % 50 == 7:
                expires = _iso(now - timedelta(days=2))  # expired: hidden by retrieval, kept by the import
                expired[tenant] += 1
            elif i % 50 == 8:
                expires = _iso(now + timedelta(days=20))
            if i % 97 == 3:
                key = None if i % 2 else ""
                no_key += 1
            if i % 89 == 5:
                meta = "{not json" if i % 2 else "[1, 2, 3]"
                bad_metadata += 1
            row = add(tenant, key, content, created=created, meta=meta, kind=kind, expires=expires,
                      session=f"sess-{i % 7}" if i % 3 == 0 else "", sqlite_time=i % 11 == 0,
                      accessed=i % 5)
            per[tenant] += 1
            if tenant == "tenant-a" and i == 12:
                sample = dict(zip(("id", "api_key_id", "session_id", "type", "key", "content", "metadata",
                                   "created_at", "updated_at", "expires_at", "access_count",
                                   "last_accessed_at"), row, strict=True))
            if i % 40 == 9 and key:
                # A duplicate written later under the same key: the reference's race (no unique index).
                add(tenant, key, content + " (restated)", created=created + timedelta(hours=1), meta=meta,
                    kind=kind)
                per[tenant] += 1
                duplicates[tenant] += 1
        add(tenant, "fact:needle", needle(tenant), created=now - timedelta(days=3),
            meta={"category": "pattern", "extractedAt": _iso(now), "source": "llm_response"})
        per[tenant] += 1
    for i in range(5):
        add("", f"preference:ownerless_{i}", f"An ownerless memory {i} from the REST API", created=now)
    connection.executemany(
        "INSERT INTO memories (id, api_key_id, session_id, type, key, content, metadata, created_at, updated_at, "
        "expires_at, access_count, last_accessed_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    connection.commit()
    connection.close()
    return ReferenceDb(path=path, rows=len(rows), per_tenant=per, unowned=5, expired=expired,
                       duplicates=duplicates, no_key=no_key, bad_metadata=bad_metadata, sample=sample)
