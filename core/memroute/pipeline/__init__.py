"""The conversation pipeline: read requests, extract facts, inject memories, summarize.

* :mod:`memroute.pipeline.requests` — the user's last message and the assistant's reply in OpenAI Chat,
  Anthropic Messages and OpenAI Responses shapes;
* :mod:`memroute.pipeline.inject` — the memory block and where it goes;
* :mod:`memroute.pipeline.gate` — settings gate and opt-out headers;
* :mod:`memroute.pipeline.summarize` — summary text and compaction selection.
"""

from __future__ import annotations

from memroute.pipeline.gate import memory_enabled, opted_out, should_use_memory
from memroute.pipeline.inject import format_memory_block, inject_block, inject_memories
from memroute.pipeline.requests import assistant_text, detect_api, last_user_text, query_text
from memroute.pipeline.summarize import build_summary, select_for_compaction

__all__ = [
    "assistant_text",
    "build_summary",
    "detect_api",
    "format_memory_block",
    "inject_block",
    "inject_memories",
    "last_user_text",
    "memory_enabled",
    "opted_out",
    "query_text",
    "select_for_compaction",
    "should_use_memory",
]
