"""The same script against mem0 itself and against engram's mem0 adapter: same shapes, same results per call.

mem0 runs offline with ``infer=False``: its own ``langchain`` embedder provider given a LangChain ``Embeddings``
that wraps engram's hashing embedder (so both sides rank by the same vectors), its own ``qdrant`` vector store in
local mode, its history database in ``tmp_path``. The legacy ``langchain`` package mem0's provider imports its
``Embeddings`` class from is not installed here; the test gives it langchain-core's class under that name.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# mem0 reads these when it is imported: no telemetry from tests, and its folder away from the home directory
os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("MEM0_DIR", str(Path(tempfile.gettempdir()) / "engram-tests-mem0"))

import pytest
from langchain_core.embeddings import Embeddings
from services import unavailable

import engram
from engram.compat.mem0 import AsyncMemory, Memory
from engram.embed import HashingEmbedder

try:
    import mem0
    from mem0.exceptions import ValidationError as Mem0ValidationError

    MEM0_PROBLEM: str | None = None
except ImportError as exc:  # mem0ai is a test-only dependency: without it these tests skip (or fail in CI)
    MEM0_PROBLEM = str(exc)

DIM = 64
ALICE = {"user_id": "alice"}


class HashingEmbeddings(Embeddings):
    """engram's hashing embedder as a LangChain ``Embeddings`` (what mem0's ``langchain`` provider takes)."""

    def __init__(self, embedder: HashingEmbedder) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self.embedder.embed(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.fixture
def hashing() -> HashingEmbedder:
    return HashingEmbedder(DIM)


@pytest.fixture
def mem0_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """mem0 importable and able to run offline here (else the test skips, or fails in CI)."""
    if MEM0_PROBLEM is not None:
        unavailable("mem0ai", MEM0_PROBLEM)
    if importlib.util.find_spec("langchain") is None:  # give mem0's provider the class it imports by its old path
        base = types.ModuleType("langchain.embeddings.base")
        base.Embeddings = Embeddings  # type: ignore[attr-defined]
        package, embeddings = types.ModuleType("langchain"), types.ModuleType("langchain.embeddings")
        embeddings.base = base  # type: ignore[attr-defined]
        package.embeddings = embeddings  # type: ignore[attr-defined]
        for name, module in (("langchain", package), ("langchain.embeddings", embeddings),
                             ("langchain.embeddings.base", base)):  # fmt: skip
            monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")  # mem0 builds its LLM client; infer=False never calls it


@pytest.fixture
def original(mem0_ready: None, tmp_path: Path, hashing: HashingEmbedder) -> Iterator[Any]:
    """A real mem0 ``Memory``, offline."""
    memory = mem0.Memory.from_config(mem0_config(tmp_path / "sync", hashing))
    yield memory
    memory.vector_store.client.close()
    memory.close()


def mem0_config(folder: Path, hashing: HashingEmbedder) -> dict[str, Any]:
    """mem0 offline: its langchain embedder over engram's hashing embedder, local Qdrant, history in ``folder``."""
    return {
        "embedder": {"provider": "langchain", "config": {"model": HashingEmbeddings(hashing)}},
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "side_by_side", "embedding_model_dims": DIM, "path": str(folder / "qdrant"),
            "on_disk": False}},
        "history_db_path": str(folder / "history.db"),
    }  # fmt: skip


@pytest.fixture
def adapter(hashing: HashingEmbedder) -> Iterator[Memory]:
    """engram's adapter over an in-memory store with the same embedder."""
    memory = Memory(store=engram.open(":memory:", embedder=hashing))
    yield memory
    memory.close()


def run_script(m: Any) -> dict[str, Any]:
    """The script both run: memories of two users with metadata, then every method (mem0 2.x's call forms)."""
    out: dict[str, Any] = {}
    out["add_list"] = m.add(
        [{"role": "user", "content": "I like green tea in the morning"},
         {"role": "assistant", "content": "Noted, green tea every morning"}],
        user_id="alice", metadata={"topic": "drinks", "priority": 2}, infer=False,
    )  # fmt: skip
    out["add_str"] = m.add("I live in Lyon near the river", user_id="alice", metadata={"topic": "home", "priority": 1},
                           infer=False)  # fmt: skip
    out["add_dict"] = m.add({"role": "user", "content": "I work as a nurse on night shifts", "name": "alice-phone"},
                            user_id="alice", agent_id="helper", metadata={"topic": "work"}, infer=False)  # fmt: skip
    out["add_bob"] = m.add(
        [{"role": "system", "content": "You are a helpful assistant"},
         {"role": "user", "content": "I prefer black coffee with no sugar"},
         {"role": "user", "content": "I live in Berlin with my cat"}],
        user_id="bob", metadata={"topic": "mixed"}, infer=False,
    )  # fmt: skip
    out["add_expired"] = m.add("I used to drink cola every day", user_id="alice", metadata={"topic": "drinks"},
                               expiration_date="2020-01-01", infer=False)  # fmt: skip
    out["search_all"] = m.search("green tea in the morning", filters=ALICE, top_k=10, threshold=0.0)
    out["search_top2"] = m.search("green tea in the morning", filters=ALICE, top_k=2, threshold=0.0)
    out["search_default"] = m.search("where do I live", filters=ALICE)
    out["search_threshold"] = m.search("green tea", filters=ALICE, top_k=10, threshold=0.3)
    out["search_meta"] = m.search("tea", filters={**ALICE, "topic": "drinks"}, top_k=10, threshold=0.0)
    out["search_gte"] = m.search("tea", filters={**ALICE, "priority": {"gte": 2}}, top_k=10, threshold=0.0)
    out["search_in"] = m.search(
        "where I live and work", filters={**ALICE, "topic": {"in": ["home", "work"]}}, top_k=10, threshold=0.0
    )
    out["search_agent"] = m.search("nurse", filters={"agent_id": "helper"}, top_k=10, threshold=0.0)
    out["search_bob"] = m.search("I like coffee", filters={"user_id": "bob"}, top_k=10, threshold=0.0)
    first = out["add_list"]["results"][0]["id"]
    out["get"] = m.get(first)
    out["get_missing"] = m.get("00000000-0000-4000-8000-000000000000")
    out["get_all_alice"] = m.get_all(filters=ALICE)
    out["get_all_bob"] = m.get_all(filters={"user_id": "bob"}, top_k=100)
    out["get_all_agent"] = m.get_all(filters={"agent_id": "helper"})
    out["get_all_top1"] = m.get_all(filters=ALICE, top_k=1)
    out["update"] = m.update(first, text="I love green tea in the morning")
    out["update_meta"] = m.update(first, metadata={"priority": 3})
    out["get_updated"] = m.get(first)
    out["delete"] = m.delete(first)
    out["get_deleted"] = m.get(first)
    out["history"] = m.history(first)
    out["delete_all"] = m.delete_all(user_id="bob")
    out["get_all_bob_after"] = m.get_all(filters={"user_id": "bob"})
    out["get_all_alice_after"] = m.get_all(filters=ALICE)
    expired = out["add_expired"]["results"][0]["id"]
    out["search_show_expired"] = m.search("cola every day", filters=ALICE, top_k=10, threshold=0.0, show_expired=True)
    out["get_all_show_expired"] = m.get_all(filters=ALICE, show_expired=True)
    out["get_expired"] = m.get(expired)
    out["update_unexpire"] = m.update(expired, expiration_date=None)
    out["search_unexpired"] = m.search("cola every day", filters=ALICE, top_k=10, threshold=0.0)
    out["get_unexpired"] = m.get(expired)
    return out


ERRORS: list[tuple[str, Callable[[Any], Any]]] = [
    ("add without ids", lambda m: m.add("hello", infer=False)),
    ("add of a number", lambda m: m.add(42, user_id="alice", infer=False)),
    ("blank user id", lambda m: m.add("hello", user_id="  ", infer=False)),
    ("user id with a space", lambda m: m.add("hello", user_id="a b", infer=False)),
    ("search without ids", lambda m: m.search("tea", filters={"topic": "drinks"})),
    ("search of nothing", lambda m: m.search("   ", filters=ALICE)),
    ("threshold above 1", lambda m: m.search("tea", filters=ALICE, threshold=1.5)),
    ("negative top_k", lambda m: m.search("tea", filters=ALICE, top_k=-1)),
    ("get_all without ids", lambda m: m.get_all(filters={})),
    ("unknown operator", lambda m: m.search("tea", filters={**ALICE, "topic": {"regex": "d.*"}})),
    ("update of a missing id", lambda m: m.update("00000000-0000-4000-8000-000000000000", text="x")),
    ("update of nothing", lambda m: m.update("00000000-0000-4000-8000-000000000000")),
    ("delete of a missing id", lambda m: m.delete("00000000-0000-4000-8000-000000000000")),
    ("delete_all without ids", lambda m: m.delete_all()),
    ("expiration date not a date", lambda m: m.add("hello", user_id="a", expiration_date="soon", infer=False)),
    ("expiration date of a number", lambda m: m.add("hello", user_id="a", expiration_date=20300101, infer=False)),
]


def texts(result: dict[str, Any]) -> set[str]:
    return {r["memory"] for r in result["results"]}


def shape(entry: dict[str, Any]) -> dict[str, type]:
    """Each key and the type of its value (None counts as its own type)."""
    return {k: type(v) for k, v in entry.items()}


class Awaited:
    """An async memory seen through sync calls (each coroutine run to its end on one loop): the script is shared."""

    def __init__(self, memory: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.memory, self.loop = memory, loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.memory, name)
        return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))


def test_side_by_side_results_and_shapes_agree(original: Any, adapter: Memory) -> None:
    compare(run_script(original), run_script(adapter))


def test_side_by_side_async_memories_agree(mem0_ready: None, tmp_path: Path, hashing: HashingEmbedder) -> None:
    theirs = mem0.AsyncMemory.from_config(mem0_config(tmp_path / "async", hashing))
    ours = AsyncMemory(store=engram.open(":memory:", embedder=hashing))
    loop = asyncio.new_event_loop()
    try:
        compare(run_script(Awaited(theirs, loop)), run_script(Awaited(ours, loop)))
    finally:
        theirs.vector_store.client.close()
        theirs.close()
        ours.close()
        loop.close()


def compare(theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    """Same calls, same shapes, same memories per call, the same ranking and scores for searches."""
    assert theirs.keys() == ours.keys()
    compared = 0
    for call in theirs:
        a, b = theirs[call], ours[call]
        if call == "get_all_top1":  # a page of a listing: mem0 lists in its vector store's order, engram newest first
            assert len(a["results"]) == len(b["results"]) == 1
            assert texts(b) <= texts(ours["get_all_alice"])
            core = {"id", "memory", "hash", "metadata", "created_at", "updated_at", "user_id", "role"}
            assert core <= a["results"][0].keys() and core <= b["results"][0].keys() and "score" not in b["results"][0]
            compared += 1
        elif isinstance(a, dict) and "results" in a:
            assert texts(a) == texts(b), call
            assert len(a["results"]) == len(b["results"]), call
            for x, y in zip(sorted(a["results"], key=lambda r: r["memory"]),
                            sorted(b["results"], key=lambda r: r["memory"]), strict=True):  # fmt: skip
                assert shape(x) == shape(y), (call, x, y)
                for key in ("memory", "hash", "metadata", "user_id", "agent_id", "run_id", "actor_id", "role",
                            "event", "expiration_date"):  # fmt: skip
                    assert x.get(key) == y.get(key), (call, key)
                if x.get("score") is not None:
                    assert y["score"] == pytest.approx(x["score"], abs=2e-3), call  # engram stores float16 vectors
            if a["results"] and "score" in a["results"][0]:  # ranked alike: the same vectors, the same cosine
                assert [r["memory"] for r in a["results"]] == [r["memory"] for r in b["results"]], call
            compared += 1
        elif call == "history":
            assert [(h["event"], h["old_memory"], h["new_memory"]) for h in a] == [
                (h["event"], h["old_memory"], h["new_memory"]) for h in b
            ]
            for x, y in zip(a, b, strict=True):
                assert set(x) <= set(y) and set(y) - set(x) == {"commit", "author"}
                assert {k: type(x[k]) for k in x} == {k: type(y[k]) for k in x}
                assert (x["is_deleted"], x["role"], x["actor_id"]) == (y["is_deleted"], y["role"], y["actor_id"])
            compared += 1
        elif isinstance(a, dict):
            assert shape(a) == shape(b), call
            for key in ("memory", "hash", "metadata", "user_id", "role", "message", "expiration_date"):
                assert a.get(key) == b.get(key), (call, key)
            compared += 1
        else:
            assert a is None and b is None, call
            compared += 1
    assert compared == len(theirs) == 35
    # the script is not vacuous: the searches found what they should on both sides
    assert texts(ours["search_top2"]) == {"I like green tea in the morning", "Noted, green tea every morning"}
    assert texts(ours["search_meta"]) == {"I like green tea in the morning", "Noted, green tea every morning"}
    assert texts(ours["search_agent"]) == {"I work as a nurse on night shifts"}
    assert 0 < len(ours["search_threshold"]["results"]) < len(ours["search_all"]["results"])
    assert [h["event"] for h in ours["history"]] == ["ADD", "UPDATE", "UPDATE", "DELETE"]
    assert ours["get_all_bob_after"] == {"results": []} and len(ours["get_all_alice_after"]["results"]) == 3
    assert "I used to drink cola every day" not in texts(ours["search_all"]) | texts(ours["get_all_alice"])
    assert "I used to drink cola every day" in texts(ours["search_show_expired"]) & texts(ours["search_unexpired"])
    assert ours["get_expired"]["expiration_date"] == "2020-01-01" and ours["get_unexpired"]["expiration_date"] is None


@pytest.mark.parametrize(("case", "call"), ERRORS, ids=[c for c, _ in ERRORS])
def test_side_by_side_errors_agree(original: Any, adapter: Memory, case: str, call: Callable[[Any], Any]) -> None:
    with pytest.raises(Exception) as theirs:
        call(original)
    with pytest.raises(Exception) as ours:
        call(adapter)
    if isinstance(theirs.value, Mem0ValidationError):
        assert type(ours.value).__name__ == "ValidationError"
        assert ours.value.error_code == theirs.value.error_code  # type: ignore[attr-defined]
        assert ours.value.details == theirs.value.details  # type: ignore[attr-defined]
    else:
        assert type(theirs.value) is ValueError
        assert isinstance(ours.value, ValueError)
    if case == "unknown operator":  # mem0's message here is its vector store's (Qdrant's); both name the operator
        assert "regex" in str(ours.value) and "regex" in str(theirs.value)
    else:
        assert str(ours.value) == str(theirs.value), case
