"""The Obsidian backend against the storage backend conformance suite, over real HTTP(S) to the loopback
fake of the Local REST API: plugin 5.x over HTTPS with a pinned certificate, and 3.x over plain HTTP
(4.x specifics are unit-tested)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memroute.interfaces import MemoryBackend
from memroute.testing import BackendContract
from memroute_builtins.backends.obsidian.backend import ObsidianBackend, ObsidianSettings
from tests.servers.obsidian_fake import ObsidianFake, make_self_signed_cert


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_self_signed_cert(tmp_path_factory.mktemp("tls"))


class _ObsidianContract(BackendContract):
    __test__ = False
    plugin_version = "5.1.0"
    tls = False

    @pytest.fixture
    def fake(self, tmp_path: Path, certificate: tuple[Path, Path]) -> Iterator[ObsidianFake]:
        with ObsidianFake(tmp_path / "vault", plugin_version=self.plugin_version,
                          tls_cert=certificate if self.tls else None) as fake:
            yield fake

    def _open(self, fake: ObsidianFake) -> ObsidianBackend:
        verify = str(fake.cert_path) if fake.cert_path else True
        backend = ObsidianBackend("conformance", ObsidianSettings(api_key=fake.api_key, base_url=fake.base_url,
                                                                  verify=verify, timeout=5))
        backend.initialize()
        return backend

    @pytest.fixture
    def backend(self, fake: ObsidianFake) -> Iterator[MemoryBackend]:
        yield self._open(fake)

    @pytest.fixture
    def reopen(self, fake: ObsidianFake) -> Callable[[MemoryBackend], MemoryBackend]:
        def reopen(old: MemoryBackend) -> MemoryBackend:
            old.close()
            return self._open(fake)

        return reopen


class TestObsidian5Https(_ObsidianContract):
    """Plugin 5.1.0 over HTTPS, the plugin's self-signed certificate pinned with ``verify``."""

    __test__ = True
    plugin_version = "5.1.0"
    tls = True


class TestObsidian3Http(_ObsidianContract):
    __test__ = True
    plugin_version = "3.6.2"
