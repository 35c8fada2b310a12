"""LlamaIndex with memroute (issue 30), with the real ``llama-index-core``: ``MemrouteMemoryBlock`` inside
``llama_index.core.memory.Memory`` puts one end user's relevant memories into the system message, and learns
from the messages flushed out of short-term memory. No model is involved: the block is read and written the
way an agent's memory is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory

import memroute
from memroute import ValidationError, end_user_tenant
from memroute.integrations.llama_index import MemrouteMemoryBlock


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    with memroute.open(data_dir=str(tmp_path / "d"), memory={"enabled": True},
                       embedding={"source": "static"}) as service:
        yield service


def _system(messages: list[ChatMessage]) -> str:
    return "\n".join(str(m.content) for m in messages if m.role.value == "system")


def test_the_block_injects_one_end_users_memories(mem: Any) -> None:
    mem.add(api_key_id=end_user_tenant("shop", "u1"), key="diet", content="I am vegetarian")
    mem.add(api_key_id=end_user_tenant("shop", "u2"), key="diet", content="I love steak")
    for user, mine, theirs in (("u1", "vegetarian", "steak"), ("u2", "steak", "vegetarian")):
        memory = Memory.from_defaults(session_id=f"s-{user}", memory_blocks=[
            MemrouteMemoryBlock(mem=mem, api_key_id=end_user_tenant("shop", user))])
        memory.put(ChatMessage(role="user", content="What food should I cook tonight? vegetarian or steak?"))
        system = _system(memory.get())
        assert mine in system and theirs not in system and "<memroute>" in system


def test_flushed_messages_are_learned(mem: Any) -> None:
    block = MemrouteMemoryBlock(mem=mem, api_key_id="shop/u1", session_id="conv-1")
    memory = Memory.from_defaults(session_id="conv-1", token_limit=60, chat_history_token_ratio=0.5,
                                  token_flush_size=20, memory_blocks=[block])
    memory.put(ChatMessage(role="user", content="I'll use Postgres for this project."))
    for turn in range(6):
        memory.put(ChatMessage(role="assistant", content=f"Understood, noted point number {turn} for later."))
        memory.put(ChatMessage(role="user", content=f"Here is another unrelated remark number {turn}."))
    assert mem.flush(timeout=10)
    learned = mem.list(api_key_id="shop/u1").data
    assert any("Postgres" in m.content and m.session_id == "conv-1" for m in learned)
    assert mem.list(api_key_id="shop/u2").total == 0


def test_bad_fields_are_validation_errors(mem: Any) -> None:
    with pytest.raises(ValidationError, match="api_key_id"):
        MemrouteMemoryBlock(mem=mem, api_key_id="")
    with pytest.raises(ValidationError, match="limit"):
        MemrouteMemoryBlock(mem=mem, api_key_id="shop/u1", limit=0)


def test_the_docs_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "llama-index.md"
    text = doc.read_text(encoding="utf-8")
    example = re.search(r"<!-- example: llama-index -->\n```python\n(.*?)```", text, re.S)
    assert example and text.count("```python") == 1
    exec(compile(example.group(1), str(doc), "exec"), {"DATA_DIR": str(tmp_path / "doc"), "__name__": "doc"})
    assert "- I am vegetarian" in capsys.readouterr().out
