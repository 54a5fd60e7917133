"""AsyncMemory: async twins, and concurrent calls in one tick coalesced into one commit (consecutive commits when
two of them write the same key)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

import engram
from engram.store import tenant_url
from engram.store.aio import Coalescer, Outcome
from engram.store.operations import GetOp, Op, PutOp


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store on each backend a server writes to: in memory, SQLite, PostgreSQL."""
    if request.param == "memory":
        return ":memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mem.db'}"
    return tenant_url(request.getfixturevalue("postgres_url"), "t" + uuid.uuid4().hex[:16])


def test_concurrent_puts_coalesce_into_one_commit() -> None:
    async def scenario() -> None:
        amem = await engram.aopen(":memory:", embedder="hashing")
        before = len(await amem.alog())
        await asyncio.gather(*(amem.aput(("n",), f"k{i}", {"i": i}) for i in range(50)))
        log = await amem.alog()
        assert len(log) == before + 1 and log[0].message == "batch: 50 put(s), 0 delete(s)"
        got = await asyncio.gather(amem.aget(("n",), "k3"), amem.asearch(("n",), limit=100))
        assert got[0] is not None and got[0].value == {"i": 3}
        assert len(got[1]) == 50
        await amem.adelete(("n",), "k3")
        assert await amem.aget(("n",), "k3") is None
        assert await amem.alist_namespaces() == [("n",)]
        await amem.atag("after")
        assert (await amem.adiff("HEAD~1", "after"))[0].kind == "removed"
        await amem.aclose()

    asyncio.run(scenario())


def test_bad_input_fails_only_its_caller() -> None:
    async def scenario() -> None:
        amem = await engram.aopen(":memory:", embedder=None)
        good = amem.aput(("n",), "ok", {"v": 1})
        bad = amem.aput(("n.bad",), "x", {"v": 1})
        results = await asyncio.gather(good, bad, return_exceptions=True)
        assert isinstance(results[0], engram.Commit) and isinstance(results[1], engram.InvalidNamespaceError)
        assert await amem.aget(("n",), "ok") is not None

    asyncio.run(scenario())


def test_aput_concurrent_puts_share_one_commit_and_return_it() -> None:
    async def scenario() -> None:
        amem = await engram.aopen(":memory:", embedder=None)
        commits = await asyncio.gather(*(amem.aput(("n",), f"k{i}", {"v": i}) for i in range(16)))
        assert len({c.id for c in commits}) == 1 and commits[0].message == "batch: 16 put(s), 0 delete(s)"
        assert len(await amem.alog()) == 2  # init + the one batch
        own = await amem.aput(("n",), "k0", {"v": -1}, author="alice", message="fix k0")
        assert own.author == "alice" and own.message == "fix k0"
        deleted = await amem.adelete(("n",), "k1")
        assert deleted.message == "delete n/k1" and await amem.aget(("n",), "k1") is None

    asyncio.run(scenario())


def test_unknown_async_attribute_raises() -> None:
    mem = engram.open(":memory:", embedder=None)
    with pytest.raises(AttributeError):
        engram.AsyncMemory(mem).afly  # noqa: B018


def test_async_twins_match_the_sync_surface() -> None:
    """Every public method of Memory has an ``a``-prefixed twin with the same parameters, defaults, annotations and
    docstring, or is listed in SYNC_ONLY with a reason: the two surfaces cannot drift."""
    import inspect

    from engram.store.aio import SYNC_ONLY

    for name, method in inspect.getmembers(engram.Memory, inspect.isfunction):
        if name.startswith("_"):
            continue
        if name in SYNC_ONLY:
            assert not hasattr(engram.AsyncMemory, "a" + name), name
            continue
        twin = getattr(engram.AsyncMemory, "a" + name, None)
        assert twin is not None and inspect.iscoroutinefunction(twin), f"no async twin of Memory.{name}"
        sync, asynchronous = inspect.signature(method), inspect.signature(twin)
        assert list(asynchronous.parameters.values()) == list(sync.parameters.values()), name
        assert asynchronous.return_annotation == sync.return_annotation, name
        assert method.__doc__ and method.__doc__ in (twin.__doc__ or ""), name
    assert set(SYNC_ONLY) <= {name for name, _ in inspect.getmembers(engram.Memory, inspect.isfunction)}


def test_async_twins_return_what_the_sync_methods_return() -> None:
    async def scenario() -> None:
        amem = await engram.aopen(":memory:", embedder="hashing", ttl={"default_ttl": 60})
        first = await amem.aput(("n",), "k", {"text": "hello world"}, sources=["m1"])
        await amem.acreate_branch("b")
        await amem.atag("t")
        assert (await amem.aresolve("t")).id == first.id
        assert [v.commit.id for v in await amem.ahistory(("n",), "k")] == [first.id]
        assert (await amem.ashow()).changes[0].key == "k"
        assert await amem.acount(("n",)) == 1
        assert len(await amem.asearch(("n",), "hello", at="t")) == 1
        results, commit = await amem.aexecute([engram.PutOp(("n",), "j", {"v": 1})])
        assert results == [None] and commit is not None and commit.message == "put n/j"
        assert (await amem.abatch([engram.GetOp(("n",), "j")], author="x"))[0].value == {"v": 1}
        assert (await amem.afsck()).ok
        await amem.aclose()

    asyncio.run(scenario())


def test_concurrent_puts_to_one_key_each_become_a_version(store_url: str) -> None:
    """Puts to one key in one tick are not collapsed to the last: each is its own commit, in call order, and
    each caller gets the commit that holds its value."""

    async def scenario() -> None:
        amem = await engram.aopen(store_url, embedder=None)
        try:
            commits = await asyncio.gather(*(amem.aput(("n",), "k", {"i": i}) for i in range(200)))
            history = await amem.ahistory(("n",), "k")
            assert [v.item.value["i"] for v in history if v.item is not None] == list(range(199, -1, -1))
            assert [v.commit.id for v in history] == [c.id for c in reversed(commits)]
            for i, commit in enumerate(commits):
                item = amem.memory.at(commit.id).get(("n",), "k")
                assert item is not None and item.value == {"i": i}, i
            final = await amem.aget(("n",), "k")
            assert final is not None and final.value == {"i": 199}
        finally:
            await amem.aclose()

    asyncio.run(scenario())


def test_repeated_keys_split_a_tick_into_consecutive_batches() -> None:
    """40 puts over 4 keys in one tick: 10 commits of 4 writes, not 1 commit (losing 36) nor 40."""

    async def scenario() -> None:
        amem = await engram.aopen(":memory:", embedder=None)
        before = len(await amem.alog())
        commits = await asyncio.gather(*(amem.aput(("n",), f"k{i % 4}", {"i": i}) for i in range(40)))
        log = await amem.alog()
        assert len(log) == before + 10 and {c.message for c in log[:10]} == {"batch: 4 put(s), 0 delete(s)"}
        assert len({c.id for c in commits}) == 10
        for key in range(4):
            history = await amem.ahistory(("n",), f"k{key}")
            assert [v.item.value["i"] for v in history if v.item is not None] == list(range(36 + key, -1, -4))
        await amem.aclose()

    asyncio.run(scenario())


def test_one_batch_keeps_its_own_last_wins_rule() -> None:
    """A single abatch writing a key twice is still one commit where the last write wins (LangGraph's rule)."""

    async def scenario() -> None:
        amem = await engram.aopen(":memory:", embedder=None)
        before = len(await amem.alog())
        await amem.abatch([PutOp(("n",), "k", {"v": 1}), PutOp(("n",), "k", {"v": 2})])
        assert len(await amem.alog()) == before + 1
        item = await amem.aget(("n",), "k")
        assert item is not None and item.value == {"v": 2}
        await amem.aclose()

    asyncio.run(scenario())


def test_coalescer_cuts_at_a_repeated_key_and_a_failure_stays_in_its_batch() -> None:
    runs: list[list[Op]] = []

    def run(ops: list[Op]) -> Outcome:
        runs.append(ops)
        if any(isinstance(op, PutOp) and op.value == {"fail": True} for op in ops):
            raise RuntimeError("boom")
        return [len(runs)] * len(ops), None

    async def scenario() -> list[Any]:
        coalescer = Coalescer(run)
        a, b = PutOp(("n",), "a", {"v": 1}), PutOp(("n",), "b", {"v": 1})
        submissions: list[list[Op]] = [
            [a], [b], [PutOp(("n",), "a", {"fail": True})], [GetOp(("n",), "a")], [b], [a],
        ]  # fmt: skip
        return await asyncio.gather(*(coalescer.submit(ops) for ops in submissions), return_exceptions=True)

    results = asyncio.run(scenario())
    assert [len(ops) for ops in runs] == [2, 3, 1]  # [a, b] | [a', get a, b] | [a]
    assert results[0] == ([1], None) and results[1] == ([1], None)
    assert all(isinstance(r, RuntimeError) for r in results[2:5])
    assert results[5] == ([3], None)
