"""The Notion backend configured through memroute.toml-shaped settings and driven through ``memroute.open``:
as the primary, and as a fallback that receives the primary's writes through the outbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memroute
from memroute_builtins.backends.notion import schema as ns
from tests.servers.notion_fake import NotionFake, running_notion_fake


@pytest.fixture
def fake() -> Iterator[NotionFake]:
    with running_notion_fake() as server:
        yield server


def notion_options(fake: NotionFake) -> dict[str, Any]:
    return {"type": "notion", "token": "${NOTION_TOKEN}", "database_id": fake.add_database(ns.database_properties()),
            "base_url": fake.base_url, "allow_private": True, "max_retries": 1, "max_retry_delay": 0.05}


def test_notion_as_the_primary(fake: NotionFake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTION_TOKEN", fake.token)
    config = {"backends": {"primary": "notion", "notion": notion_options(fake)}, "embedding": {"source": "none"}}
    with memroute.open(config) as mem:
        stored = mem.add(api_key_id="key-A", key="pref:lang", content="I prefer TypeScript for frontend work")
        mem.add(api_key_id="key-B", key="pref:lang", content="B prefers TypeScript too")
        assert mem.get(stored.id, api_key_id="key-A") is not None
        assert mem.get(stored.id, api_key_id="key-B") is None
        result = mem.search("typescript frontend", api_key_id="key-A", strategy="hybrid")
        assert [m.id for m in result.memories] == [stored.id]
        assert mem.list(api_key_id="key-A").total == 1
        assert mem.delete(stored.id, api_key_id="key-B") is False
        assert mem.delete(stored.id, api_key_id="key-A") is True
        assert mem.list(api_key_id="key-A").total == 0
    assert fake.calls("POST /v1/search") == []


def test_notion_fallback_receives_the_primary_writes(fake: NotionFake, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTION_TOKEN", fake.token)
    config = {
        "backends": {"primary": "main", "fallbacks": ["notion"],
                     "main": {"type": "sqlite", "path": str(tmp_path / "main.db")},
                     "notion": notion_options(fake)},
        "embedding": {"source": "none"},
    }
    with memroute.open(config) as mem:
        stored = mem.add(api_key_id="key-A", key="pref:editor", content="I use Neovim 🐍", metadata={"n": 1})
        assert mem.flush(timeout=30)
        pages = [p for p in fake.pages.values() if not p["in_trash"]]
        assert len(pages) == 1
        assert ns.page_to_memory(pages[0]).same_as(stored)
        assert mem.delete(stored.id, api_key_id="key-A") is True
        assert mem.flush(timeout=30)
        assert all(p["in_trash"] for p in fake.pages.values())
