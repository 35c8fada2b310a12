"""Scheduled maintenance while ``memroute serve`` runs (filled in below)."""

from __future__ import annotations

from typing import Any

from memroute.settings import ServerSettings


class Maintenance:
    def __init__(self, mem: Any, settings: ServerSettings) -> None:
        self.mem = mem
        self.settings = settings

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
