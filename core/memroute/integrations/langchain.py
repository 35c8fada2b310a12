"""LangChain with memroute: a retriever over a tenant's memories and a chat message history.

``pip install 'memroute[langchain]'`` (langchain-core). Both act on one ``api_key_id``; for an end user of an app,
``end_user_tenant("shop", "u1")`` (docs/integrations/langchain.md).

- :class:`MemrouteRetriever` — a ``BaseRetriever``: memroute's search (hybrid by default) as ``Document``s whose
  ``metadata`` carries the memory's id, key, type, session, score and tier.
- :class:`MemrouteChatMessageHistory` — a ``BaseChatMessageHistory`` for ``RunnableWithMessageHistory``: the
  messages of one session in the deployment's shared state store (:mod:`memroute.integrations.history`), each
  human message also observed by memroute's pipeline (facts to long-term memory) unless ``learn=False``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from memroute.errors import MissingDependencyError, ValidationError
from memroute.integrations.history import DEFAULT_MAX_ITEMS, StoredHistory, observe_user_turns
from memroute.models import require_tenant

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.messages import BaseMessage, HumanMessage, message_to_dict, messages_from_dict
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, field_validator
    from pydantic import ValidationError as PydanticValidationError
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError("memroute.integrations.langchain needs langchain-core: "
                                 "pip install 'memroute[langchain]'") from exc

if TYPE_CHECKING:
    from memroute.models import SearchHit

__all__ = ["HISTORY_KIND", "MemrouteChatMessageHistory", "MemrouteRetriever"]

HISTORY_KIND: Final = "langchain"


class MemrouteRetriever(BaseRetriever):
    """The memories of ``api_key_id`` relevant to a query, as LangChain documents, most relevant first."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mem: Any
    """The memroute service (``memroute.open(...)``)."""
    api_key_id: str
    limit: int = 5
    strategy: str | None = None
    """``hybrid``, ``semantic`` or ``exact``; default: the configured one."""
    session_id: str | None = None
    """Only this session's memories."""

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except PydanticValidationError as exc:  # LangChain's models are pydantic: its error becomes memroute's
            problems = [(".".join(map(str, e["loc"])) or "(root)", str(e["msg"])) for e in exc.errors()]
            raise ValidationError("MemrouteRetriever:", problems) from None

    @field_validator("api_key_id")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return require_tenant(value)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        result = self.mem.search(query, api_key_id=self.api_key_id, limit=self.limit, strategy=self.strategy,
                                 session_id=self.session_id)
        return [_document(hit) for hit in result.hits]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        result = await asyncio.to_thread(self.mem.search, query, api_key_id=self.api_key_id, limit=self.limit,
                                         strategy=self.strategy, session_id=self.session_id)
        return [_document(hit) for hit in result.hits]


def _document(hit: SearchHit) -> Document:
    memory = hit.memory
    return Document(page_content=memory.content, id=memory.id,
                    metadata={"id": memory.id, "key": memory.key, "type": memory.type.value,
                              "session_id": memory.session_id, "score": hit.score, "tier": hit.tier,
                              "created_at": memory.created_at.isoformat()})


class MemrouteChatMessageHistory(BaseChatMessageHistory):
    """The messages of one session of ``api_key_id``, shared by every process of the deployment."""

    def __init__(self, mem: Any, session_id: str, *, api_key_id: str, learn: bool = True,
                 max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self._history = StoredHistory(mem, HISTORY_KIND, api_key_id=api_key_id, session_id=session_id,
                                      max_items=max_items)
        self.mem = mem
        self.session_id = self._history.session_id
        self.api_key_id = self._history.api_key_id
        self.learn = learn

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The messages, oldest first."""
        return messages_from_dict(self._history.read())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one atomic update; observe the human ones (unless ``learn=False``)."""
        self._history.append([message_to_dict(message) for message in messages])
        if self.learn:
            said = [m.content for m in messages if isinstance(m, HumanMessage) and isinstance(m.content, str)]
            observe_user_turns(self.mem, said, api_key_id=self.api_key_id, session_id=self.session_id)

    async def aget_messages(self) -> list[BaseMessage]:
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await asyncio.to_thread(self.add_messages, messages)

    def clear(self) -> None:
        """Forget the messages (what was learned from them stays in the tenant's memory)."""
        self._history.clear()

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)
