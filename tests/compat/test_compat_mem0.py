"""engram.compat.mem0: mem0's surface, shapes and errors over engram, and what engram adds (real history)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

import engram
from engram.compat.mem0 import AsyncMemory, Mem0ValidationError, Memory, ValidationError
from engram.embed import HashingEmbedder
from engram.errors import ConfigError, InvalidInputError, WriterError
from engram.writer import OfflineExtractor
from engram.writer.scripted import Reply, ScriptedModelServer

ALICE = {"user_id": "alice"}
RESULT_KEYS = {"id", "memory", "hash", "metadata", "score", "created_at", "updated_at"}
HISTORY_KEYS = {"id", "memory_id", "old_memory", "new_memory", "event", "created_at", "updated_at", "is_deleted",
                "actor_id", "role", "commit", "author"}  # fmt: skip


@pytest.fixture
def m() -> Iterator[Memory]:
    memory = Memory(store=engram.open(":memory:", embedder=HashingEmbedder(64)))
    yield memory
    memory.close()


def seed(m: Memory) -> dict[str, str]:
    """Four memories of alice (one also of an agent), two of bob; returns text -> id."""
    ids: dict[str, str] = {}
    for text, scope, meta in (
        ("I like green tea", ALICE, {"topic": "drinks", "priority": 2}),
        ("I live in Lyon", ALICE, {"topic": "home", "priority": 1, "tags": ["city"]}),
        ("I work as a nurse", {**ALICE, "agent_id": "helper"}, {"topic": "work"}),
        ("I run every Sunday", {**ALICE, "run_id": "r1"}, {"topic": "sport", "note": "Weekly Habit"}),
        ("I like black coffee", {"user_id": "bob"}, {"topic": "drinks"}),
        ("I live in Berlin", {"user_id": "bob"}, {}),
    ):
        ids[text] = m.add(text, **scope, metadata=meta, infer=False)["results"][0]["id"]
    return ids


def texts(result: dict[str, Any]) -> set[str]:
    return {r["memory"] for r in result["results"]}


# -- construction -------------------------------------------------------------------------------------------------


def test_default_memory_is_an_embedded_store_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with Memory() as m:
        m.add("I like tea", user_id="a", infer=False)
    assert (tmp_path / ".engram").is_dir()
    with Memory(store=str(tmp_path / ".engram")) as again:
        assert texts(again.get_all(filters={"user_id": "a"})) == {"I like tea"}


def test_from_config_reads_the_engram_section_and_replaces_mem0_stores(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    config = {
        "engram": {"store": url, "embedder": "hashing", "search": "hybrid", "author": "app"},
        "vector_store": {"provider": "qdrant", "config": {}},
        "history_db_path": "/nowhere/history.db",
    }
    with Memory.from_config(config) as m:
        m.add("I like tea", user_id="a", infer=False)
        assert m.settings.search == "hybrid" and m.memory.log(limit=1)[0].author == "app"
        assert texts(m.search("tea", filters={"user_id": "a"}, threshold=0.0)) == {"I like tea"}
    assert (tmp_path / "mem.db").exists()


def test_from_config_maps_an_openai_compatible_llm_to_the_writer_extractor() -> None:
    config = {"llm": {"provider": "ollama", "config": {"model": "llama3"}},
              "engram": {"store": ":memory:", "embedder": "hashing"}}  # fmt: skip
    with Memory.from_config(config) as m:
        assert m.settings.extractor == "openai:llama3@http://localhost:11434/v1"


@pytest.mark.parametrize(
    "config",
    [{"vectorstore": {}}, {"engram": {"store": ":memory:", "colour": "red"}},
     {"llm": {"provider": "anthropic", "config": {"model": "x"}}}, {"engram": {"store": ":memory:", "search": "bm25"}}],
)  # fmt: skip
def test_from_config_refuses_what_it_cannot_honour(config: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Memory.from_config(config)


# -- add ----------------------------------------------------------------------------------------------------------


def test_add_without_infer_makes_one_memory_per_message_in_one_commit(m: Memory) -> None:
    before = len(m.memory.log())
    out = m.add(
        [{"role": "system", "content": "be nice"}, {"role": "user", "content": "I like tea"},
         {"role": "assistant", "content": "Noted", "name": "bot"}],
        user_id="alice", metadata={"topic": "drinks"}, infer=False,
    )  # fmt: skip
    assert len(m.memory.log()) == before + 1
    assert [(r["memory"], r["event"], r["role"], r["actor_id"]) for r in out["results"]] == [
        ("I like tea", "ADD", "user", None), ("Noted", "ADD", "assistant", "bot")]  # fmt: skip
    for r in out["results"]:
        assert uuid.UUID(r["id"]).version == 4
        item = m.memory.get(("mem0", "users", "alice"), r["id"])
        assert item is not None and item.value["metadata"] == {"topic": "drinks"}
    assert m.get(out["results"][1]["id"])["actor_id"] == "bot"  # type: ignore[index]


def test_add_accepts_a_string_and_a_dict(m: Memory) -> None:
    assert m.add("I like tea", agent_id="bot", infer=False)["results"][0]["role"] == "user"
    only = m.add({"role": "user", "content": "I like jam"}, run_id="r1", infer=False)["results"]
    assert [r["memory"] for r in only] == ["I like jam"]
    assert m.memory.get(("mem0", "runs", "r1"), only[0]["id"]) is not None


def test_add_identity_keys_in_metadata_do_not_change_the_scope(m: Memory) -> None:
    memory_id = m.add("I like tea", user_id="alice", metadata={"user_id": "mallory", "x": 1}, infer=False)["results"][
        0
    ]["id"]
    got = m.get(memory_id)
    assert got is not None and got["user_id"] == "alice" and got["metadata"] == {"x": 1}


def test_add_errors_are_mem0s(m: Memory) -> None:
    with pytest.raises(ValidationError) as none:
        m.add("hello", infer=False)
    assert none.value.error_code == "VALIDATION_001" and isinstance(none.value, ValueError)
    assert isinstance(none.value, InvalidInputError) and Mem0ValidationError is ValidationError
    with pytest.raises(ValidationError) as kind:
        m.add(42, user_id="a", infer=False)
    assert kind.value.error_code == "VALIDATION_003"
    with pytest.raises(ValidationError) as typed:
        m.add("hello", user_id="a", memory_type="procedural_memory")
    assert typed.value.error_code == "VALIDATION_002"
    with pytest.raises(ValidationError):
        m.add([{"role": "user"}], user_id="a", infer=False)
    with pytest.raises(ValueError, match="cannot contain whitespace"):
        m.add("hello", user_id="a b", infer=False)
    assert m.get_all(filters={"user_id": "a"}) == {"results": []}


def test_add_with_infer_runs_the_offline_writer_and_keeps_ids_and_metadata(m: Memory) -> None:
    first = m.add(
        [{"role": "user", "content": "I live in Berlin and I work as a nurse. I love sushi."},
         {"role": "assistant", "content": "Nice to meet you!"}],
        user_id="bob", metadata={"source": "chat"},
    )["results"]  # fmt: skip
    assert {r["event"] for r in first} == {"ADD"} and len(first) >= 2
    listed = m.get_all(filters={"user_id": "bob"})["results"]
    assert {r["memory"] for r in listed} == {r["memory"] for r in first}
    assert all(r["user_id"] == "bob" and r["metadata"] == {"source": "chat"} for r in listed)
    home = next(r for r in first if "Berlin" in r["memory"])
    moved = m.add("I moved to Munich.", user_id="bob")["results"]
    assert moved == [{"id": home["id"], "memory": "I moved to Munich.", "event": "UPDATE",
                      "previous_memory": home["memory"]}]  # fmt: skip
    got = m.get(home["id"])
    assert got is not None and got["memory"] == "I moved to Munich." and got["metadata"] == {"source": "chat"}
    assert [h["event"] for h in m.history(home["id"])] == ["ADD", "UPDATE"]
    assert m.search("Munich", filters={"user_id": "bob"}, threshold=0.0)["results"][0]["id"] == home["id"]


def test_add_with_infer_checks_every_message_before_storing_any(m: Memory) -> None:
    before = len(m.memory.log())
    with pytest.raises(ValidationError) as bad:
        m.add([{"role": "user", "content": "I live in Berlin."}, "not a message"], user_id="bob")
    assert bad.value.error_code == "VALIDATION_003" and len(m.memory.log()) == before


def test_add_with_infer_and_no_extractor_is_a_writer_error() -> None:
    with Memory(store=engram.open(":memory:", embedder="hashing"), extractor="none") as m, pytest.raises(WriterError):
        m.add("I live in Berlin.", user_id="bob")


def test_add_with_infer_takes_an_extractor_object() -> None:
    with Memory(store=engram.open(":memory:", embedder="hashing"), extractor=OfflineExtractor()) as m:
        assert [r["memory"] for r in m.add("I love sushi.", user_id="bob")["results"]] == ["I love sushi."]


# -- search, get, get_all -----------------------------------------------------------------------------------------


def test_search_shape_ranking_limit_and_threshold(m: Memory) -> None:
    seed(m)
    found = m.search("I like green tea", filters=ALICE, top_k=10, threshold=0.0)["results"]
    assert found[0]["memory"] == "I like green tea" and found[0]["score"] == pytest.approx(1.0, abs=1e-3)
    assert [r["score"] for r in found] == sorted((r["score"] for r in found), reverse=True)
    assert all(r.keys() >= RESULT_KEYS and r["user_id"] == "alice" for r in found)
    assert texts({"results": found}) <= {
        "I like green tea",
        "I live in Lyon",
        "I work as a nurse",
        "I run every Sunday",
    }
    assert len(m.search("I like green tea", filters=ALICE, top_k=2, threshold=0.0)["results"]) == 2
    assert len(m.search("I like green tea", filters=ALICE, limit=1, threshold=0.0)["results"]) == 1
    assert m.search("I like green tea", filters=ALICE, top_k=0)["results"] == []
    strict = m.search("I like green tea", filters=ALICE, top_k=10, threshold=0.9)["results"]
    assert [r["memory"] for r in strict] == ["I like green tea"]


def test_search_accepts_mem0_1_keywords(m: Memory) -> None:
    seed(m)
    assert texts(m.search("coffee", user_id="bob", limit=5, threshold=0.0)) <= {
        "I like black coffee",
        "I live in Berlin",
    }
    assert "I like black coffee" in texts(m.search("coffee", user_id="bob", limit=5, threshold=0.0))


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"topic": "drinks"}, {"I like green tea"}),
        ({"topic": {"ne": "drinks"}}, {"I live in Lyon", "I work as a nurse", "I run every Sunday"}),
        ({"topic": {"in": ["home", "work"]}}, {"I live in Lyon", "I work as a nurse"}),
        ({"topic": {"nin": ["home", "work", "sport"]}}, {"I like green tea"}),
        ({"priority": {"gte": 2}}, {"I like green tea"}),
        ({"priority": {"lt": 2}}, {"I live in Lyon"}),
        ({"tags": {"contains": "city"}}, {"I live in Lyon"}),
        ({"note": {"icontains": "weekly"}}, {"I run every Sunday"}),
        ({"priority": "*"}, {"I like green tea", "I live in Lyon"}),
        ({"agent_id": "helper"}, {"I work as a nurse"}),
        ({"run_id": "r1"}, {"I run every Sunday"}),
        ({"OR": [{"topic": "home"}, {"topic": "work"}]}, {"I live in Lyon", "I work as a nurse"}),
        ({"AND": [{"topic": {"ne": "home"}}, {"priority": "*"}]}, {"I like green tea"}),
        ({"NOT": [{"topic": "home"}, {"topic": "work"}]}, {"I like green tea", "I run every Sunday"}),
    ],
)
def test_search_and_get_all_filters(m: Memory, filters: dict[str, Any], expected: set[str]) -> None:
    seed(m)
    assert texts(m.get_all(filters={**ALICE, **filters})) == expected
    found = m.search("I", filters={**ALICE, **filters}, threshold=0.0)
    assert texts(found) <= expected


def test_search_by_agent_alone_reaches_across_users(m: Memory) -> None:
    seed(m)
    m.add("I answer in French", agent_id="helper", infer=False)
    assert texts(m.get_all(filters={"agent_id": "helper"})) == {"I work as a nurse", "I answer in French"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"filters": {"topic": "x"}}, "filters must contain at least one of"),
        ({"filters": ALICE, "threshold": 1.5}, "Invalid threshold"),
        ({"filters": ALICE, "threshold": "high"}, "threshold must be a valid number"),
        ({"filters": ALICE, "top_k": -1}, "Invalid top_k"),
        ({"filters": ALICE, "top_k": 2.5}, "top_k must be a valid integer"),
        ({"filters": {"user_id": " "}}, "Invalid user_id"),
        ({"filters": {**ALICE, "topic": {"regex": "x"}}}, "Unsupported metadata filter operator: regex"),
        ({"filters": {**ALICE, "OR": []}}, "OR operator requires a non-empty list"),
    ],
)
def test_search_errors_are_mem0s(m: Memory, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        m.search("tea", **kwargs)


def test_search_query_must_be_text(m: Memory) -> None:
    with pytest.raises(ValueError, match="must be a non-empty string"):
        m.search(None, filters=ALICE)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="whitespace-only"):
        m.search("  ", filters=ALICE)


def test_get_shape_and_missing(m: Memory) -> None:
    ids = seed(m)
    got = m.get(ids["I work as a nurse"])
    assert got is not None and RESULT_KEYS | {"user_id", "agent_id", "role"} == got.keys()
    assert got["score"] is None and got["hash"] == hashlib.md5(b"I work as a nurse", usedforsecurity=False).hexdigest()
    assert (got["agent_id"], got["metadata"]) == ("helper", {"topic": "work"})
    assert got["created_at"].endswith("+00:00")
    assert m.get(str(uuid.uuid4())) is None


def test_get_all_shape_limit_and_errors(m: Memory) -> None:
    seed(m)
    listed = m.get_all(filters=ALICE)["results"]
    assert len(listed) == 4 and all("score" not in r and r["user_id"] == "alice" for r in listed)
    assert len(m.get_all(filters=ALICE, top_k=2)["results"]) == 2
    assert len(m.get_all(user_id="alice", limit=3)["results"]) == 3
    with pytest.raises(ValueError, match="filters must contain at least one of"):
        m.get_all(filters={})
    with pytest.raises(ValueError, match="Invalid top_k"):
        m.get_all(filters=ALICE, top_k=-2)


# -- update, delete, history, reset -------------------------------------------------------------------------------


def test_update_history_and_delete_are_commits(m: Memory) -> None:
    ids = seed(m)
    memory_id = ids["I like green tea"]
    assert m.update(memory_id, "I love green tea") == {"message": "Memory updated successfully!"}
    assert m.update(memory_id, metadata={"priority": 5, "user_id": "mallory"}) == {
        "message": "Memory updated successfully!"}  # fmt: skip
    got = m.get(memory_id)
    assert got is not None and got["memory"] == "I love green tea" and got["user_id"] == "alice"
    assert got["metadata"] == {"topic": "drinks", "priority": 5} and got["updated_at"] >= got["created_at"]
    assert m.delete(memory_id) == {"message": "Memory deleted successfully!"}
    assert m.get(memory_id) is None
    history = m.history(memory_id)
    assert [(h["event"], h["old_memory"], h["new_memory"], h["is_deleted"]) for h in history] == [
        ("ADD", None, "I like green tea", False),
        ("UPDATE", "I like green tea", "I love green tea", False),
        ("UPDATE", "I love green tea", "I love green tea", False),
        ("DELETE", "I love green tea", None, True),
    ]
    assert all(set(h) == HISTORY_KEYS and h["memory_id"] == memory_id and h["role"] == "user" for h in history)
    log = {c.id.hex(): c for c in m.memory.log()}
    assert [log[h["commit"]].message.split(":")[0] for h in history] == [
        "mem0 add", "mem0 update", "mem0 update", "mem0 delete"]  # fmt: skip
    assert len({h["commit"] for h in history}) == 4 and all(h["author"] == "mem0" for h in history)
    assert m.history(str(uuid.uuid4())) == []


def test_update_and_delete_errors_are_mem0s(m: Memory) -> None:
    missing = str(uuid.uuid4())
    with pytest.raises(ValueError, match=f"Memory with id {missing} not found. Please provide a valid 'memory_id'"):
        m.update(missing, "x")
    with pytest.raises(ValueError, match="At least one of text, metadata"):
        m.update(missing)
    with pytest.raises(ValueError, match=f"Memory with id {missing} not found"):
        m.delete(missing)


def test_delete_all_deletes_one_scope_in_one_commit(m: Memory) -> None:
    seed(m)
    before = len(m.memory.log())
    assert m.delete_all(user_id="bob") == {"message": "Memories deleted successfully!"}
    assert len(m.memory.log()) == before + 1
    assert m.get_all(filters={"user_id": "bob"}) == {"results": []}
    assert len(m.get_all(filters=ALICE)["results"]) == 4
    m.delete_all(agent_id="helper")
    assert texts(m.get_all(filters=ALICE)) == {"I like green tea", "I live in Lyon", "I run every Sunday"}
    with pytest.raises(ValueError, match="use the `reset\\(\\)` method"):
        m.delete_all()


def test_reset_forgets_every_memory_but_keeps_history(m: Memory) -> None:
    ids = seed(m)
    m.reset()
    assert m.get_all(filters=ALICE) == {"results": []} and m.get(ids["I live in Lyon"]) is None
    assert [h["event"] for h in m.history(ids["I live in Lyon"])] == ["ADD", "DELETE"]
    assert m.memory.at("HEAD").count(("mem0",)) == 0


def test_memories_are_engram_items_other_doors_see(m: Memory) -> None:
    ids = seed(m)
    items = {i.key: i for i in m.memory.at("HEAD").iter_items(("mem0", "users", "bob"))}
    assert set(items) == {ids["I like black coffee"], ids["I live in Berlin"]}
    assert items[ids["I like black coffee"]].value["text"] == "I like black coffee"
    past = m.memory.log()[-2].id.hex()  # the first add (after the store's first commit): one memory then
    assert m.memory.at(past).count(("mem0",)) == 1


# -- async ----------------------------------------------------------------------------------------------------------


def test_async_memory_mirrors_memory() -> None:
    async def script() -> None:
        am = AsyncMemory(store=engram.open(":memory:", embedder=HashingEmbedder(64)))
        added = await am.add("I like tea", user_id="alice", metadata={"k": 1}, infer=False)
        memory_id = added["results"][0]["id"]
        found = await am.search("tea", filters=ALICE, threshold=0.0)
        assert [r["id"] for r in found["results"]] == [memory_id]
        got = await am.get(memory_id)
        assert got is not None and got["metadata"] == {"k": 1}
        assert texts(await am.get_all(filters=ALICE)) == {"I like tea"}
        assert await am.update(memory_id, "I love tea") == {"message": "Memory updated successfully!"}
        assert [h["event"] for h in await am.history(memory_id)] == ["ADD", "UPDATE"]
        assert await am.delete(memory_id) == {"message": "Memory deleted successfully!"}
        await am.add("I like jam", user_id="bob", infer=False)
        assert await am.delete_all(user_id="bob") == {"message": "Memories deleted successfully!"}
        await am.add("I like figs", user_id="carol", infer=False)
        await am.reset()
        assert await am.get_all(filters={"user_id": "carol"}) == {"results": []}
        with pytest.raises(ValidationError):
            await am.add("no scope", infer=False)
        am.close()

    asyncio.run(script())


def test_async_memory_from_config() -> None:
    am = AsyncMemory.from_config({"engram": {"store": ":memory:", "embedder": "hashing"}})
    assert isinstance(am.sync, Memory) and am.memory is am.sync.memory
    am.close()


def test_expiration_date_hides_memories_until_shown_or_cleared(m: Memory) -> None:
    old = m.add("I used to live in Paris", user_id="alice", expiration_date=date(2020, 1, 1), infer=False)
    memory_id = old["results"][0]["id"]
    m.add("I live in Lyon", user_id="alice", expiration_date=datetime(2999, 1, 1, tzinfo=UTC), infer=False)
    assert texts(m.get_all(filters=ALICE)) == {"I live in Lyon"}
    assert texts(m.search("live", filters=ALICE, threshold=0.0)) == {"I live in Lyon"}
    assert texts(m.get_all(filters=ALICE, show_expired=True)) == {"I live in Lyon", "I used to live in Paris"}
    assert m.get(memory_id)["expiration_date"] == "2020-01-01"  # type: ignore[index]
    m.update(memory_id, expiration_date="2999-12-31")
    assert "I used to live in Paris" in texts(m.get_all(filters=ALICE))
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        m.update(memory_id, expiration_date="next week")


def test_search_explain_and_platform_only_arguments(m: Memory) -> None:
    seed(m)
    explained = m.search("green tea", filters=ALICE, threshold=0.0, explain=True, rerank=True)["results"]
    assert explained and all(isinstance(r["score_details"], dict) for r in explained)
    with pytest.raises(ValueError, match="reference_date is a mem0 Platform feature"):
        m.search("tea", filters=ALICE, reference_date="2026-01-01")
    with pytest.raises(ValueError, match="timestamp is a mem0 Platform feature"):
        m.add("hello", user_id="a", timestamp=1700000000, infer=False)


def test_async_memory_concurrent_adds_all_land_as_commits() -> None:
    async def script() -> None:
        am = AsyncMemory(store=engram.open(":memory:", embedder=HashingEmbedder(64)))
        before = len(am.memory.log())
        await asyncio.gather(*(am.add(f"fact number {i}", user_id=f"u{i % 3}", infer=False) for i in range(24)))
        counts = [len((await am.get_all(filters={"user_id": f"u{k}"}, top_k=100))["results"]) for k in range(3)]
        assert counts == [8, 8, 8] and len(am.memory.log()) == before + 24
        am.close()

    asyncio.run(script())


def test_add_with_infer_uses_an_openai_compatible_llm_from_the_mem0_config() -> None:
    script = [Reply.tools(("write_memory", {"text": "Bob plays the cello"})), Reply.tools(("no_new_memories", {}))]
    with ScriptedModelServer(script) as server:
        config = {"llm": {"provider": "openai", "config": {"model": "scripted", "openai_base_url": server.url,
                                                           "api_key": "sk-test"}},
                  "engram": {"store": ":memory:", "embedder": "hashing"}}  # fmt: skip
        with Memory.from_config(config) as m:
            added = m.add("I play the cello on weekends", user_id="bob", metadata={"source": "chat"})["results"]
            assert [(r["event"], r["memory"]) for r in added] == [("ADD", "Bob plays the cello")]
            got = m.get(added[0]["id"])
            assert got is not None and (got["user_id"], got["metadata"]) == ("bob", {"source": "chat"})
        assert server.requests and "I play the cello on weekends" in json.dumps(server.requests[0])


def test_add_with_infer_raises_when_the_model_fails_and_leaves_a_trace_beside_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    with ScriptedModelServer([Reply(status=503)] * 3) as server:
        config = {"llm": {"provider": "openai", "config": {"model": "m", "openai_base_url": server.url}},
                  "engram": {"store": url, "embedder": "hashing", "api_key": "sk-test"}}  # fmt: skip
        with Memory.from_config(config) as m:
            with pytest.raises(WriterError) as failed:
                m.add("I play the cello", user_id="bob")
            assert failed.value.outcome == "model_error" and "503" in str(failed.value)
            assert m.get_all(filters={"user_id": "bob"}) == {"results": []}
    assert list((tmp_path / "mem-traces").iterdir())
