"""AsyncMemory: async twins, and concurrent calls in one tick coalesced into one commit."""

from __future__ import annotations

import asyncio

import pytest

import engram


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
