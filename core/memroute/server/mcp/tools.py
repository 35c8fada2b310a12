"""The memory tools an MCP client (Claude Desktop, Claude Code, Cursor, any agent) calls.

Every tool acts on **one** tenant: the one the caller's API key belongs to, resolved per call by the
``caller`` function the transport supplies (the bearer key over HTTP, ``MEMROUTE_API_KEY`` or ``--tenant``
over stdio). No tool takes a tenant argument, so a model cannot ask for another tenant's memories. Each tool
declares the scope it needs (``read`` or ``write``); the check happens before the tool body runs.

The tools translate only: arguments in, one public service call, the typed result out (output schemas from
:mod:`memroute.server.mcp.schemas`). A :class:`~memroute.errors.MemrouteError` becomes an MCP tool error whose
text is the service's message (the session carries on); anything else is reported by the SDK as a bare
"Error executing tool ..." without internals, and logged.
"""

from __future__ import annotations

import base64
import binascii
import inspect
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import attrs
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from memroute.errors import MemrouteError, PermissionDeniedError, ValidationError
from memroute.models import MemoryType
from memroute.server.mcp.schemas import ClearOut, FoundMemory, HistoryEntryOut, MemoryOut, Output, to_output
from memroute.tenancy import end_user_tenant, require_end_user

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from memroute.service import Memroute

__all__ = ["Caller", "MemoryTools", "declare_tool", "register_tools", "session_tenant"]

SEARCH_LIMIT_MAX = 50
LIST_LIMIT_MAX = 100


@attrs.frozen(kw_only=True)
class Caller:
    """Who is calling a tool: the tenant their memories belong to and the scopes their key holds."""

    tenant: str
    scopes: frozenset[str]
    key_id: str | None = None
    """The API key's id; ``None`` for a ``memroute mcp --tenant`` session (no key)."""

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


def session_tenant(tenant: str, end_users: bool, end_user: str | None, *, field: str) -> str:
    """The tenant an MCP session acts on: the key's, or for an app key (``end_users``) the composite tenant of
    the one end user named when the session was opened (``field`` says where it is named, for the error)."""
    if not end_users:
        if end_user:
            raise PermissionDeniedError(f"{field}: this API key is not an app key, so it cannot act for end users")
        return tenant
    if not end_user:
        raise ValidationError(f"{field}: this is an app key: name the end user this session acts for",
                              [(field, "missing end user")])
    require_end_user(end_user, field)
    return end_user_tenant(tenant, end_user)


# --- results -----------------------------------------------------------------------------------------

class SearchOut(Output):
    """What memory_search found."""

    memories: list[FoundMemory] = Field(description="Matching memories, most relevant first.")
    count: int = Field(description="How many memories are in `memories`.")
    total_tokens: int = Field(description="Estimated tokens of their content (ceil(characters / 4) each).")
    strategy: str = Field(description="How they were ranked: hybrid, semantic, keyword or exact (newest first).")
    degraded: bool = Field(description="True when retrieval fell back to a weaker method (see `note`).")
    note: str | None = Field(description="Why retrieval was degraded, if it was.")


class AddOut(Output):
    """The stored memory."""

    memory: MemoryOut
    created: bool = Field(description="True for a new memory; false when an existing one with the same key "
                                      "was updated in place.")


class ListOut(Output):
    """One page of memories, newest first."""

    memories: list[MemoryOut]
    total: int = Field(description="How many memories match the filters in all pages.")
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next page; null on the last page.")


class HistoryOut(Output):
    """The history of one memory, oldest change first."""

    id: str
    current: MemoryOut | None = Field(description="The memory as it is now; null once it was deleted.")
    changes: list[HistoryEntryOut] = Field(description="Every recorded change, oldest first.")
    recorded: bool = Field(description="False when this deployment keeps no history (then `changes` is empty).")


class DeleteOut(Output):
    """The deleted memory's id."""

    id: str
    deleted: bool


# --- argument types (the JSON schema a model reads) --------------------------------------------------

MemoryTypeArg = Annotated[
    MemoryType | None,
    Field(description="Memory type: factual (preferences and facts about the user), episodic (decisions and "
                      "events), procedural (how the user does things), semantic (general knowledge)."),
]
SessionArg = Annotated[str | None, Field(description="Conversation session id; omit for every session.")]
MetadataArg = Annotated[dict[str, Any] | None, Field(description="Optional JSON object stored with the memory.")]
AgentArg = Annotated[str | None, Field(description="An agent name (letters, digits, . _ @ : + = -): tag the memory "
                                                   "with it, or keep only that agent's memories; omit for all.")]
ExpiresArg = Annotated[
    datetime | None, Field(description="Optional ISO-8601 time after which the memory is no longer returned.")
]
IdArg = Annotated[str, Field(description="The memory's id, as returned by memory_search, memory_list or "
                                         "memory_add.")]


@attrs.frozen
class _ToolSpec:
    scope: str
    title: str
    annotations: ToolAnnotations


def declare_tool(scope: str, title: str, *, read_only: bool = False, destructive: bool = False,
                 idempotent: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a method of a tools class (:class:`MemoryTools`, the OmniRoute aliases) as a tool needing
    ``scope``."""
    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn._mcp_tool = _ToolSpec(  # type: ignore[attr-defined]
            scope, title, ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=destructive,
                                          idempotent_hint=idempotent, open_world_hint=False),
        )
        return fn
    return declare


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        prefix, _, number = text.partition(":")
        offset = int(number)
        if prefix != "offset" or offset < 0:
            raise ValueError(text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ToolError("cursor: not a cursor this server returned (pass next_cursor from memory_list "
                        "unchanged, or omit it for the first page)") from None
    return offset


class MemoryTools:
    """The tool bodies. Each takes the resolved :class:`Caller` first; :func:`register_tools` hides that
    parameter from the tool's schema and fills it per call."""

    def __init__(self, mem: Memroute) -> None:
        self.mem = mem

    @declare_tool("read", "Search memories", read_only=True)
    def memory_search(
        self,
        caller: Caller,
        query: Annotated[str, Field(description="What to look for, in natural language (e.g. 'preferred "
                                                "programming language'). An empty query returns the newest "
                                                "memories.")],
        type: MemoryTypeArg = None,
        max_tokens: Annotated[int | None, Field(ge=1, le=16000, description="Token budget for the returned "
                                                "memories; memories that do not fit are skipped.")] = None,
        limit: Annotated[int, Field(ge=1, le=SEARCH_LIMIT_MAX, description="Most memories to return.")] = 10,
        agent: AgentArg = None,
    ) -> SearchOut:
        """Search the user's long-term memory for what is relevant to a question or task.

        Use it before answering anything that may depend on the user's preferences, past decisions, projects
        or habits. Returns the matching memories, most relevant first, with their ids (for memory_get,
        memory_update, memory_delete) and a relevance score."""
        result = self.mem.search(query, api_key_id=caller.tenant, type=type, max_tokens=max_tokens, limit=limit,
                                 agent=agent)
        found = [to_output(FoundMemory, hit.memory, score=round(hit.score, 6), said_at=hit.said_at)
                 for hit in result.hits]
        return SearchOut(
            memories=found, count=len(found), total_tokens=sum(hit.tokens for hit in result.hits),
            strategy=result.provenance.strategy_used, degraded=result.provenance.degraded,
            note=result.provenance.reason,
        )

    @declare_tool("write", "Remember something", idempotent=True)
    def memory_add(
        self,
        caller: Caller,
        content: Annotated[str, Field(description="The fact to remember, as one self-contained sentence (e.g. "
                                                  "'Prefers TypeScript for frontend code').")],
        key: Annotated[str | None, Field(description="Stable upsert key such as 'preference:language'. Adding "
                                                     "again with the same key replaces the memory instead of "
                                                     "duplicating it. Derived from the content when omitted.")]
        = None,
        type: MemoryTypeArg = None,
        session_id: Annotated[str | None, Field(description="Tie the memory to one conversation session; omit "
                                                            "for a memory every session sees.")] = None,
        metadata: MetadataArg = None,
        expires_at: ExpiresArg = None,
        consolidate: Annotated[bool, Field(description="When the fact restates a memory the user already has, "
                                                       "update that one instead of adding a second; with a "
                                                       "`key` that exists, the old text is kept in the "
                                                       "memory's history (see memory_history).")] = False,
        agent: AgentArg = None,
    ) -> AddOut:
        """Store a durable fact about the user: a preference, a decision, a recurring pattern.

        Store facts that will still matter in a later conversation, not the conversation itself. Storing with
        an existing key updates that memory (the id stays the same)."""
        memory = self.mem.add(
            api_key_id=caller.tenant, content=content, key=key, type=type or MemoryType.FACTUAL,
            session_id=session_id, metadata=metadata, expires_at=expires_at, actor="mcp", consolidate=consolidate,
            agent=agent,
        )
        return AddOut(memory=to_output(MemoryOut, memory), created=memory.created_at == memory.updated_at)

    @declare_tool("read", "List memories", read_only=True)
    def memory_list(
        self,
        caller: Caller,
        type: MemoryTypeArg = None,
        session_id: SessionArg = None,
        limit: Annotated[int, Field(ge=1, le=LIST_LIMIT_MAX, description="Page size.")] = 20,
        cursor: Annotated[str | None, Field(description="next_cursor from the previous page; omit for the "
                                                        "first page.")] = None,
        agent: AgentArg = None,
    ) -> ListOut:
        """List the user's memories, newest first, one page at a time (browse or audit; to find something
        specific, use memory_search)."""
        offset = _decode_cursor(cursor) if cursor is not None else 0
        page = self.mem.list(api_key_id=caller.tenant, type=type, session_id=session_id, limit=limit,
                             offset=offset, agent=agent)
        following = offset + len(page.data)
        return ListOut(
            memories=[to_output(MemoryOut, m) for m in page.data], total=page.total,
            next_cursor=_encode_cursor(following) if page.data and following < page.total else None,
        )

    @declare_tool("read", "Get a memory", read_only=True)
    def memory_get(self, caller: Caller, id: IdArg) -> MemoryOut:
        """Fetch one memory by id (an id from memory_search or memory_list), with its full content and metadata."""
        memory = self.mem.get(id, api_key_id=caller.tenant)
        if memory is None:
            raise _not_found(id)
        return to_output(MemoryOut, memory)

    @declare_tool("read", "A memory's history", read_only=True)
    def memory_history(self, caller: Caller, id: IdArg) -> HistoryOut:
        """What a memory said before and who changed it: every change (created, updated, superseded, deleted),
        oldest first, also for a memory that was deleted. Use it when the user asks what they said earlier or
        why a memory changed."""
        report = self.mem.history(id, api_key_id=caller.tenant)
        if report is None:
            raise _not_found(id)
        return HistoryOut(
            id=report.memory_id,
            current=to_output(MemoryOut, report.current) if report.current is not None else None,
            changes=[to_output(HistoryEntryOut, entry) for entry in report.entries], recorded=report.recorded)

    @declare_tool("write", "Update a memory", idempotent=True)
    def memory_update(
        self,
        caller: Caller,
        id: IdArg,
        content: Annotated[str | None, Field(description="New text; omit to keep.")] = None,
        key: Annotated[str | None, Field(description="New upsert key; omit to keep.")] = None,
        type: MemoryTypeArg = None,
        session_id: Annotated[str | None, Field(description="Move to this session; omit to keep.")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Replaces the stored metadata; omit to "
                                                                     "keep.")] = None,
        expires_at: ExpiresArg = None,
    ) -> MemoryOut:
        """Correct or refine an existing memory (give only the fields to change). Prefer this over adding a
        second, contradicting memory when a fact about the user changes."""
        changes: dict[str, Any] = {name: value for name, value in (
            ("content", content), ("key", key), ("type", type), ("session_id", session_id),
            ("metadata", metadata), ("expires_at", expires_at),
        ) if value is not None}
        if not changes:
            raise ToolError("nothing to change: give at least one of content, key, type, session_id, metadata, "
                            "expires_at")
        memory = self.mem.update(id, api_key_id=caller.tenant, actor="mcp", **changes)
        if memory is None:
            raise _not_found(id)
        return to_output(MemoryOut, memory)

    @declare_tool("write", "Delete a memory", destructive=True, idempotent=True)
    def memory_delete(self, caller: Caller, id: IdArg) -> DeleteOut:
        """Delete one memory by id (for example when the user asks to forget something specific)."""
        if not self.mem.delete(id, api_key_id=caller.tenant, actor="mcp"):
            raise _not_found(id)
        return DeleteOut(id=id, deleted=True)

    @declare_tool("write", "Clear memories", destructive=True)
    def memory_clear(
        self,
        caller: Caller,
        type: MemoryTypeArg = None,
        older_than_days: Annotated[int | None, Field(description="Only memories created more than this many "
                                                                 "days ago.")] = None,
        session_id: Annotated[str | None, Field(description="Only this session's memories.")] = None,
        dry_run: Annotated[bool, Field(description="Count what would be deleted without deleting "
                                                   "anything.")] = False,
    ) -> ClearOut:
        """Delete every memory of the user matching the filters (with no filter: all of them). Irreversible:
        run with dry_run first and confirm with the user. Returns the real number deleted."""
        report = self.mem.clear(caller.tenant, type=type, session_id=session_id, older_than_days=older_than_days,
                                dry_run=dry_run)
        return to_output(ClearOut, report)


def _not_found(memory_id: str) -> ToolError:
    # The same words whether the id does not exist or belongs to another tenant: nothing to tell them apart.
    return ToolError(f"no memory with id {memory_id!r}")


def _tool_methods(tools: object) -> Iterator[tuple[Callable[..., Any], _ToolSpec]]:
    for _name, method in inspect.getmembers(tools, predicate=inspect.ismethod):
        spec = getattr(method, "_mcp_tool", None)
        if isinstance(spec, _ToolSpec):
            yield method, spec


def _bind(method: Callable[..., Any], spec: _ToolSpec, resolve: Callable[[], Caller]) -> Callable[..., Any]:
    """``method`` as the SDK sees a tool: its signature without ``caller``, which is resolved (and checked
    against the declared scope) on every call."""
    signature = inspect.signature(method, eval_str=True)
    parameters = list(signature.parameters.values())[1:]  # drop `caller`
    name = method.__name__

    def call(**arguments: Any) -> BaseModel:
        try:
            caller = resolve()
            if not caller.allows(spec.scope):
                raise ToolError(f"{name} needs the {spec.scope!r} scope, which this API key does not have")
            result: BaseModel = method(caller, **arguments)
            return result
        except MemrouteError as exc:
            raise ToolError(" ".join(str(exc).split())) from None

    call.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


def register_tools(server: MCPServer, mem: Memroute, resolve: Callable[[], Caller], *,
                   extra: Iterable[object] = ()) -> list[str]:
    """Add every memory tool to ``server`` (memroute's own, then those of the ``extra`` tools objects), acting
    for whoever ``resolve()`` says is calling. Returns the tool names."""
    names = []
    for method, spec in (m for tools in (MemoryTools(mem), *extra) for m in _tool_methods(tools)):
        server.add_tool(_bind(method, spec, resolve), name=method.__name__, title=spec.title,
                        description=inspect.getdoc(method), annotations=spec.annotations,
                        structured_output=True)
        names.append(method.__name__)
    return names
