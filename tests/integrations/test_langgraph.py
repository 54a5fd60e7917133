"""EngramStore behaves like LangGraph's own stores, and a compiled graph uses it through runtime.store."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchItem, SearchOp

from engram.integrations.langgraph import EngramStore


@pytest.fixture
def store() -> EngramStore:
    return EngramStore(url=":memory:", embedder="hashing")


def test_is_a_real_base_store(store: EngramStore) -> None:
    assert isinstance(store, BaseStore) and store.supports_ttl


def test_put_get_delete(store: EngramStore) -> None:
    store.put(("users", "alice"), "prefs", {"theme": "dark"})
    item = store.get(("users", "alice"), "prefs")
    assert isinstance(item, Item) and item.value == {"theme": "dark"}
    assert item.namespace == ("users", "alice") and item.key == "prefs"
    assert set(item.dict()) == {"namespace", "key", "value", "created_at", "updated_at"}
    store.delete(("users", "alice"), "prefs")
    assert store.get(("users", "alice"), "prefs") is None
    assert store.get(("users", "nobody"), "x") is None


def test_every_write_is_a_commit_in_history(store: EngramStore) -> None:
    store.put(("n",), "k", {"v": 1})
    store.put(("n",), "k", {"v": 2})
    assert [c.message for c in store.memory.log()][:2] == ["put n/k", "put n/k"]
    assert store.memory.at("HEAD~1").get(("n",), "k").value == {"v": 1}  # type: ignore[union-attr]


def test_namespace_validation(store: EngramStore) -> None:
    for bad in [(), ("a.b",), ("a", ""), ("langgraph", "x")]:
        with pytest.raises(ValueError):
            store.put(bad, "k", {"v": 1})


def test_search_with_query_filter_and_scores(store: EngramStore) -> None:
    store.put(("docs",), "a", {"text": "dark mode settings", "kind": "ui"})
    time.sleep(0.002)  # distinct updated_at (ms) so "newest first" is defined
    store.put(("docs",), "b", {"text": "billing settings", "kind": "billing"})
    time.sleep(0.002)
    store.put(("docs", "sub"), "c", {"text": "dark mode for the dashboard", "kind": "ui"})
    hits = store.search(("docs",), query="dark mode")
    assert all(isinstance(h, SearchItem) and h.score is not None for h in hits)
    assert {h.key for h in hits[:2]} == {"a", "c"}
    assert [h.key for h in store.search(("docs",), filter={"kind": "billing"})] == ["b"]
    assert [h.key for h in store.search(("docs",), query="settings", filter={"kind": {"$ne": "ui"}})] == ["b"]
    listing = store.search(("docs",), limit=2)
    assert len(listing) == 2 and all(h.score is None for h in listing)
    assert [h.key for h in store.search(("docs",), limit=1, offset=2)] == ["a"]  # newest first


def test_index_false_and_fields(store: EngramStore) -> None:
    store.put(("n",), "hidden", {"text": "kittens"}, index=False)
    store.put(("n",), "title", {"title": "kittens", "body": "report"}, index=["title"])
    assert [h.key for h in store.search(("n",), query="kittens")] == ["title"]
    assert store.get(("n",), "hidden") is not None


def test_list_namespaces_like_langgraph(store: EngramStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "f"), ("a", "c", "f"), ("B",)]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(max_depth=1) == [("B",), ("a",)]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "c"), ("a", "b", "d", "e")]


def test_batch_order_dedupe_and_pre_batch_reads(store: EngramStore) -> None:
    ns = ("n",)
    before = len(store.memory.log())
    results = store.batch(
        [PutOp(ns, "k", {"v": 1}), GetOp(ns, "k"), PutOp(ns, "k", {"v": 2}), SearchOp(ns), PutOp(ns, "j", {"v": 3})]
    )
    assert results == [None, None, None, [], None]
    assert store.get(ns, "k").value == {"v": 2}  # type: ignore[union-attr]
    assert len(store.memory.log()) == before + 1


def test_ttl_expiry_and_sweep() -> None:
    store = EngramStore(url=":memory:", embedder="hashing", ttl={"default_ttl": 0.001, "refresh_on_read": False})
    store.put(("n",), "short", {"v": 1})
    store.put(("n",), "forever", {"v": 1}, ttl=None)
    time.sleep(0.1)
    assert store.get(("n",), "short") is None
    assert [h.key for h in store.search(("n",))] == ["forever"]
    assert store.sweep_ttl() == 1


def test_async_twins_coalesce_into_one_commit(store: EngramStore) -> None:
    async def scenario() -> None:
        before = len(store.memory.log())
        await asyncio.gather(*(store.aput(("n",), f"k{i}", {"i": i}) for i in range(20)))
        assert len(store.memory.log()) == before + 1  # one tick, one batch, one commit
        item = await store.aget(("n",), "k7")
        assert item is not None and item.value == {"i": 7}
        assert len(await store.asearch(("n",), limit=50)) == 20
        assert await store.alist_namespaces() == [("n",)]
        await store.adelete(("n",), "k7")
        assert await store.aget(("n",), "k7") is None

    asyncio.run(scenario())


@dataclass
class Context:
    user_id: str


class State(TypedDict, total=False):
    text: str
    found: list[str]


def write_memory(state: State, *, store: BaseStore) -> State:
    store.put(("memories", "u1"), str(uuid.uuid4()), {"text": state["text"]})
    return {}


def search_memory(state: State, runtime: Runtime[Context]) -> State:
    assert runtime.store is not None and get_store() is runtime.store
    hits = runtime.store.search(("memories", runtime.context.user_id), query=state["text"], limit=5)
    return {"found": [h.value["text"] for h in hits]}


def test_compiled_graph_writes_and_searches(store: EngramStore) -> None:
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("write_memory", write_memory)
    builder.add_node("search_memory", search_memory)
    builder.add_edge(START, "write_memory")
    builder.add_edge("write_memory", "search_memory")
    builder.add_edge("search_memory", END)
    graph = builder.compile(store=store)
    out = graph.invoke({"text": "likes pizza"}, context=Context(user_id="u1"))
    assert out["found"] == ["likes pizza"]
    out = graph.invoke({"text": "plays chess on sundays"}, context=Context(user_id="u1"))
    assert out["found"][0] == "plays chess on sundays"
    assert store.list_namespaces() == [("memories", "u1")]
    assert len(store.memory.log(namespace=("memories",))) == 2


def test_compiled_graph_async(store: EngramStore) -> None:
    async def awrite(state: State, runtime: Runtime[Context]) -> State:
        assert runtime.store is not None
        await runtime.store.aput(("memories", runtime.context.user_id), "k", {"text": state["text"]})
        items = await runtime.store.asearch(("memories", runtime.context.user_id))
        return {"found": [i.value["text"] for i in items]}

    builder = StateGraph(State, context_schema=Context)
    builder.add_node("awrite", awrite)
    builder.add_edge(START, "awrite")
    graph = builder.compile(store=store)
    out = asyncio.run(graph.ainvoke({"text": "async note"}, context=Context(user_id="u1")))
    assert out["found"] == ["async note"]
