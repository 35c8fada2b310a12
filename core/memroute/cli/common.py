"""Shared CLI plumbing: opening the service once per invocation, JSON output, memory rendering."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import attrs
import click

from memroute.errors import ValidationError
from memroute.serialization import memory_to_dict

if TYPE_CHECKING:
    from memroute.models import Memory, SearchResult
    from memroute.service import Memroute

__all__ = ["CliState", "echo_json", "hit_to_dict", "open_service", "read_text", "read_text_lines", "result_to_dict"]


@attrs.define
class CliState:
    config_path: str | None = None
    service: Any = None


def open_service(ctx: click.Context) -> Memroute:
    """The service for this invocation (opened on first use, closed when the command ends)."""
    from memroute.service import Memroute

    state = ctx.find_object(CliState)
    assert state is not None
    if state.service is None:
        state.service = Memroute.open(state.config_path)
        ctx.find_root().call_on_close(state.service.close)
    return state.service


def read_text(file: str) -> str:
    """The UTF-8 text of ``file`` (``-``: stdin); bytes that are not UTF-8 are a ``ValidationError`` naming
    the byte offset, not a ``UnicodeDecodeError``."""
    name = "stdin" if file == "-" else file
    try:
        if file == "-":
            data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        else:
            with open(file, "rb") as handle:
                data = handle.read()
        return data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{name}: not UTF-8 text (invalid byte at offset {exc.start})",
                              [(name, "encoding")]) from None
    except OSError as exc:
        raise ValidationError(f"{name}: cannot read: {exc.strerror or exc}", [(name, "unreadable")]) from None


def read_text_lines(file: str) -> list[str]:
    return read_text(file).splitlines()


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def hit_to_dict(hit: Any) -> dict[str, Any]:
    return {
        "memory": memory_to_dict(hit.memory),
        "score": hit.score,
        "tier": hit.tier,
        "ranks": dict(hit.ranks),
        "leg_scores": dict(hit.leg_scores),
        "tokens": hit.tokens,
    }


def result_to_dict(result: SearchResult) -> dict[str, Any]:
    return {
        "hits": [hit_to_dict(h) for h in result.hits],
        "provenance": attrs.asdict(result.provenance),
    }


def memory_line(memory: Memory) -> str:
    session = f" session={memory.session_id}" if memory.session_id else ""
    return f"{memory.id}  [{memory.type.value}] {memory.key}{session}\n    {memory.content}"
