"""LlamaIndex with memroute: a memory block for ``llama_index.core.memory.Memory``.

``pip install 'memroute[llama-index]'`` (llama-index-core). ``Memory.from_defaults(memory_blocks=[
MemrouteMemoryBlock(mem=mem, api_key_id=...)])`` gives an agent memroute's long-term memory
(docs/integrations/llama-index.md):

- on every read (``aget``) the block searches the tenant's memories for the latest user message and returns
  the relevant ones, one per line, which LlamaIndex inserts into the system message;
- the messages LlamaIndex flushes out of its short-term memory (``aput``) are observed by memroute's pipeline:
  the facts the user stated go to the tenant's long-term memory (when ``[memory] enabled``).

For one end user of an app, ``api_key_id=end_user_tenant("shop", "u1")``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from memroute.errors import MissingDependencyError, ValidationError
from memroute.integrations.history import observe_user_turns
from memroute.models import require_tenant

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.memory.memory import BaseMemoryBlock
    from pydantic import Field, field_validator
    from pydantic import ValidationError as PydanticValidationError
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError("memroute.integrations.llama_index needs llama-index-core: "
                                 "pip install 'memroute[llama-index]'") from exc

__all__ = ["MemrouteMemoryBlock"]


class MemrouteMemoryBlock(BaseMemoryBlock[str]):
    """The memories of ``api_key_id`` relevant to the conversation, as a LlamaIndex memory block."""

    name: str = Field(default="memroute", description="The name of the memory block.")
    mem: Any = Field(description="The memroute service (memroute.open(...)).")
    api_key_id: str = Field(description="The tenant (an end user's: end_user_tenant(tenant, user)).")
    limit: int = Field(default=5, ge=1, le=100, description="At most this many memories per read.")
    session_id: str | None = Field(default=None, description="The session observed messages are learned under.")

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except PydanticValidationError as exc:  # LlamaIndex's models are pydantic: its error becomes memroute's
            problems = [(".".join(map(str, e["loc"])) or "(root)", str(e["msg"])) for e in exc.errors()]
            raise ValidationError("MemrouteMemoryBlock:", problems) from None

    @field_validator("api_key_id")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return require_tenant(value)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The memories relevant to the latest user message, one per line ("" when there is none)."""
        query = next((m.content for m in reversed(messages or []) if m.role == MessageRole.USER and m.content), "")
        if not query:
            return ""
        result = await asyncio.to_thread(self.mem.search, query, api_key_id=self.api_key_id, limit=self.limit)
        return "\n".join(f"- {hit.memory.content}" for hit in result.hits)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Learn from the user messages LlamaIndex moves out of its short-term memory."""
        said = [m.content for m in messages if m.role == MessageRole.USER and m.content]
        await asyncio.to_thread(observe_user_turns, self.mem, said, api_key_id=self.api_key_id,
                                session_id=self.session_id or "llama-index")
