"""Reading chat requests and responses: the user's last message (the retrieval query and what extraction
mines) and the assistant's reply, in the three request shapes memroute understands.

* OpenAI Chat Completions: ``messages`` with ``content`` a string or a list of parts (``{"type": "text"}``);
* Anthropic Messages: ``messages`` with ``content`` a string or content blocks, plus a top-level ``system``;
* OpenAI Responses: ``input`` (a string, or a list of items) plus ``instructions``.

Everything here is pure and tolerant: unknown shapes give ``None`` / ``""``, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_TEXT_CHARS",
    "ApiShape",
    "assistant_text",
    "detect_api",
    "extraction_text",
    "last_user_name",
    "last_user_text",
    "query_text",
    "uses_prompt_caching",
]

ApiShape = Literal["openai-chat", "anthropic", "responses"]

MAX_QUERY_CHARS: Final = 2000
"""The retrieval query is the last user message cut to its last 2,000 characters: enough to say what the
user asks about, while a pasted 50 KB document does not become a 50 KB keyword query (reference §17.6)."""
MAX_TEXT_CHARS: Final = 65_536
"""Text handed to extraction is capped like the reference's (64 KiB, keeping the tail)."""

# Content part / block types that carry text the user (or the model) wrote.
_TEXT_PART_TYPES: Final = frozenset({"text", "input_text", "output_text"})
_ANTHROPIC_ONLY_BLOCKS: Final = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "document", "server_tool_use"}
)
_ANTHROPIC_PROVIDERS: Final = frozenset({"anthropic", "claude"})


def _tail(text: str, limit: int) -> str:
    return text[-limit:] if len(text) > limit else text


def _content_text(content: Any, *, joiner: str = "\n") -> str:
    """The text of a message ``content``: a string, or the text parts of a list (images, tool calls and
    tool results are not text the user wrote)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (str, bytes)):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") in _TEXT_PART_TYPES:
                text = part.get("text")
                if isinstance(text, str):
                    pieces.append(text)
        return joiner.join(p for p in pieces if p.strip())
    return ""


def _is_user_message_item(item: Any) -> bool:
    # Responses input items: a message has type "message" or no type (the "easy" form {role, content}).
    return (
        isinstance(item, Mapping)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def last_user_text(request: Any, *, joiner: str = "\n") -> str | None:
    """The text of the last user message that has text, or ``None``.

    Looks at ``messages`` (OpenAI Chat / Anthropic) first, then ``input`` (Responses: a string is itself the
    user's message). A user turn made only of tool results is skipped: it is not something the user said.
    """
    if not isinstance(request, Mapping):
        return None
    messages = request.get("messages")
    if isinstance(messages, Sequence) and not isinstance(messages, (str, bytes)):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                text = _content_text(message.get("content"), joiner=joiner)
                if text.strip():
                    return text
    items = request.get("input")
    if isinstance(items, str):
        return items if items.strip() else None
    if isinstance(items, Sequence) and not isinstance(items, bytes):
        for item in reversed(items):
            if _is_user_message_item(item):
                text = _content_text(item.get("content"), joiner=joiner)
                if text.strip():
                    return text
    return None


def last_user_name(request: Any) -> str | None:
    """The ``name`` of the last user message that has text (OpenAI / Anthropic messages carry one in group chats
    and multi-person conversations), or ``None``."""
    if not isinstance(request, Mapping):
        return None
    for field in ("messages", "input"):
        items = request.get(field)
        if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
            continue
        for item in reversed(items):
            if isinstance(item, Mapping) and item.get("role") == "user" and _content_text(item.get("content")).strip():
                name = item.get("name")
                return (name.strip()[:256] or None) if isinstance(name, str) else None
        return None
    return None


def query_text(request: Any, max_chars: int = MAX_QUERY_CHARS) -> str:
    """The retrieval query for ``request``: the last user message, whitespace collapsed, cut to its last
    ``max_chars`` characters (the end of a long message is usually the question). ``""`` when none."""
    text = last_user_text(request, joiner=" ")
    if not text:
        return ""
    return _tail(" ".join(text.split()), max_chars).strip()


def extraction_text(request: Any, max_chars: int = MAX_TEXT_CHARS) -> str:
    """The last user message as extraction reads it (parts joined by newlines, last 64 KiB)."""
    text = last_user_text(request)
    return _tail(text, max_chars) if text else ""


def _dump(response: Any) -> Any:
    try:
        return response.model_dump()
    except Exception:
        return None


def assistant_text(response: Any, max_chars: int = MAX_TEXT_CHARS) -> str:
    """The assistant's reply text: OpenAI ``choices[0].message.content``, else Anthropic ``content[]`` text
    blocks, else Responses ``output_text`` / ``output[].content[]`` text; ``""`` when there is none.

    SDK response objects are accepted too when they offer ``model_dump()`` (OpenAI and Anthropic SDKs)."""
    if not isinstance(response, Mapping) and hasattr(response, "model_dump"):
        try:
            # warnings=False: the SDKs' generic structured-output replies (ParsedChatCompletion[T]) make
            # pydantic warn about the ``parsed`` field on every dump; memroute reads only the text.
            response = response.model_dump(warnings=False)
        except TypeError:  # a model_dump without that argument
            response = _dump(response)
        except Exception:
            return ""
    if not isinstance(response, Mapping):
        return ""
    choices = response.get("choices")
    if isinstance(choices, Sequence) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, Mapping):
            text = _content_text(message.get("content"))
            if text:
                return _tail(text, max_chars)
    content = response.get("content")
    if isinstance(content, Sequence) and not isinstance(content, (str, bytes)):
        text = _content_text(content)
        if text:
            return _tail(text, max_chars)
    output_text = response.get("output_text")
    if isinstance(output_text, str) and output_text:
        return _tail(output_text, max_chars)
    output = response.get("output")
    if isinstance(output, Sequence) and not isinstance(output, (str, bytes)):
        pieces = [
            _content_text(item.get("content"))
            for item in output
            if isinstance(item, Mapping) and item.get("type", "message") == "message"
            and item.get("role", "assistant") == "assistant"
        ]
        text = "\n".join(p for p in pieces if p)
        if text:
            return _tail(text, max_chars)
    return ""


def detect_api(request: Any, provider: str | None = None) -> ApiShape | None:
    """Which request shape ``request`` is, or ``None`` when it has neither ``messages`` nor ``input``.

    Anthropic is recognised by a top-level ``system``, an ``anthropic_version``/``anthropic_beta`` field,
    Anthropic-only content blocks (``tool_use``, ``tool_result``, ``thinking``, ...) or a provider named
    ``anthropic``/``claude``. A plain ``{"messages": [...]}`` body without any of these is read as OpenAI
    Chat: pass ``api="anthropic"`` (or ``provider="anthropic"``) to say otherwise.
    """
    if not isinstance(request, Mapping):
        return None
    messages = request.get("messages")
    if isinstance(messages, Sequence) and not isinstance(messages, (str, bytes)):
        if provider is not None and provider.strip().lower() in _ANTHROPIC_PROVIDERS:
            return "anthropic"
        if "system" in request or "anthropic_version" in request or "anthropic_beta" in request:
            return "anthropic"
        for message in messages:
            content = message.get("content") if isinstance(message, Mapping) else None
            if (isinstance(content, Sequence) and not isinstance(content, (str, bytes))
                    and any(isinstance(b, Mapping) and b.get("type") in _ANTHROPIC_ONLY_BLOCKS for b in content)):
                return "anthropic"
        return "openai-chat"
    if "input" in request and isinstance(request.get("input"), (str, Sequence)):
        return "responses"
    return None


def uses_prompt_caching(value: Any) -> bool:
    """Whether a ``cache_control`` breakpoint appears anywhere in ``value`` (reference #3890). Iterative, so
    a deeply nested body cannot exhaust the stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if "cache_control" in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, Sequence) and not isinstance(item, (str, bytes)):
            stack.extend(item)
    return False
