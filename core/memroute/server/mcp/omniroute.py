"""The reference system's MCP tools, ``omniroute_memory_search`` / ``_add`` / ``_clear``, for agents written for it.

Same names, same argument names (camelCase, ``olderThan`` a date) and the same result envelope
(``{success, data: {...}}``, memories with camelCase fields) as the reference's ``memoryTools.ts``, served next
to memroute's own tools unless ``[mcp] omniroute_tools = false``. What differs, on purpose:

* **The tenant comes from the key**, never from ``apiKeyId``: the reference trusted that argument, so any
  caller could read or delete any key's memories (and ``""`` cleared every key's). An ``apiKeyId`` equal to the
  caller's tenant (or empty) is accepted and ignored; one naming another tenant is refused, as the REST API
  refuses it with 403.
* ``omniroute_memory_clear`` deletes **every** match; the reference deleted at most the 50 newest per call and
  reported attempts as ``deletedCount``.
* ``omniroute_memory_search`` filters by ``type`` before the token budget is filled (the reference filtered
  after, so a typed search could return fewer memories than fit).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from memroute.models import Memory, MemoryType
from memroute.server.mcp.schemas import Output, model_from_attrs, to_output
from memroute.server.mcp.tools import Caller, declare_tool

if TYPE_CHECKING:
    from memroute.service import Memroute

__all__ = ["OmnirouteTools"]

SEARCH_LIMIT_MAX = 100
SEARCH_MAX_TOKENS = 8000


class _Camel(Output):
    """Results written with the reference's camelCase names."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


if TYPE_CHECKING:
    OmnirouteMemory = _Camel
else:
    OmnirouteMemory = model_from_attrs(Memory, "OmnirouteMemory", base=_Camel,
                                       doc="One memory, in the reference's shape (camelCase fields).")


class SearchData(_Camel):
    memories: list[OmnirouteMemory]
    count: int
    total_tokens: int = Field(description="Estimated tokens of the memories (ceil(characters / 4) each).")


class SearchResult(_Camel):
    """What omniroute_memory_search found, in the reference's envelope."""

    success: bool
    data: SearchData


class AddData(_Camel):
    memory: OmnirouteMemory
    message: str


class AddResult(_Camel):
    """The stored memory, in the reference's envelope."""

    success: bool
    data: AddData


class ClearData(_Camel):
    deleted_count: int = Field(description="Memories actually deleted (every match: there is no page cap).")
    message: str


class ClearResult(_Camel):
    """What omniroute_memory_clear deleted, in the reference's envelope."""

    success: bool
    data: ClearData


ApiKeyIdArg = Annotated[
    str | None,
    Field(description="Accepted for compatibility and not needed: the memories are always those of the API key "
                      "this session authenticated with. Naming another tenant is refused."),
]
TypeArg = Annotated[MemoryType | None, Field(description="factual, episodic, procedural or semantic.")]


def _own_tenant(caller: Caller, named: str | None) -> str:
    """The caller's tenant; an ``apiKeyId`` naming another one is refused (the reference obeyed it)."""
    if named and named != caller.tenant:
        raise ToolError("apiKeyId: names another tenant than this API key's; memroute acts only on the key's own "
                        "memories (omit apiKeyId, or create the memroute key with --tenant set to this id)")
    return caller.tenant


class OmnirouteTools:
    """The alias tools' bodies (registered by :func:`memroute.server.mcp.tools.register_tools`). Their argument
    names are the reference's (camelCase), so an agent's existing calls validate unchanged."""

    def __init__(self, mem: Memroute) -> None:
        self.mem = mem

    @declare_tool("read", "Search memories (OmniRoute)", read_only=True)
    def omniroute_memory_search(
        self,
        caller: Caller,
        apiKeyId: ApiKeyIdArg = None,
        query: Annotated[str | None, Field(description="What to look for; omit for the newest memories.")] = None,
        type: TypeArg = None,
        maxTokens: Annotated[int | None, Field(ge=1, le=SEARCH_MAX_TOKENS,
                                               description="Token budget for the returned memories.")] = None,
        limit: Annotated[int | None, Field(ge=1, le=SEARCH_LIMIT_MAX, description="Most memories to return.")]
        = None,
    ) -> SearchResult:
        """Search the user's memories (the reference system's tool, kept for agents written for it; memroute's
        own is memory_search)."""
        tenant = _own_tenant(caller, apiKeyId)
        result = self.mem.search(query or "", api_key_id=tenant, type=type, max_tokens=maxTokens, limit=limit)
        memories = [to_output(OmnirouteMemory, hit.memory) for hit in result.hits]
        return SearchResult(success=True, data=SearchData(memories=memories, count=len(memories),
                                                          total_tokens=sum(h.tokens for h in result.hits)))

    @declare_tool("write", "Remember something (OmniRoute)", idempotent=True)
    def omniroute_memory_add(
        self,
        caller: Caller,
        type: Annotated[MemoryType, Field(description="factual, episodic, procedural or semantic.")],
        key: Annotated[str, Field(min_length=1, description="Upsert key: the same key updates the memory.")],
        content: Annotated[str, Field(min_length=1, description="The fact to remember.")],
        apiKeyId: ApiKeyIdArg = None,
        sessionId: Annotated[str | None, Field(description="The conversation session, if any.")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="A JSON object stored with it.")] = None,
    ) -> AddResult:
        """Store a memory, an upsert on its key (the reference system's tool; memroute's own is memory_add)."""
        tenant = _own_tenant(caller, apiKeyId)
        memory = self.mem.add(api_key_id=tenant, content=content, key=key, type=type, session_id=sessionId or None,
                              metadata=metadata)
        return AddResult(success=True, data=AddData(memory=to_output(OmnirouteMemory, memory),
                                                    message="Memory created successfully"))

    @declare_tool("write", "Clear memories (OmniRoute)", destructive=True)
    def omniroute_memory_clear(
        self,
        caller: Caller,
        apiKeyId: ApiKeyIdArg = None,
        type: TypeArg = None,
        olderThan: Annotated[datetime | None, Field(
            description="Only memories created before this date or time (ISO-8601).")] = None,
    ) -> ClearResult:
        """Delete the user's memories matching the filters, every one of them (the reference system's tool;
        memroute's own is memory_clear, which also has a dry run)."""
        tenant = _own_tenant(caller, apiKeyId)
        report = self.mem.clear(tenant, type=type, created_before=olderThan)
        return ClearResult(success=True, data=ClearData(deleted_count=report.deleted,
                                                        message=f"Deleted {report.deleted} memories"))
