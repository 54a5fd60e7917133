"""EngramStore behaves like LangGraph's own stores, and a compiled graph uses it through runtime.store."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import numpy as np
import pytest

pytest.importorskip("langgraph")

from langchain_core.embeddings import Embeddings
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
    TTLConfig,
)

import engram
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
    time.sleep(0.002)
    store.put(("n",), "title", {"title": "kittens", "body": "report"}, index=["title"])
    hits = store.search(("n",), query="kittens")
    # LangGraph's ranking: every item in scope, those without a vector last with no score
    assert [(h.key, h.score is None) for h in hits] == [("title", False), ("hidden", True)]
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
    ttl: TTLConfig = {"default_ttl": 0.001, "refresh_on_read": False}
    store = EngramStore(url=":memory:", embedder="hashing", ttl=ttl)
    store.put(("n",), "short", {"v": 1})
    store.put(("n",), "forever", {"v": 1}, ttl=None)
    time.sleep(0.1)
    # LangGraph's default (omit_expired False): an expired item is read until a sweep deletes it
    assert store.get(("n",), "short") is not None
    assert {h.key for h in store.search(("n",))} == {"short", "forever"}
    ttl["omit_expired"] = True  # read live from store.ttl_config, as LangGraph's stores do
    assert store.get(("n",), "short") is None
    assert [h.key for h in store.search(("n",))] == ["forever"]
    assert store.sweep_ttl() == 1
    ttl["omit_expired"] = False
    assert store.get(("n",), "short") is None


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


def test_async_puts_to_one_item_each_become_a_version(store: EngramStore) -> None:
    async def scenario() -> None:
        await asyncio.gather(*(store.aput(("n",), "k", {"i": i}) for i in range(30)))
        history = store.memory.history(("n",), "k")
        assert [v.item.value["i"] for v in history if v.item is not None] == list(range(29, -1, -1))
        item = await store.aget(("n",), "k")
        assert item is not None and item.value == {"i": 29}

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


# ------------------------------------------------------------------ LangGraph's semantics (issue #10)

LETTERS = "abcde"


class LetterEmbeddings(Embeddings):
    """A deterministic LangChain embeddings object: letter counts, not normalized; records what it embeds."""

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded.extend(texts)
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(text.count(ch)) + 0.5 for ch in LETTERS]


def letter_store(**index: Any) -> tuple[EngramStore, LetterEmbeddings]:
    embeddings = LetterEmbeddings()
    config: IndexConfig = {"dims": len(LETTERS), "embed": embeddings, **index}  # type: ignore[typeddict-item]
    return EngramStore(url=":memory:", index=config), embeddings


def _scores(query: str, text: str) -> dict[str, float]:
    q = np.array(LetterEmbeddings().embed_query(query))
    v = np.array(LetterEmbeddings().embed_query(text))
    return {
        "cosine": float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v))),
        "inner_product": float(q @ v),
        "l2": -float(np.linalg.norm(q - v)),
    }


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_search_scores_like_postgres_store(distance: str) -> None:
    store, _ = letter_store(fields=["text", "tags[*]"], distance_type=distance)
    store.put(("d",), "one", {"text": "aaa", "tags": ["bbb", "abcde"]})
    store.put(("d",), "two", {"text": "eee"})
    hits = store.search(("d",), query="aab")
    best = max(_scores("aab", t)[distance] for t in ("aaa", "bbb", "abcde"))
    assert hits[0].key == "one" and hits[0].score == pytest.approx(best, abs=1e-5)
    assert hits[1].key == "two" and hits[1].score == pytest.approx(_scores("aab", "eee")[distance], abs=1e-5)


def test_search_ranks_every_item_pads_and_pages() -> None:
    store, _ = letter_store(fields=["text"])
    store.put(("d",), "hidden", {"text": "aaaa"}, index=False)
    time.sleep(0.002)
    store.put(("d",), "no-field", {"body": "aaaa"})
    store.put(("d",), "near", {"text": "aaa"})
    store.put(("d", "sub"), "far", {"text": "eee"})
    keys = [h.key for h in store.search(("d",), query="a", limit=10)]
    assert keys == ["near", "far", "no-field", "hidden"]  # unscored items last, newest first
    assert [h.key for h in store.search(("d",), query="a", limit=2, offset=1)] == ["far", "no-field"]
    assert [h.key for h in store.search(("d",), query="a", filter={"text": "eee"})] == ["far"]
    listing = store.search(("d",), query="")  # an empty query is a plain listing
    assert all(h.score is None for h in listing) and len(listing) == 4


def test_field_texts_are_embedded_once() -> None:
    store, embeddings = letter_store(fields=["$"])
    for i in range(20):
        store.put(("d",), f"k{i}", {"text": "abc" * (i % 5)})
    store.search(("d",), query="abc")
    assert len(embeddings.embedded) == 5  # 5 distinct texts (json.dumps of the value, sorted keys)
    assert json.dumps({"text": "abc"}, sort_keys=True) in embeddings.embedded
    store.search(("d",), query="cab")
    store.put(("d",), "k0", {"text": "new"})
    store.search(("d",), query="abc")
    assert len(embeddings.embedded) == 6  # only the changed text


def test_memory_argument_honours_index_embed_and_fields() -> None:
    mem = engram.open(":memory:", embedder="hashing", index_fields=["$"])
    embeddings = LetterEmbeddings()
    store = EngramStore(mem, index={"dims": len(LETTERS), "embed": embeddings, "fields": ["title"]})
    store.put(("d",), "a", {"title": "aaa", "body": "eee"})
    store.put(("d",), "e", {"title": "eee", "body": "aaa"})
    assert [h.key for h in store.search(("d",), query="aaa")] == ["a", "e"]
    assert sorted(embeddings.embedded) == ["aaa", "eee"]  # the titles only: the index's fields, not the memory's
    assert mem.get(("d",), "a") is not None and mem.log()[0].message == "put d/e"


def test_memory_argument_defaults_to_the_memorys_embedder_and_fields() -> None:
    mem = engram.open(":memory:", embedder="hashing", index_fields=["title"])
    store = EngramStore(mem)
    assert store.fields == ["title"] and store.memory.repo is mem.repo
    store.put(("d",), "a", {"title": "dark mode", "body": "billing"})
    store.put(("d",), "b", {"body": "dark mode"})
    assert [(h.key, h.score is None) for h in store.search(("d",), query="dark mode")] == [("a", False), ("b", True)]
    embeddings = LetterEmbeddings()
    config: IndexConfig = {"dims": len(LETTERS), "embed": embeddings, "fields": ["body"]}
    hybrid = EngramStore(mem, index=config, search="hybrid")  # engram's ranking, with the index's model and fields
    assert hybrid.memory.pool.embedder is not None and "LetterEmbeddings" in hybrid.memory.pool.embedder.model_id
    assert hybrid.search(("d",), query="billing")[0].key == "a"
    assert sorted(set(embeddings.embedded)) == ["billing", "dark mode"]


def test_hybrid_ranking_is_an_opt_in() -> None:
    store = EngramStore(url=":memory:", embedder="hashing", search="hybrid")
    store.put(("d",), "a", {"text": "dark mode settings"})
    store.put(("d",), "b", {"text": "billing"}, index=False)
    hits = store.search(("d",), query="dark mode")
    assert [h.key for h in hits] == ["a"] and hits[0].score is not None  # engram's ranking: matches only
    with pytest.raises(engram.ConfigError):
        EngramStore(url=":memory:", search="fuzzy")  # type: ignore[arg-type]


def test_bad_namespaces_raise_langgraphs_error_and_reject_the_batch(store: EngramStore) -> None:
    bad_ops = [
        GetOp(("a.b",), "k"),
        PutOp(("a", ""), "k", {"v": 1}),
        PutOp(("a\x1fb",), "k", {"v": 1}),  # engram's own limit, translated to LangGraph's error
        SearchOp(("a", 1)),  # type: ignore[arg-type]
        ListNamespacesOp((MatchCondition("prefix", ("a", 1)),)),  # type: ignore[arg-type]
        ListNamespacesOp((MatchCondition("suffix", ("a.b",)),)),
    ]
    for op in bad_ops:
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(("valid",), "k", {"v": 1}), op])
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.abatch([op]))
    assert store.get(("valid",), "k") is None


def test_async_bad_op_fails_only_its_caller(store: EngramStore) -> None:
    async def scenario() -> list[Any]:
        return await asyncio.gather(
            store.aput(("n",), "ok", {"v": 1}), store.aget(("n.bad",), "k"), return_exceptions=True
        )

    good, bad = asyncio.run(scenario())
    assert good is None and isinstance(bad, InvalidNamespaceError)
    assert store.get(("n",), "ok") is not None


def test_langgraph_root_label_is_reserved_by_put_only(store: EngramStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"v": 1})
    store.batch([PutOp(("langgraph", "x"), "k", {"v": 1})])
    assert store.get(("langgraph", "x"), "k").value == {"v": 1}  # type: ignore[union-attr]


def test_labels_may_hold_newlines_natively_and_in_langgraph(store: EngramStore) -> None:
    store.put(("users", "alice"), "k", {"v": 1})
    store.put(("users", "alice\n"), "k", {"v": 2})
    assert store.list_namespaces(suffix=("alice",)) == [("users", "alice")]
    assert store.get(("users", "alice\n"), "k").value == {"v": 2}  # type: ignore[union-attr]
    mem = engram.open(":memory:", embedder=None)
    mem.put(("tab\there", "line\nbreak"), "k", {"v": 1})
    assert mem.list_namespaces() == [("tab\there", "line\nbreak")]
    for bad in ("a\x00b", "a.b", "a\x1fb", "\ud800"):
        with pytest.raises(engram.InvalidNamespaceError):
            mem.put((bad,), "k", {})


def test_list_namespaces_conditions_depth_and_expiry() -> None:
    ttl: TTLConfig = {"omit_expired": False}
    store = EngramStore(url=":memory:", embedder=None, ttl=ttl)
    for ns in [("a", "b", "c"), ("a", "b", "d", "x"), ("a", "c", "x"), ("z",)]:
        store.put(ns, "k", {"v": 1})
    store.put(("old",), "k", {"v": 1}, ttl=1e-6)
    time.sleep(0.01)
    assert store.list_namespaces(prefix=("a",), suffix=("x",), max_depth=2) == [("a", "b"), ("a", "c")]
    ops = store.batch([ListNamespacesOp((MatchCondition("prefix", ("a", "*")), MatchCondition("suffix", ("x",))))])
    assert ops[0] == [("a", "b", "d", "x"), ("a", "c", "x")]
    assert ("old",) in store.list_namespaces()
    ttl["omit_expired"] = True
    assert ("old",) not in store.list_namespaces()


def test_refresh_on_read_is_exact_and_one_commit() -> None:
    store = EngramStore(url=":memory:", embedder=None, ttl={"default_ttl": 10, "refresh_on_read": True})
    store.put(("n",), "k", {"v": 1})
    stored = store.memory.get(("n",), "k", refresh_ttl=False)
    assert stored is not None and stored.expires_at is not None
    time.sleep(0.02)
    before = len(store.memory.log())
    store.get(("n",), "k")  # LangGraph refreshes on every read that asks: expires_at = now + TTL
    refreshed = store.memory.get(("n",), "k", refresh_ttl=False)
    assert refreshed is not None and refreshed.expires_at is not None
    assert refreshed.expires_at > stored.expires_at and refreshed.updated_at == stored.updated_at
    assert abs((refreshed.expires_at - datetime.now(UTC)).total_seconds() - 600) < 2
    assert len(store.memory.log()) == before + 1 and store.memory.head.message == "ttl: refresh on read"
    store.get(("n",), "k", refresh_ttl=False)
    store.search(("n",), refresh_ttl=False)
    assert len(store.memory.log()) == before + 1
    quiet = EngramStore(url=":memory:", embedder=None, ttl={"default_ttl": 10, "refresh_on_read": False})
    quiet.put(("n",), "k", {"v": 1})
    commits = len(quiet.memory.log())
    quiet.get(("n",), "k")  # the store's refresh_on_read is the default of every read
    assert len(quiet.memory.log()) == commits


def test_ttl_methods_work_called_or_awaited() -> None:
    store = EngramStore(url=":memory:", embedder=None, ttl={"default_ttl": 1e-6, "sweep_interval_minutes": 60})
    store.put(("n",), "k", {"v": 1})
    time.sleep(0.01)
    swept = store.sweep_ttl()
    assert swept == 1 and swept + 1 == 2
    assert store.start_ttl_sweeper() and store.stop_ttl_sweeper() == True  # noqa: E712

    async def scenario() -> tuple[Any, Any, Any]:
        await store.start_ttl_sweeper()
        return await store.sweep_ttl(), await store.stop_ttl_sweeper(), await store.sweep_ttl()

    assert asyncio.run(scenario()) == (0, True, 0)


def test_filter_values_holding_nul_match_nothing_instead_of_raising(store: EngramStore) -> None:
    store.put(("d",), "a", {"access": "public", "tags": ["x"]})
    store.put(("d",), "b", {"access": "private"})
    assert store.search(("d",), filter={"access": "public\x00' OR '1'='1"}) == []
    assert store.search(("d",), filter={"access": {"$eq": "public\x00"}}) == []
    assert {h.key for h in store.search(("d",), filter={"access": {"$ne": "public\x00"}})} == {"a", "b"}
    assert [h.key for h in store.search(("d",), filter={"access": {"$in": ["public", "x\x00"]}})] == ["a"]
    assert [h.key for h in store.search(("d",), filter={"access": {"$lt": "priv\x00"}})] == []
    assert [h.key for h in store.search(("d",), filter={"access": {"$gte": "private\x00"}})] == ["a"]
    either = {"$or": [{"tags": {"$all": ["\x00"]}}, {"access": "private"}]}
    assert [h.key for h in store.search(("d",), filter=either)] == ["b"]
    with pytest.raises(engram.InvalidFilterError):
        store.search(("d",), filter={"acc\x00ess": "public"})  # no field name can hold it: still refused


def test_updated_at_strictly_increases_across_overwrites(store: EngramStore) -> None:
    mem = engram.open(":memory:", embedder=None)
    stamps = []
    for i in range(30):  # many writes in one millisecond
        mem.put(("n",), "k", {"v": i})
        stamps.append(mem.get(("n",), "k").updated_at)  # type: ignore[union-attr]
    assert all(a < b for a, b in itertools.pairwise(stamps))
    with mem.transaction("twice") as tx:
        tx.put(("n",), "k", {"v": "a"})
        first = tx.get(("n",), "k")
        tx.put(("n",), "k", {"v": "b"})
        assert first is not None and tx.get(("n",), "k").updated_at > first.updated_at  # type: ignore[union-attr]
    seen = []
    for i in range(10):
        store.put(("n",), "k", {"v": i})
        seen.append(store.get(("n",), "k").updated_at)  # type: ignore[union-attr]
    assert all(a < b for a, b in itertools.pairwise(seen))
