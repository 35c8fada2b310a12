"""The OpenAI Agents SDK with memroute (issue 30), with the real ``openai-agents`` package talking the Responses API
to the loopback fake model server (it stands in for the paid model: its replies, tool calls included, are
scripted). ``MemrouteSession`` keeps each conversation's history (shared by two opens of one deployment) and
learns the user's facts; ``memory_tools`` lets the agent save and recall long-term memories; two end users of
one app never see each other's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, set_tracing_disabled
from openai import AsyncOpenAI

import memroute
from memroute import ValidationError, end_user_tenant
from memroute.integrations.openai_agents import MemrouteSession, memory_tools
from tests.servers.fake_llm import fake_llm_server

set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI


@pytest.fixture
def upstream() -> Any:
    with fake_llm_server() as server:
        yield server


@pytest.fixture
def config(tmp_path: Path) -> dict[str, Any]:
    return {"data_dir": str(tmp_path / "d"), "memory": {"enabled": True}, "embedding": {"source": "none"}}


def _model(upstream: Any) -> OpenAIResponsesModel:
    client = AsyncOpenAI(base_url=upstream.base_url + "/v1", api_key="sk-test", max_retries=0)
    return OpenAIResponsesModel(model="gpt-4o", openai_client=client)


def _inputs(upstream: Any) -> list[Any]:
    return [r["body"]["input"] for r in upstream.requests if r["path"] == "/v1/responses"]


def test_a_session_keeps_the_history_across_opens_and_learns(upstream: Any, config: dict[str, Any]) -> None:
    agent = Agent(name="assistant", instructions="Be brief.", model=_model(upstream))
    owner = end_user_tenant("shop", "u1")
    with memroute.open(config) as mem:
        session = MemrouteSession(mem, "conv-1", api_key_id=owner)
        upstream.reply = "Nice to meet you."
        result = Runner.run_sync(agent, "I'll use Postgres for this project.", session=session)
        assert result.final_output == "Nice to meet you."
        assert mem.flush(timeout=10)
        learned = mem.list(api_key_id=owner).data
        assert any("Postgres" in m.content and m.session_id == "conv-1" for m in learned)
    with memroute.open(config) as mem:  # another open of the deployment continues the conversation
        session = MemrouteSession(mem, "conv-1", api_key_id=owner)
        upstream.reply = "Postgres."
        Runner.run_sync(agent, "Which database did I pick?", session=session)
        sent = json.dumps(_inputs(upstream)[-1])
        assert "I'll use Postgres for this project." in sent and "Nice to meet you." in sent
        items = asyncio.run(session.get_items())
        assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
        assert asyncio.run(session.get_items(limit=1)) == items[-1:]
        assert asyncio.run(session.pop_item()) == items[-1]
        other = MemrouteSession(mem, "conv-1", api_key_id=end_user_tenant("shop", "u2"))
        assert asyncio.run(other.get_items()) == []  # another end user's session of the same id
        assert mem.forget_end_user("shop", "u2").histories_deleted == 0  # u2 has no history: u1's stays
        assert asyncio.run(session.get_items())
        asyncio.run(session.clear_session())
        assert asyncio.run(session.get_items()) == []
        assert mem.list(api_key_id=owner).total >= 1  # the learned memories stay
        fresh = Agent(name="assistant", model=_model(upstream))  # a client made on this run's event loop
        Runner.run_sync(fresh, "One more turn.", session=session)
        assert mem.forget_end_user("shop", "u1").histories_deleted == 1  # erasure takes the history too
        assert asyncio.run(session.get_items()) == [] and mem.list(api_key_id=owner).total == 0


def test_memory_tools_save_and_recall_per_end_user(upstream: Any, config: dict[str, Any]) -> None:
    with memroute.open(config) as mem:
        for user, fact in (("u1", "I am allergic to peanuts"), ("u2", "I am allergic to shellfish")):
            agent = Agent(name="assistant", model=_model(upstream),
                          tools=memory_tools(mem, api_key_id=end_user_tenant("shop", user)))
            upstream.outputs.append([{"type": "function_call", "id": "fc_1", "call_id": "call_1",
                                      "name": "save_memory", "arguments": json.dumps({"fact": fact}),
                                      "status": "completed"}])
            upstream.reply = "Saved."
            assert Runner.run_sync(agent, f"Remember: {fact}").final_output == "Saved."
        agent = Agent(name="assistant", model=_model(upstream),
                      tools=memory_tools(mem, api_key_id=end_user_tenant("shop", "u1")))
        upstream.outputs.append([{"type": "function_call", "id": "fc_2", "call_id": "call_2",
                                  "name": "recall_memories", "arguments": json.dumps({"query": "allergic"}),
                                  "status": "completed"}])
        upstream.reply = "Avoid peanuts."
        Runner.run_sync(agent, "What am I allergic to?", run_config=RunConfig(tracing_disabled=True))
        outputs = [item for item in _inputs(upstream)[-1] if item.get("type") == "function_call_output"]
        assert len(outputs) == 1 and "peanuts" in str(outputs[0]["output"])
        assert "shellfish" not in str(outputs[0]["output"])
        assert [m.content for m in mem.list(api_key_id="shop/u2").data] == ["I am allergic to shellfish"]


def test_bad_arguments_are_validation_errors(config: dict[str, Any]) -> None:
    with memroute.open(config) as mem:
        for kwargs in ({"session_id": ""}, {"session_id": "s", "max_items": 0}, {"session_id": "s", "api_key_id": ""}):
            arguments = {"api_key_id": "shop/u1", **kwargs}
            with pytest.raises(ValidationError):
                MemrouteSession(mem, arguments.pop("session_id"), **arguments)


def test_the_docs_example_runs(upstream: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    doc = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "openai-agents.md"
    text = doc.read_text(encoding="utf-8")
    example = re.search(r"<!-- example: agents -->\n```python\n(.*?)```", text, re.S)
    assert example and text.count("```python") == 1
    upstream.reply = "Noted."
    exec(compile(example.group(1), str(doc), "exec"),
         {"DATA_DIR": str(tmp_path / "doc"), "MODEL": _model(upstream), "__name__": "doc"})
    assert capsys.readouterr().out.splitlines() == ["Noted.", "['Will use Postgres for this project']"]
