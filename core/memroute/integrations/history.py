"""A conversation's history kept in the deployment's shared state store, for the framework sessions
(the Agents SDK's ``Session``, LangChain's chat message history).

One JSON list per (tenant, framework, session) in :attr:`Memroute.state <memroute.service.Memroute.state>` — the
SQLite ``state.db`` beside the data, or PostgreSQL — so every process of a deployment continues the same
conversation; every change is one atomic ``update_value``. This is the *history* (what was said, in order); what
is worth remembering beyond it goes to long-term memory through :func:`observe_user_turns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from memroute.deployment.state import SESSION_HISTORIES, session_history_name
from memroute.errors import ValidationError
from memroute.models import require_session, require_tenant

if TYPE_CHECKING:
    from memroute.service import Memroute

__all__ = ["DEFAULT_MAX_ITEMS", "StoredHistory", "observe_user_turns"]

DEFAULT_MAX_ITEMS: Final = 1000


class StoredHistory:
    """The items of one session of one tenant, oldest first, at most ``max_items`` (the oldest go first)."""

    def __init__(self, mem: Memroute, kind: str, *, api_key_id: str, session_id: str,
                 max_items: int = DEFAULT_MAX_ITEMS) -> None:
        """``kind`` names the framework (two frameworks' sessions of one id are two histories). Erasing an end
        user (``forget_end_user``) deletes its histories too."""
        session = require_session(session_id)
        if session is None:
            raise ValidationError("session_id: must not be empty", [("session_id", "empty")])
        if isinstance(max_items, bool) or not isinstance(max_items, int) or not 1 <= max_items <= 100_000:
            raise ValidationError("max_items: must be an integer in [1, 100000]", [("max_items", "range")])
        self.mem = mem
        self.namespace = SESSION_HISTORIES
        self.api_key_id = require_tenant(api_key_id)
        self.session_id = session
        self.max_items = max_items
        self._name = session_history_name(self.api_key_id, kind, session)

    def read(self) -> list[Any]:
        value = self.mem.state.get_value(self.namespace, self._name)
        return list(value) if isinstance(value, list) else []

    def append(self, items: Sequence[Any]) -> None:
        added = list(items)

        def change(current: Any) -> list[Any]:
            history = (list(current) if isinstance(current, list) else []) + added
            return history[-self.max_items:]

        self.mem.state.update_value(self.namespace, self._name, change)

    def pop(self) -> Any | None:
        popped: list[Any] = []

        def change(current: Any) -> list[Any]:
            history = list(current) if isinstance(current, list) else []
            if history:
                popped.append(history.pop())
            return history

        self.mem.state.update_value(self.namespace, self._name, change)
        return popped[0] if popped else None

    def clear(self) -> None:
        self.mem.state.put_value(self.namespace, self._name, [])


def observe_user_turns(mem: Memroute, texts: Sequence[str], *, api_key_id: str, session_id: str) -> None:
    """Let memroute's pipeline learn from what the user said (``observe``: facts extracted in the background
    into ``api_key_id``'s long-term memory, under ``session_id``, when ``[memory] enabled``)."""
    for text in texts:  # one turn each: observe learns from a request's last user message
        if text and text.strip():
            mem.observe({"messages": [{"role": "user", "content": text}]}, api_key_id=api_key_id,
                        session_id=session_id)
