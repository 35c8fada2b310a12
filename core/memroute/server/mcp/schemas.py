"""The MCP tools' output schemas, generated from memroute's attrs models (never hand-copied).

The MCP SDK publishes a tool's ``outputSchema`` from its return annotation, which must be a pydantic model.
memroute's values are attrs classes; rather than writing each model a second time as pydantic (two copies
drift), :func:`model_from_attrs` derives the pydantic model from the attrs fields at import time: a field
added to :class:`~memroute.models.Memory` appears in every tool's output schema without an edit here. Only
the presentation is chosen here: which fields a model-facing result leaves out (the tenant is the caller's
own, so ``api_key_id`` is noise), the few fields a result adds (a hit's ``score``), and the descriptions a
model reads in the schema.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, Union

import attrs
from pydantic import BaseModel, ConfigDict, Field, create_model

from memroute.models import HistoryEntry, Memory
from memroute.reports import ClearReport

__all__ = ["ClearOut", "FoundMemory", "HistoryEntryOut", "MemoryOut", "Output", "model_from_attrs", "to_output"]

M = TypeVar("M", bound=BaseModel)

MEMORY_DESCRIPTIONS: Mapping[str, str] = {
    "id": "Stable id of the memory (pass it to memory_get / memory_update / memory_delete).",
    "session_id": "The conversation session it belongs to; null for a memory shared by every session.",
    "type": "factual (preferences, facts), episodic (decisions, events), procedural (how-tos), semantic.",
    "key": "Upsert key: adding again with the same key updates this memory instead of creating another.",
    "content": "The remembered text.",
    "metadata": "Free-form JSON object stored with the memory.",
    "created_at": "When it was first stored (ISO-8601, UTC).",
    "updated_at": "When it last changed (ISO-8601, UTC).",
    "expires_at": "When it stops being returned (ISO-8601, UTC); null for never.",
}
HISTORY_DESCRIPTIONS: Mapping[str, str] = {
    "id": "Id of this history entry.",
    "event": "created, updated (changed in place or restated), superseded (a newer statement replaced it), deleted.",
    "actor": "Who made the change: api, mcp, cli, import, summarization, retention, extractor:<name>, ...",
    "at": "When (ISO-8601, UTC).",
    "old_content": "What the memory said before; null when it was created.",
    "new_content": "What it said after; null when it was deleted.",
    "old_key": "The key before, when the key changed (or on deletion).",
    "new_key": "The key after, when the key changed (or on creation).",
    "old_type": "The type before, when it changed (or on deletion).",
    "new_type": "The type after, when it changed (or on creation).",
}
CLEAR_DESCRIPTIONS: Mapping[str, str] = {
    "dry_run": "True when nothing was deleted: the numbers say what would be.",
    "matched": "Memories that matched the filters (all of them: there is no page cap).",
    "deleted": "Memories actually deleted (0 in a dry run).",
    "tokens": "Estimated tokens of the matched memories.",
    "type": "The type filter given, if any.",
    "session_id": "The session filter given, if any.",
    "older_than_days": "The age filter given, if any.",
}


def _output_type(annotation: Any) -> Any:
    """The pydantic-side type of an attrs annotation: tuples and frozensets are JSON arrays."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        converted = tuple(_output_type(arg) for arg in args)
        return Union[converted]  # noqa: UP007 - built from a runtime tuple
    if origin in (tuple, frozenset, set) and args:
        return list[_output_type(args[0])]  # type: ignore[misc]
    return annotation


def model_from_attrs(
    cls: type,
    name: str,
    *,
    exclude: Iterable[str] = (),
    descriptions: Mapping[str, str] | None = None,
    extra: Mapping[str, tuple[Any, str]] | None = None,
    doc: str | None = None,
    base: type[BaseModel] | None = None,
) -> type[BaseModel]:
    """A pydantic model with the fields of the attrs class ``cls`` (minus ``exclude``), each required (a
    result always carries every field), plus ``extra`` fields given as ``{name: (type, description)}``."""
    attrs.resolve_types(cls)
    described = descriptions or {}
    skipped = set(exclude)
    fields: dict[str, Any] = {}
    for attribute in attrs.fields(cls):
        if attribute.name in skipped:
            continue
        fields[attribute.name] = (
            _output_type(attribute.type), Field(description=described.get(attribute.name)),
        )
    for field_name, (annotation, description) in (extra or {}).items():
        fields[field_name] = (annotation, Field(description=description))
    model: type[BaseModel] = create_model(name, __base__=base or Output, __doc__=doc or cls.__doc__, **fields)
    return model


class Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


def to_output(model: type[M], value: Any, **extra: Any) -> M:
    """An instance of ``model`` (made by :func:`model_from_attrs`) from the attrs ``value`` plus ``extra``."""
    data = {name: getattr(value, name) for name in model.model_fields if name not in extra}
    return model.model_validate({**data, **extra})


if TYPE_CHECKING:  # generated at run time; to the type checker they are plain models
    MemoryOut = BaseModel
    FoundMemory = BaseModel
    ClearOut = BaseModel
    HistoryEntryOut = BaseModel
else:
    MemoryOut = model_from_attrs(
        Memory, "MemoryOut", exclude=("api_key_id",), descriptions=MEMORY_DESCRIPTIONS,
        doc="One memory of the caller's tenant.",
    )
    FoundMemory = model_from_attrs(
        Memory, "FoundMemory", exclude=("api_key_id",), descriptions=MEMORY_DESCRIPTIONS,
        extra={"score": (float, "Relevance to the query in [0, 1], calibrated: comparable across searches."),
               "said_at": (datetime | None, "When the user said it (ISO-8601, UTC), for a remembered message; "
                                            "null when the memory records no such time.")},
        doc="One memory found by memory_search, best first.",
    )
    HistoryEntryOut = model_from_attrs(
        HistoryEntry, "HistoryEntryOut", exclude=("api_key_id", "memory_id"), descriptions=HISTORY_DESCRIPTIONS,
        doc="One change of a memory.",
    )
    # The matching ids stay out: a clear may match thousands, and memory_list shows them on request.
    ClearOut = model_from_attrs(
        ClearReport, "ClearOut", exclude=("api_key_id", "ids"), descriptions=CLEAR_DESCRIPTIONS,
        doc="What memory_clear deleted (or, with dry_run, would delete).",
    )
