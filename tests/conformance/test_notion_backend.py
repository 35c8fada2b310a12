"""The Notion backend against the storage backend conformance suite, over real HTTP to the Notion fake."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from memroute.interfaces import MemoryBackend
from memroute.testing import BackendContract
from memroute_builtins.backends.notion import schema as ns
from memroute_builtins.backends.notion.backend import NotionBackend, NotionSettings
from tests.servers.notion_fake import NotionFake, running_notion_fake


@pytest.fixture(scope="module")
def notion_fake() -> Iterator[NotionFake]:
    # One server for the module; every test gets its own database, so tests never see each other's pages.
    with running_notion_fake() as fake:
        yield fake


@pytest.fixture
def database_id(notion_fake: NotionFake) -> str:
    return notion_fake.add_database(ns.database_properties())


def _open(fake: NotionFake, database_id: str) -> NotionBackend:
    settings = NotionSettings(token=fake.token, database_id=database_id, base_url=fake.base_url, allow_private=True,
                              max_retries=2, max_retry_delay=0.05, requests_per_second=0)
    backend = NotionBackend("conformance", settings)
    backend.initialize()
    return backend


class TestNotionBackend(BackendContract):
    @pytest.fixture
    def backend(self, notion_fake: NotionFake, database_id: str) -> Iterator[MemoryBackend]:
        yield _open(notion_fake, database_id)

    @pytest.fixture
    def reopen(self, notion_fake: NotionFake, database_id: str) -> Callable[[MemoryBackend], MemoryBackend]:
        def reopen(old: MemoryBackend) -> MemoryBackend:
            old.close()
            return _open(notion_fake, database_id)

        return reopen
