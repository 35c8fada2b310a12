"""The OpenAI Agents SDK with memroute: a ``Session`` keeping each conversation's history, and memory tools.

``pip install 'memroute[openai-agents]'``. Two pieces, used together or apart (docs/integrations/openai-agents.md):

- :class:`MemrouteSession` — the SDK's ``Session`` (``Runner.run(agent, input, session=...)``): the items of one
  conversation, kept in the deployment's shared state store (SQLite's ``state.db``, or PostgreSQL), so every
  process of the deployment continues the same conversation. It also *learns*: each user message added is
  observed by memroute's pipeline (facts extracted into the tenant's long-term memory, under this session),
  as the proxy and the SDK wrappers do.
- :func:`memory_tools` — ``recall_memories`` and ``save_memory`` function tools over the tenant's long-term
  memory, for the agent to search and add on its own.

Both act on one ``api_key_id``; for an end user of an app, ``end_user_tenant("shop", "u1")``.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Final

from memroute.errors import MissingDependencyError
from memroute.integrations.history import DEFAULT_MAX_ITEMS, StoredHistory, observe_user_turns
from memroute.models import require_tenant

try:
    from agents import FunctionTool, function_tool
    from agents.memory.session import SessionABC
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError("memroute.integrations.openai_agents needs openai-agents: "
                                 "pip install 'memroute[openai-agents]'") from exc

if TYPE_CHECKING:
    from memroute.service import Memroute

__all__ = ["HISTORY_KIND", "MemrouteSession", "memory_tools"]

HISTORY_KIND: Final = "openai-agents"
"""The kind of the sessions' histories in the state store (:mod:`memroute.integrations.history`)."""


class MemrouteSession(SessionABC):
    """One conversation's history for the Agents SDK, kept in memroute's shared state store
    (:mod:`memroute.integrations.history`).

    ``max_items`` bounds the history (the oldest items go first); ``learn`` observes each user message added
    (memroute's ``observe``: facts go to the tenant's long-term memory when ``[memory] enabled``)."""

    session_settings = None

    def __init__(self, mem: Memroute, session_id: str, *, api_key_id: str, learn: bool = True,
                 max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self._history = StoredHistory(mem, HISTORY_KIND, api_key_id=api_key_id, session_id=session_id,
                                      max_items=max_items)
        self.session_id = self._history.session_id
        self.mem = mem
        self.api_key_id = self._history.api_key_id
        self.learn = learn

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history, oldest first; with ``limit``, its last ``limit`` items."""
        items = await asyncio.to_thread(self._history.read)
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` (one atomic update for every process), then observe the user messages among them."""
        added = [json.loads(json.dumps(item, default=str)) for item in items]  # JSON-able, as stored
        await asyncio.to_thread(self._history.append, added)
        if self.learn:
            await asyncio.to_thread(observe_user_turns, self.mem, [_user_text(item) for item in added],
                                    api_key_id=self.api_key_id, session_id=self.session_id)

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (None when the history is empty)."""
        return await asyncio.to_thread(self._history.pop)

    async def clear_session(self) -> None:
        """Forget the history (the long-term memories learned from it stay: they are the tenant's)."""
        await asyncio.to_thread(self._history.clear)


def _user_text(item: Any) -> str:
    """The text of a user message item (``{"role": "user", "content": "..."}`` or with content parts)."""
    if not isinstance(item, dict) or item.get("role") != "user":
        return ""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text")) for part in content
                        if isinstance(part, dict) and part.get("type") in ("input_text", "text") and part.get("text"))
    return ""


def memory_tools(mem: Memroute, *, api_key_id: str, limit: int = 5) -> list[FunctionTool]:
    """``recall_memories(query)`` and ``save_memory(fact)``: function tools over ``api_key_id``'s long-term
    memory. Recall returns up to ``limit`` memories, most relevant first, one per line."""
    tenant = require_tenant(api_key_id)

    @function_tool
    async def recall_memories(query: str) -> str:
        """Search what is remembered about the user. Returns the relevant memories, one per line."""
        result = await asyncio.to_thread(mem.search, query, api_key_id=tenant, limit=limit)
        return "\n".join(hit.memory.content for hit in result.hits) or "(nothing remembered about this)"

    @function_tool
    async def save_memory(fact: str) -> str:
        """Remember a fact about the user for future conversations."""
        memory = await asyncio.to_thread(mem.add, api_key_id=tenant, content=fact)
        return f"remembered ({memory.key})"

    return [recall_memories, save_memory]
