"""``MemrouteStore``: LangGraph's ``BaseStore`` over memroute (issue 30), with the real ``langgraph`` package. The
store's operations (sync, async, batched), end-user isolation between two apps with two end users each, and a
``create_react_agent`` that saves a memory through a tool in one thread and gets it back in another. The chat
model is a scripted fake (``GenericFakeChatModel``): it stands in for a paid model's judgement, nothing else."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.config import get_store
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import BaseStore, InvalidNamespaceError

import memroute
from memroute.integrations.langgraph import MemrouteStore


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    with memroute.open(data_dir=str(tmp_path / "d"), embedding={"source": "static"}) as service:
        yield service


def test_put_get_search_delete_and_namespaces(mem: Any) -> None:
    store = MemrouteStore(mem, tenant="shop")
    store.put(("u1", "memories"), "food", {"content": "I am vegetarian", "rating": 5})
    store.put(("u1", "memories"), "city", {"content": "I live in Lisbon", "rating": 3})
    store.put(("u1", "procedural"), "style", {"text": "Answer in short bullet points"})
    store.put(("u2", "memories"), "food", {"content": "I love steak", "rating": 4})
    item = store.get(("u1", "memories"), "food")
    assert item is not None and item.value == {"content": "I am vegetarian", "rating": 5}
    assert item.namespace == ("u1", "memories") and item.key == "food"
    assert store.get(("u2", "memories"), "city") is None

    store.put(("u1", "memories"), "food", {"content": "I am vegan now", "rating": 5})  # an upsert, same id
    assert mem.get_by_key(MemrouteStore._key(("memories",), "food"), api_key_id="shop/u1").content == "I am vegan now"
    assert mem.list(api_key_id="shop/u1").total == 3
    assert mem.get_by_key(MemrouteStore._key(("procedural",), "style"), api_key_id="shop/u1").type.value == \
        "procedural"

    found = store.search(("u1",), query="where do I live")
    assert found and found[0].key == "city" and found[0].score is not None
    assert {i.namespace[0] for i in store.search(("u1",), query="food diet steak vegan")} == {"u1"}
    assert [i.key for i in store.search(("u1", "memories"), filter={"rating": {"$gte": 4}})] == ["food"]
    assert [i.key for i in store.search(("u1", "memories"), limit=1, offset=1)] == ["city"]
    assert {i.key for i in store.search(("u1", "memories"))} == {"food", "city"}

    assert store.list_namespaces() == [("u1", "memories"), ("u1", "procedural"), ("u2", "memories")]
    assert store.list_namespaces(prefix=("u1",)) == [("u1", "memories"), ("u1", "procedural")]
    assert store.list_namespaces(suffix=("memories",)) == [("u1", "memories"), ("u2", "memories")]
    assert store.list_namespaces(max_depth=1) == [("u1",), ("u2",)]

    store.delete(("u1", "memories"), "city")
    assert store.get(("u1", "memories"), "city") is None and mem.list(api_key_id="shop/u1").total == 2
    with pytest.raises(InvalidNamespaceError):
        store.put(("not/a user", "memories"), "k", {"content": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.get((), "k")


def test_two_apps_and_their_end_users_never_meet(mem: Any) -> None:
    shop, cafe = MemrouteStore(mem, tenant="shop"), MemrouteStore(mem, tenant="cafe")
    for store, app in ((shop, "shop"), (cafe, "cafe")):
        for user in ("u1", "u2"):
            store.put((user, "memories"), "pet", {"content": f"{app} {user} has a cat called Miso"})
    for store, app in ((shop, "shop"), (cafe, "cafe")):
        for user in ("u1", "u2"):
            hits = store.search((user,), query="cat called Miso")
            assert [h.value["content"] for h in hits] == [f"{app} {user} has a cat called Miso"]
    mem.add(api_key_id="shop/u1", content="a memory the proxy made", key="pref:x")  # not a LangGraph item
    assert shop.list_namespaces() == [("u1", "memories"), ("u2", "memories")]
    assert {i.value["content"] for i in shop.search(("u1",))} == {"shop u1 has a cat called Miso"}
    assert mem.end_users("cafe") == ["u1", "u2"]


def test_batch_and_async(mem: Any) -> None:
    from langgraph.store.base import GetOp, PutOp, SearchOp

    store = MemrouteStore(mem, tenant="shop")
    results = store.batch([PutOp(("u1", "notes"), "a", {"content": "alpha note"}), GetOp(("u1", "notes"), "a"),
                           SearchOp(("u1",), query="alpha"), PutOp(("u1", "notes"), "a", None),
                           GetOp(("u1", "notes"), "a")])
    assert results[0] is None and results[1].value == {"content": "alpha note"}
    assert [i.key for i in results[2]] == ["a"] and results[3] is None and results[4] is None

    async def run() -> None:
        await store.aput(("u2", "notes"), "b", {"content": "beta note"})
        assert (await store.aget(("u2", "notes"), "b")).value == {"content": "beta note"}
        assert [i.key for i in await store.asearch(("u2",), query="beta")] == ["b"]
        assert await store.alist_namespaces() == [("u2", "notes")]
        await store.adelete(("u2", "notes"), "b")
        assert await store.aget(("u2", "notes"), "b") is None

    asyncio.run(run())


SEEN: list[list[BaseMessage]] = []
"""What the scripted model was sent, call by call."""


class ScriptedModel(GenericFakeChatModel):
    """A chat model answering from a script, recording what it was sent (stands in for a paid model)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        SEEN.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@tool
def save_memory(fact: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Remember a fact about the user."""
    store.put((config["configurable"]["user_id"], "memories"), fact[:40], {"content": fact})
    return "saved"


def recall(state: dict[str, Any], config: RunnableConfig) -> list[BaseMessage]:
    user = config["configurable"]["user_id"]
    last = state["messages"][-1].content
    memories = "\n".join(item.value["content"] for item in get_store().search((user, "memories"), query=last))
    return [SystemMessage(f"What you know about the user:\n{memories}"), *state["messages"]]


def test_create_react_agent_remembers_across_threads(mem: Any) -> None:
    store = MemrouteStore(mem, tenant="shop")
    model = ScriptedModel(messages=iter([
        AIMessage("", tool_calls=[{"name": "save_memory", "args": {"fact": "I am allergic to peanuts"},
                                   "id": "call_1"}]),
        AIMessage("Noted."),
        AIMessage("No peanut satay then."),
        AIMessage("Anything you like."),
    ]))
    SEEN.clear()
    with pytest.warns(DeprecationWarning):  # LangGraph 1.x points to langchain.agents; the prebuilt one still works
        agent = create_react_agent(model, [save_memory], prompt=recall, store=store)
    agent.invoke({"messages": [("user", "Remember: I am allergic to peanuts")]},
                 {"configurable": {"user_id": "u1", "thread_id": "t1"}})
    assert store.get(("u1", "memories"), "I am allergic to peanuts").value == {"content": "I am allergic to peanuts"}
    agent.invoke({"messages": [("user", "Which dish has no peanuts allergy risk?")]},
                 {"configurable": {"user_id": "u1", "thread_id": "t2"}})
    assert "allergic to peanuts" in SEEN[-1][0].content  # recalled in a new thread
    agent.invoke({"messages": [("user", "Which dish has no peanuts allergy risk?")]},
                 {"configurable": {"user_id": "u2", "thread_id": "t3"}})
    assert "peanuts" not in SEEN[-1][0].content  # another end user: nothing of u1


def test_the_docs_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    doc = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "langgraph.md"
    text = doc.read_text(encoding="utf-8")
    example = re.search(r"<!-- example: store -->\n```python\n(.*?)```", text, re.S)
    assert example and text.count("```python") == 1
    model = ScriptedModel(messages=iter([AIMessage("Hi!")]))
    with pytest.warns(DeprecationWarning):
        exec(compile(example.group(1), str(doc), "exec"),
             {"DATA_DIR": str(tmp_path / "d"), "MODEL": model, "__name__": "doc"})
    assert capsys.readouterr().out.splitlines() == [
        "('u1', 'memories') diet I am vegetarian", "[('u1', 'memories'), ('u2', 'memories')]", "Hi!"]
