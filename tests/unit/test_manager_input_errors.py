"""No error caused by the caller's input counts against a circuit breaker (issue 16, item 1, the manager
half). The models refuse surrogates and deep nesting at the door; this is the net behind it: a backend that
still raises ``UnicodeEncodeError`` or ``RecursionError`` on some input reports a ValidationError, and three
such calls no longer open the primary's breaker for every tenant."""

from __future__ import annotations

import pytest

from memroute.config.settings import ManagerSettings
from memroute.errors import ValidationError
from memroute.models import Memory, NewMemory
from memroute.routing.manager import MemoryManager
from memroute.testing.memory import InMemoryBackend


class Picky(InMemoryBackend):
    def create(self, new: NewMemory) -> Memory:
        if new.content.startswith("encode"):
            "\ud800".encode("utf-8")
        if new.content.startswith("deep"):
            raise RecursionError("maximum recursion depth exceeded")
        return super().create(new)


@pytest.mark.parametrize("content", ["encode me", "deep input"])
def test_input_errors_from_a_backend_never_open_its_breaker(content):
    primary, spare = Picky("main"), InMemoryBackend("spare")
    with MemoryManager(primary, [spare], settings=ManagerSettings(health_interval_s=0, breaker_failures=3),
                       replay_in_background=False) as manager:
        for _ in range(5):
            with pytest.raises(ValidationError, match="cannot take this input"):
                manager.create(NewMemory(api_key_id="a", key="k", content=content))
        assert manager.breaker("main").state == "closed" and manager.breaker("main").consecutive_failures == 0
        served = manager.create(NewMemory(api_key_id="b", key="k", content="another tenant's ordinary write"))
        assert primary.get(served.id) is not None, "the primary must still serve every tenant"
        assert manager.outbox.pending("spare") == 1  # and replicated as usual
