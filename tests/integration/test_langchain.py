"""LangChain with memroute (issue 30), with the real ``langchain-core``: ``MemrouteRetriever`` in a runnable chain
and ``MemrouteChatMessageHistory`` under ``RunnableWithMessageHistory``, per end user of one app. The chat model
is a scripted fake that records its input (it stands in for a paid model's judgement)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import memroute
from memroute import ValidationError, end_user_tenant
from memroute.integrations.langchain import MemrouteChatMessageHistory, MemrouteRetriever

SEEN: list[list[BaseMessage]] = []


class RecordingModel(GenericFakeChatModel):
    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        SEEN.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    with memroute.open(data_dir=str(tmp_path / "d"), memory={"enabled": True},
                       embedding={"source": "static"}) as service:
        yield service


def test_the_retriever_returns_one_end_users_memories(mem: Any) -> None:
    for user, fact in (("u1", "I am vegetarian"), ("u2", "I love steak")):
        mem.add(api_key_id=end_user_tenant("shop", user), key="diet", content=fact)
    mem.add(api_key_id=end_user_tenant("shop", "u1"), key="city", content="I live in Lisbon")
    retriever = MemrouteRetriever(mem=mem, api_key_id=end_user_tenant("shop", "u1"), limit=3)
    documents = retriever.invoke("what food do I eat? vegetarian")
    assert documents[0].page_content == "I am vegetarian"
    assert {d.page_content for d in documents} <= {"I am vegetarian", "I live in Lisbon"}
    assert documents[0].metadata["key"] == "diet" and 0 <= documents[0].metadata["score"] <= 1
    other = asyncio.run(MemrouteRetriever(mem=mem, api_key_id="shop/u2").ainvoke("what food do I eat?"))
    assert [d.page_content for d in other] == ["I love steak"]
    with pytest.raises(ValidationError):
        MemrouteRetriever(mem=mem, api_key_id="")


def test_the_message_history_keeps_the_conversation_and_learns(mem: Any) -> None:
    SEEN.clear()
    model = RecordingModel(messages=iter(["Noted.", "Postgres, as you said."]))
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])

    def history(session_id: str) -> MemrouteChatMessageHistory:
        return MemrouteChatMessageHistory(mem, session_id, api_key_id=end_user_tenant("shop", "u1"))

    chain = RunnableWithMessageHistory(prompt | model, history, input_messages_key="question",
                                       history_messages_key="history")
    settings = {"configurable": {"session_id": "conv-1"}}
    chain.invoke({"question": "I'll use Postgres for this project."}, settings)
    chain.invoke({"question": "Which database?"}, settings)
    assert [m.content for m in SEEN[-1]] == ["I'll use Postgres for this project.", "Noted.", "Which database?"]
    stored = history("conv-1").messages
    assert [type(m) for m in stored] == [HumanMessage, AIMessage, HumanMessage, AIMessage]
    assert MemrouteChatMessageHistory(mem, "conv-1", api_key_id="shop/u2").messages == []  # another end user
    assert mem.flush(timeout=10)
    learned = mem.list(api_key_id="shop/u1").data
    assert any("Postgres" in m.content and m.session_id == "conv-1" for m in learned)
    asyncio.run(history("conv-1").aclear())
    assert history("conv-1").messages == [] and mem.list(api_key_id="shop/u1").total == len(learned)


def test_the_docs_example_runs(mem: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "langchain.md"
    text = doc.read_text(encoding="utf-8")
    example = re.search(r"<!-- example: langchain -->\n```python\n(.*?)```", text, re.S)
    assert example and text.count("```python") == 1
    SEEN.clear()
    model = RecordingModel(messages=iter(["Try the lentil curry."]))
    exec(compile(example.group(1), str(doc), "exec"),
         {"DATA_DIR": str(tmp_path / "doc"), "MODEL": model, "__name__": "doc"})
    assert capsys.readouterr().out.splitlines() == ["Try the lentil curry."]
    assert "I am vegetarian" in SEEN[-1][0].content
