"""How a memory is laid out in a Notion data source: the schema, the schema check, rich-text chunking and
the page ⇄ :class:`~memroute.models.Memory` codec. No network here; :mod:`notion_backend` does the calls.

Layout (one page per memory):

============== ========= ==========================================================================
property       type      holds
============== ========= ==========================================================================
``Key``        title     the memory's upsert key
``Memory ID``  rich_text the memroute id (a UUID; identical in every backend)
``API Key``    rich_text the owner (``api_key_id``)
``Session``    rich_text the session id, empty for none
``Type``       select    factual / episodic / procedural / semantic
``Content``    rich_text the content, in items of at most 2,000 UTF-16 code units
``Metadata``   rich_text the metadata object as compact JSON
``Created``    date      created_at (Notion keeps milliseconds: used for filters and sorting)
``Updated``    date      updated_at
``Expires``    date      expires_at, empty for none
``Timestamps`` rich_text the exact (microsecond) timestamps as JSON, so a round trip is exact
============== ========= ==========================================================================
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Final

from memroute.errors import ValidationError
from memroute.models import Memory, MemoryType, as_utc

__all__ = [
    "KEY",
    "MAX_TEXT_UNITS",
    "SCHEMA",
    "chunk_text",
    "database_properties",
    "memory_to_properties",
    "page_to_memory",
    "rich_text",
    "schema_problems",
    "utf16_len",
]

KEY: Final = "Key"
MEMORY_ID: Final = "Memory ID"
API_KEY: Final = "API Key"
SESSION: Final = "Session"
TYPE: Final = "Type"
CONTENT: Final = "Content"
METADATA: Final = "Metadata"
CREATED: Final = "Created"
UPDATED: Final = "Updated"
EXPIRES: Final = "Expires"
TIMESTAMPS: Final = "Timestamps"

SCHEMA: Final[dict[str, str]] = {
    KEY: "title", MEMORY_ID: "rich_text", API_KEY: "rich_text", SESSION: "rich_text", TYPE: "select",
    CONTENT: "rich_text", METADATA: "rich_text", CREATED: "date", UPDATED: "date", EXPIRES: "date",
    TIMESTAMPS: "rich_text",
}
"""Property name → Notion property type."""

_TYPE_LABELS = {"title": "Title", "rich_text": "Text", "select": "Select", "date": "Date"}

TEXT_ITEM_UNITS: Final = 2000
"""Notion's limit on one rich-text item's ``text.content``, in UTF-16 code units."""
TEXT_ITEMS: Final = 100
"""Notion's limit on the items of one rich-text array."""
MAX_TEXT_UNITS: Final = TEXT_ITEM_UNITS * TEXT_ITEMS
"""The most one rich-text property holds: 200,000 UTF-16 code units."""

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def utf16_len(text: str) -> int:
    """Length as Notion counts it (UTF-16 code units: a character outside the BMP, such as most emoji, is 2)."""
    return len(text) + len(_ASTRAL.findall(text))


def chunk_text(text: str, limit: int = TEXT_ITEM_UNITS) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` UTF-16 code units, never inside a surrogate pair.
    ``"".join(chunk_text(t)) == t`` always."""
    if not _ASTRAL.search(text):
        return [text[i:i + limit] for i in range(0, len(text), limit)]
    chunks: list[str] = []
    start = units = 0
    for index, char in enumerate(text):
        width = 2 if ord(char) > 0xFFFF else 1
        if units + width > limit:
            chunks.append(text[start:index])
            start, units = index, 0
        units += width
    if start < len(text):
        chunks.append(text[start:])
    return chunks


def rich_text(text: str, field: str) -> list[dict[str, Any]]:
    """A rich-text array holding ``text`` exactly; :class:`ValidationError` when it cannot fit in one property
    (more than 100 items of 2,000 UTF-16 code units) or cannot be encoded (a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{field}: contains a lone surrogate character, which Notion cannot store",
                              [(field, "invalid")]) from None
    chunks = chunk_text(text)
    if len(chunks) > TEXT_ITEMS:
        raise ValidationError(
            f"{field}: {utf16_len(text)} UTF-16 code units is more than a Notion property holds "
            f"({TEXT_ITEMS} rich-text items of {TEXT_ITEM_UNITS}; about {MAX_TEXT_UNITS:,} characters)",
            [(field, "too long for the Notion backend")],
        )
    return [{"type": "text", "text": {"content": chunk}} for chunk in chunks]


def read_rich_text(items: Any) -> str:
    """The exact text of a rich-text array (the concatenation of its items)."""
    if not isinstance(items, list):
        return ""
    out = []
    for item in items:
        if isinstance(item, dict):
            text = item.get("text")
            out.append(text["content"] if isinstance(text, dict) and "content" in text else item.get("plain_text", ""))
    return "".join(out)


# --- schema ----------------------------------------------------------------------------------------------

def database_properties() -> dict[str, Any]:
    """The ``initial_data_source.properties`` of a new memroute database."""
    props: dict[str, Any] = {}
    for name, kind in SCHEMA.items():
        if kind == "select":
            props[name] = {"select": {"options": [{"name": t.value} for t in MemoryType]}}
        else:
            props[name] = {kind: {}}
    return props


def schema_problems(properties: dict[str, Any]) -> list[str]:
    """What is wrong with a data source's ``properties`` for memroute, one sentence per problem with its
    fix; empty when it matches."""
    problems = []
    title_name = next((n for n, p in properties.items() if isinstance(p, dict) and p.get("type") == "title"), None)
    for name, kind in SCHEMA.items():
        prop = properties.get(name)
        label = _TYPE_LABELS[kind]
        if prop is None:
            if kind == "title" and title_name is not None:
                problems.append(f"the title property is named {title_name!r}: rename it to {name!r}")
            else:
                problems.append(f"property {name!r} is missing: add a {label} property named {name!r}")
            continue
        actual = prop.get("type")
        if actual != kind:
            problems.append(f"property {name!r} has type {actual!r}, expected {kind!r}: change it to {label}")
            continue
        if kind == "select":
            have = {o.get("name") for o in (prop.get("select") or {}).get("options", [])}
            missing = [t.value for t in MemoryType if t.value not in have]
            if missing:
                problems.append(f"select {name!r} lacks the option(s) {', '.join(missing)}: add them")
    return problems


# --- codec -----------------------------------------------------------------------------------------------

def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _date(moment: datetime | None) -> dict[str, Any] | None:
    if moment is None:
        return None
    # Notion stores milliseconds; the exact value travels in the Timestamps property.
    return {"start": moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
            + f"{moment.microsecond // 1000:03d}Z"}


def memory_to_properties(memory: Memory) -> dict[str, Any]:
    """The page properties that hold ``memory`` (every property, so an update replaces all of them)."""
    metadata = json.dumps(memory.metadata, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    stamps = {"created_at": _iso(memory.created_at), "updated_at": _iso(memory.updated_at),
              "expires_at": None if memory.expires_at is None else _iso(memory.expires_at)}
    return {
        KEY: {"title": rich_text(memory.key, "key")},
        MEMORY_ID: {"rich_text": rich_text(memory.id, "id")},
        API_KEY: {"rich_text": rich_text(memory.api_key_id, "api_key_id")},
        SESSION: {"rich_text": rich_text(memory.session_id or "", "session_id")},
        TYPE: {"select": {"name": memory.type.value}},
        CONTENT: {"rich_text": rich_text(memory.content, "content")},
        METADATA: {"rich_text": rich_text(metadata, "metadata")},
        CREATED: {"date": _date(memory.created_at)},
        UPDATED: {"date": _date(memory.updated_at)},
        EXPIRES: {"date": _date(memory.expires_at)},
        TIMESTAMPS: {"rich_text": rich_text(json.dumps(stamps, separators=(",", ":")), "timestamps")},
    }


def _cell(page: dict[str, Any], name: str) -> Any:
    prop = page.get("properties", {}).get(name) or {}
    return prop.get(prop.get("type", ""), None)


def _text(page: dict[str, Any], name: str) -> str:
    return read_rich_text(_cell(page, name))


def _page_date(page: dict[str, Any], name: str) -> datetime | None:
    value = _cell(page, name)
    if not isinstance(value, dict) or not value.get("start"):
        return None
    return as_utc(value["start"], name)


def _exact(shown: datetime | None, precise: str | None) -> datetime | None:
    """The precise timestamp when it agrees with the date property to the millisecond; the date property
    when someone edited it in Notion (then it wins)."""
    if precise is None or shown is None:
        return shown
    exact = as_utc(precise)
    return exact if exact.replace(microsecond=exact.microsecond // 1000 * 1000) == shown else shown


def page_to_memory(page: dict[str, Any]) -> Memory:
    """The memory a page holds. Raises :class:`ValidationError` when the page is not a valid memory (a row
    someone added or broke by hand)."""
    try:
        stamps = json.loads(_text(page, TIMESTAMPS) or "{}")
        metadata_text = _text(page, METADATA)
        metadata = json.loads(metadata_text) if metadata_text else {}
    except ValueError as exc:
        raise ValidationError(f"page {page.get('id')}: unreadable JSON ({exc})", [("page", "invalid")]) from None
    select = _cell(page, TYPE)
    created = _exact(_page_date(page, CREATED), stamps.get("created_at"))
    updated = _exact(_page_date(page, UPDATED), stamps.get("updated_at"))
    return Memory(
        id=_text(page, MEMORY_ID),
        api_key_id=_text(page, API_KEY),
        session_id=_text(page, SESSION) or None,
        type=select.get("name") if isinstance(select, dict) else "factual",
        key=_text(page, KEY),
        content=_text(page, CONTENT),
        metadata=metadata,
        created_at=created,  # type: ignore[arg-type]  # None is rejected by Memory's converter: a broken row
        updated_at=updated or created,  # type: ignore[arg-type]
        expires_at=_exact(_page_date(page, EXPIRES), stamps.get("expires_at")),
    )
