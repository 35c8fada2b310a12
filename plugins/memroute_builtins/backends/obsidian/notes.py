"""How the Obsidian backend lays memories out in a vault: safe note paths and the note format.

A memory is one Markdown note at ``<folder>/<tenant slug>/<file name>``:

* the **tenant slug** is built from the ``api_key_id`` alone: its ``[A-Za-z0-9_-]`` characters (at most 32,
  for people browsing the vault) plus the first 16 hex digits of its SHA-256 (so two ids never share a
  folder, also on case-insensitive file systems);
* the **file name** is ``<id>.md`` for a canonical lower-case UUID (what memroute generates) and
  ``x-<sha256(id)[:32]>.md`` for any other id.

Neither the memory's key nor any other user text reaches the path, so ``../../etc/passwd`` as a key (or as
an api_key_id) cannot leave the folder: traversal is impossible by construction, not by filtering.

The note is YAML frontmatter written and read with PyYAML's safe dumper and loader (libyaml's when
available) followed by the content, byte for byte::

    ---\\n
    <YAML mapping: id, api_key_id, session_id, type, key, metadata, created_at, updated_at, expires_at,
     memroute_format, then any properties a user added in Obsidian>
    ---\\n
    <content, exactly>

The body is everything after the first line that is exactly ``---`` (optionally followed by spaces) after
the opening ``---`` line. memroute adds nothing between the closing line and the content, so content that
starts with newlines, ends with spaces, holds CRLF line ends or ``---`` lines round-trips unchanged.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

import yaml

from memroute.errors import ConfigError, MemrouteError, ValidationError
from memroute.models import Memory

__all__ = [
    "FORMAT_VERSION",
    "NoteFormatError",
    "check_folder",
    "note_filename",
    "parse_note",
    "render_note",
    "tenant_slug",
]

FORMAT_VERSION: Final = 1
MEMORY_FIELDS: Final = (
    "id", "api_key_id", "session_id", "type", "key", "metadata", "created_at", "updated_at", "expires_at",
)
_OWN_KEYS: Final = frozenset((*MEMORY_FIELDS, "memroute_format"))
_SLUG_TEXT = re.compile(r"[^A-Za-z0-9_-]+")
_SLUG = re.compile(r"\A(?:[A-Za-z0-9_-]{1,32}-)?[0-9a-f]{16}\Z")
_UUID = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_OPENING = re.compile(r"---[ \t]*\r?\n")
_CLOSING = re.compile(r"^---[ \t]*(?:\r\n|\n|\Z)", re.M)
# Obsidian forbids * " \ / < > : | ? in names and # ^ [ ] break links; glob metacharacters would break the
# JsonLogic ``glob`` the backend sends, and "%" would be decoded twice by plugins before 5.0.
_FOLDER_SEGMENT = re.compile(r"\A[^\x00-\x1f*\"\\/<>:|?#^\[\]{}!%]+\Z")
_SECTION_WORDS: Final = frozenset({"heading", "block", "frontmatter"})
# libyaml's safe loader and dumper when PyYAML was built with it: the same safe schema, several times faster.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class NoteFormatError(MemrouteError):
    """A note in the memory folder that is not a readable memroute memory (for example hand-edited YAML)."""


def tenant_slug(api_key_id: str) -> str:
    """The folder name of one tenant: readable where possible, unique always, never a traversal."""
    digest = hashlib.sha256(api_key_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    readable = _SLUG_TEXT.sub("-", api_key_id).strip("-")[:32].strip("-")
    return f"{readable}-{digest}" if readable else digest


def is_tenant_slug(name: str) -> bool:
    return _SLUG.match(name) is not None


def note_filename(memory_id: str) -> str:
    """The note file name of a memory id (a pure function: the id index only has to find the tenant)."""
    if _UUID.match(memory_id):
        return f"{memory_id}.md"
    return "x-" + hashlib.sha256(memory_id.encode("utf-8", "surrogatepass")).hexdigest()[:32] + ".md"


def check_folder(folder: str) -> tuple[str, ...]:
    """The segments of the configured memory folder; anything unsafe is a :class:`ConfigError`."""
    if not isinstance(folder, str) or not folder.strip("/ "):
        raise ConfigError("folder: must name a folder inside the vault, e.g. \"memroute\"", [("folder", "empty")])
    segments = tuple(s for s in folder.strip("/").split("/"))
    for seg in segments:
        why = None
        if seg in ("", ".", "..") or seg != seg.strip():
            why = "empty, '.', '..' or padded segments are not allowed"
        elif seg.startswith("."):
            why = "Obsidian does not index hidden (dot) folders"
        elif seg in _SECTION_WORDS:
            why = "the Local REST API reads 'heading', 'block' and 'frontmatter' segments as section targets"
        elif not _FOLDER_SEGMENT.match(seg):
            why = "use letters, digits, spaces, '-', '_' and '.' only"
        if why:
            raise ConfigError(f"folder: {folder!r}: segment {seg!r}: {why}", [("folder", why)])
    return segments


def render_note(memory: Memory, extra: Mapping[str, Any] | None = None) -> str:
    """The note text of ``memory``; ``extra`` holds frontmatter properties a user added (kept on rewrite)."""
    front: dict[str, Any] = {
        "id": memory.id,
        "api_key_id": memory.api_key_id,
        "session_id": memory.session_id,
        "type": memory.type.value,
        "key": memory.key,
        "metadata": dict(memory.metadata),
        "created_at": _iso(memory.created_at),
        "updated_at": _iso(memory.updated_at),
        "expires_at": None if memory.expires_at is None else _iso(memory.expires_at),
        "memroute_format": FORMAT_VERSION,
    }
    for name, value in (extra or {}).items():
        if name not in _OWN_KEYS:
            front[name] = value
    try:
        text = _dump(front, allow_unicode=True)
        # PyYAML writes a few line-break characters (U+0085, U+2028, U+2029) raw in quoted scalars, where a
        # reader folds them; escaping all non-ASCII is the exact (if less readable) fallback.
        if _load(text) != front:
            text = _dump(front, allow_unicode=False)
        for value in (memory.content, memory.key, memory.api_key_id, memory.session_id or ""):
            value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError("memory text is not valid Unicode (a lone surrogate?)", [("content", "invalid")]) from exc
    except yaml.YAMLError as exc:
        raise ValidationError(f"metadata cannot be written as YAML: {exc}", [("metadata", "invalid")]) from exc
    # safe_dump indents every continuation line, so no line of it can close the frontmatter early; this
    # check keeps that promise even if a future PyYAML changed its output.
    if _CLOSING.search(text):
        raise ValidationError("frontmatter would contain a bare '---' line", [("metadata", "invalid")])
    return "---\n" + text + "---\n" + memory.content


def parse_note(text: str, where: str = "note") -> tuple[Memory, dict[str, Any]]:
    """The memory a note holds and the frontmatter properties memroute does not own.

    Raises :class:`NoteFormatError` naming ``where`` when the note is not a memroute memory."""
    opening = _OPENING.match(text)
    if opening is None:
        raise NoteFormatError(f"{where}: no YAML frontmatter (the note must start with a '---' line)")
    closing = _CLOSING.search(text, opening.end())
    if closing is None:
        raise NoteFormatError(f"{where}: the frontmatter has no closing '---' line")
    try:
        front = _load(text[opening.end():closing.start()])
    except yaml.YAMLError as exc:
        raise NoteFormatError(f"{where}: the frontmatter is not valid YAML: {exc}") from None
    if not isinstance(front, dict):
        raise NoteFormatError(f"{where}: the frontmatter is not a YAML mapping")
    missing = [f for f in ("id", "api_key_id", "key", "created_at", "updated_at") if front.get(f) in (None, "")]
    if missing:
        raise NoteFormatError(f"{where}: frontmatter lacks {', '.join(missing)}")
    metadata = front.get("metadata")
    try:
        memory = Memory(
            id=_text(front["id"]),
            api_key_id=_text(front["api_key_id"]),
            session_id=None if front.get("session_id") is None else _text(front["session_id"]),
            type=front.get("type") or "factual",
            key=_text(front["key"]),
            content=text[closing.end():],
            metadata={} if metadata is None else metadata,
            created_at=front["created_at"],
            updated_at=front["updated_at"],
            expires_at=front.get("expires_at"),
        )
    except (ValidationError, TypeError, ValueError) as exc:
        raise NoteFormatError(f"{where}: {exc}") from None
    extra = {k: v for k, v in front.items() if k not in _OWN_KEYS}
    return memory, extra


def _dump(front: dict[str, Any], *, allow_unicode: bool) -> str:
    return yaml.dump(front, Dumper=_DUMPER, allow_unicode=allow_unicode, sort_keys=False, default_flow_style=False,
                     width=10**6)


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)


def _text(value: Any) -> str:
    # A user editing a property in Obsidian may turn "123" into the number 123; the field is still text.
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"expected text, got {type(value).__name__}")


def _iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")

