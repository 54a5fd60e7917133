"""Concurrent writers on one branch: no lost writes, a linear history, conflicts only when real.

Writers race on ``main`` from threads sharing a handle, threads on separate handles (SQLite and
in-memory), and separate processes on one SQLite file. Every put must land as exactly one commit on
a linear first-parent chain; a transaction loses only when another writer changed one of its keys.
"""

from __future__ import annotations

import itertools
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from processes import race

import engram
from engram.backends import open_sqlite
from engram.repo import HEADS, Repository
from engram.store.connect import open_repository
from engram.store.memory import Memory
from engram.tree import get

NS = ("load",)
THREADS = 4
PUTS_PER_THREAD = 50
KEYS_PER_THREAD = 25  # every key is written twice, so "last value" is a real check
PROCESSES = 3
PUTS_PER_PROCESS = 40
KEYS_PER_PROCESS = 20
TIMEOUT = 60.0


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def _plan(writer: int, puts: int, keys: int) -> list[tuple[str, dict[str, Any]]]:
    """The (key, value) puts of one writer: its own keys, each written more than once."""
    return [(f"w{writer}-k{i % keys}", {"writer": writer, "i": i}) for i in range(puts)]


def _last_values(plans: Sequence[list[tuple[str, dict[str, Any]]]]) -> dict[str, dict[str, Any]]:
    last: dict[str, dict[str, Any]] = {}
    for plan in plans:
        for key, value in plan:
            last[key] = value
    return last


def _assert_linear_history(mem: Memory, commits: int) -> None:
    """``main`` is a chain of ``commits`` commits, each with one parent but the first."""
    log = mem.log()
    assert len(log) == commits
    chain = list(mem.repo.iter_first_parents(mem.repo.head("main")))
    assert [c.id for c in chain] == [c.id for c in log]
    assert all(len(c.parents) == 1 for c in chain[:-1]), "a merge commit appeared on a put-only branch"
    assert chain[-1].parents == ()
    assert chain[-1].message == "init"


def _assert_reflog_chain(mem: Memory, moves: int) -> None:
    """The reflog of ``main`` is one unbroken chain of CAS moves ending at the head."""
    entries = mem.repo.refs.reflog(HEADS + "main")  # newest first
    assert len(entries) == moves
    assert entries[0].new == mem.repo.head("main")
    for newer, older in itertools.pairwise(entries):
        assert newer.old == older.new
    assert entries[-1].old is None


def _assert_all_writes_landed(
    mem: Memory, plans: Sequence[list[tuple[str, dict[str, Any]]]], acks: Sequence[list[bytes]]
) -> None:
    """Each key has its last value; each acknowledged commit is on ``main`` and holds its write."""
    for key, value in _last_values(plans).items():
        item = mem.get(NS, key)
        assert item is not None, f"lost write: {key} is missing"
        assert item.value == value, f"lost write: {key} is {item.value}, expected {value}"
    on_main = {c.id for c in mem.log()}
    every_ack = [cid for ack in acks for cid in ack]
    assert len(set(every_ack)) == len(every_ack), "two puts were acknowledged with the same commit"
    assert set(every_ack) <= on_main
    for plan, ack in zip(plans, acks, strict=True):
        for (key, value), cid in zip(plan, ack, strict=True):
            item = mem.at(cid.hex()).get(NS, key)
            assert item is not None and item.value == value


def _race(handles: Sequence[Memory], threads: int) -> tuple[list[list[tuple[str, dict[str, Any]]]], list[list[bytes]]]:
    """``threads`` threads, thread ``t`` writing through ``handles[t % len(handles)]``, all started at once."""
    plans = [_plan(t, PUTS_PER_THREAD, KEYS_PER_THREAD) for t in range(threads)]
    start = threading.Barrier(threads, timeout=TIMEOUT)

    def write(t: int) -> list[bytes]:
        mem = handles[t % len(handles)]
        start.wait()
        return [mem.put(NS, key, value).id for key, value in plans[t]]

    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(write, t) for t in range(threads)]
        acks = [f.result(timeout=TIMEOUT) for f in futures]
    return plans, acks


def _race_and_check(handles: Sequence[Memory]) -> None:
    """Race ``THREADS`` writers over ``handles``, then check through every handle that nothing was lost."""
    plans, acks = _race(handles, THREADS)
    puts = THREADS * PUTS_PER_THREAD
    for mem in handles:
        _assert_all_writes_landed(mem, plans, acks)
        assert mem.count(NS) == THREADS * KEYS_PER_THREAD
    mem = handles[0]
    assert mem.fsck().ok
    _assert_linear_history(mem, puts + 1)
    _assert_reflog_chain(mem, puts + 1)


def test_sqlite_two_handles_threads_lose_no_write(tmp_path: Path) -> None:
    """Threads writing `main` through two handles on one SQLite file: every put is one commit on a chain."""
    url = _url(tmp_path)
    a, b = engram.open(url), engram.open(url)
    try:
        _race_and_check([a, b])
    finally:
        a.close()
        b.close()


def test_sqlite_shared_handle_threads_lose_no_write(tmp_path: Path) -> None:
    """Threads sharing one SQLite handle: every put is one commit on a linear `main`."""
    mem = engram.open(_url(tmp_path))
    try:
        _race_and_check([mem])
    finally:
        mem.close()


def test_memory_backend_two_handles_threads_lose_no_write() -> None:
    """Two handles over one in-memory repository, written from threads: no lost write, linear `main`."""
    repo = open_repository(":memory:")
    a, b = Memory(repo, branch="main"), Memory(repo, branch="main")
    _race_and_check([a, b])


def test_sqlite_reopened_store_keeps_concurrent_writes(tmp_path: Path) -> None:
    """What racing threads wrote is all there, and fsck-clean, for a handle opened afterwards."""
    url = _url(tmp_path)
    a, b = engram.open(url), engram.open(url)
    try:
        plans, acks = _race([a, b], THREADS)
    finally:
        a.close()
        b.close()
    fresh = engram.open(url)
    try:
        _assert_all_writes_landed(fresh, plans, acks)
        assert fresh.fsck().ok
        _assert_linear_history(fresh, THREADS * PUTS_PER_THREAD + 1)
    finally:
        fresh.close()


# ----------------------------------------------------------------- processes


def _process_writer(url: str, writer: int, start: Any, results: Any) -> None:
    """Child process body: wait for the others, then put this writer's plan; report ids or the error."""
    try:
        mem = engram.open(url, author=f"proc{writer}")
        try:
            start.wait()
            acks = [mem.put(NS, key, value).id for key, value in _plan(writer, PUTS_PER_PROCESS, KEYS_PER_PROCESS)]
        finally:
            mem.close()
        results.put((writer, acks, None))
    except BaseException:
        results.put((writer, [], traceback.format_exc()))


def test_sqlite_processes_lose_no_write(tmp_path: Path) -> None:
    """Spawned processes racing on `main` of one SQLite file: no lost write, fsck ok, ref and reflog intact."""
    url = _url(tmp_path)
    engram.open(url).close()  # create and init the file once, as a deployed store would be
    reports = race(_process_writer, [(url, w) for w in range(PROCESSES)], TIMEOUT)
    errors = [error for _, _, error in reports if error]
    assert not errors, "\n".join(errors)

    plans = [_plan(w, PUTS_PER_PROCESS, KEYS_PER_PROCESS) for w in range(PROCESSES)]
    acks = [ack for _, ack, _ in reports]
    mem = engram.open(url)
    try:
        _assert_all_writes_landed(mem, plans, acks)
        assert mem.fsck().ok
        _assert_linear_history(mem, PROCESSES * PUTS_PER_PROCESS + 1)
        _assert_reflog_chain(mem, PROCESSES * PUTS_PER_PROCESS + 1)
        assert set(mem.branches()) == {"main"}
        authors = {c.author for c in mem.log()[:-1]}
        assert authors == {f"proc{w}" for w in range(PROCESSES)}
    finally:
        mem.close()


FRESH_FILES = 60  # each file is one race; the failure below shows up in a few percent of them
FRESH_PROCESSES = 4


def _fresh_opener(paths: list[str], writer: int, start: Any, results: Any) -> None:
    """Child process body: for each new file, open and init it at the same moment as the others, commit once."""
    try:
        for path in paths:
            start.wait()
            chunks, refs = open_sqlite(path)
            try:
                repo = Repository(chunks, refs)
                repo.init()
                repo.commit_edits("main", {f"w{writer}".encode(): b"v"}, author=f"proc{writer}", message="put")
            finally:
                chunks.close()
        results.put((writer, None))
    except BaseException:
        start.abort()  # release the others instead of leaving them at the barrier
        results.put((writer, traceback.format_exc()))


def test_sqlite_processes_open_fresh_file_together(tmp_path: Path) -> None:
    """Processes that create, open and init one new SQLite file at the same moment all get a working store."""
    paths = [str(tmp_path / f"fresh{n}.db") for n in range(FRESH_FILES)]
    reports = race(_fresh_opener, [(paths, w) for w in range(FRESH_PROCESSES)], TIMEOUT)
    errors = [error for _, error in reports if error and "BrokenBarrierError" not in error]
    assert not errors, "\n".join(errors)
    assert all(error is None for _, error in reports)

    for path in paths:
        chunks, refs = open_sqlite(path)
        try:
            repo = Repository(chunks, refs)
            assert repo.fsck().ok
            assert set(repo.branches()) == {"main"}
            chain = list(repo.iter_first_parents(repo.head("main")))
            assert len(chain) == FRESH_PROCESSES + 1  # exactly one init commit won, every put landed on it
            assert [c.message for c in chain][-1] == "init"
            tree = chain[0].tree
            assert all(get(repo.nodes, tree, f"w{w}".encode()) == b"v" for w in range(FRESH_PROCESSES))
        finally:
            chunks.close()


# ---------------------------------------------------------------- transactions


def test_transaction_same_key_second_commit_conflicts(tmp_path: Path) -> None:
    """Two transactions from one head write one key differently: the later commit raises and writes nothing."""
    url = _url(tmp_path)
    a, b = engram.open(url, author="alice"), engram.open(url, author="bob")
    try:
        a.put(NS, "shared", {"v": "seed"})
        tx_a = a.transaction("alice's edit")
        tx_b = b.transaction("bob's edit")
        assert tx_a.base.id == tx_b.base.id
        with tx_a:
            tx_a.put(NS, "shared", {"v": "alice"})
        assert tx_a.commit is not None
        before = b.head
        assert before.id == tx_a.commit.id

        with pytest.raises(engram.MergeConflictError) as info, tx_b:
            tx_b.put(NS, "shared", {"v": "bob"})
            tx_b.put(NS, "bob-only", {"v": "bob"})  # no conflict of its own, still not written

        conflicts = info.value.conflicts
        assert [(c.namespace, c.key) for c in conflicts] == [(NS, "shared")]  # item-level conflicts
        (conflict,) = conflicts
        assert conflict.base is not None and conflict.base.value == {"v": "seed"}
        assert conflict.ours is not None and conflict.ours.value == {"v": "alice"}
        assert conflict.theirs is not None and conflict.theirs.value == {"v": "bob"}
        assert tx_b.commit is None
        for mem in (a, b):
            assert mem.head.id == before.id
            item = mem.get(NS, "shared")
            assert item is not None and item.value == {"v": "alice"}
            assert mem.get(NS, "bob-only") is None
        assert len(a.log()) == 3  # init, seed, alice
        assert a.fsck().ok
    finally:
        a.close()
        b.close()


def test_transaction_disjoint_keys_both_commit(tmp_path: Path) -> None:
    """Two transactions from one head on different keys both commit; the later one re-applies on the new head."""
    url = _url(tmp_path)
    a, b = engram.open(url, author="alice"), engram.open(url, author="bob")
    try:
        a.put(NS, "shared", {"v": "seed"})
        base = a.head
        tx_a = a.transaction("alice's edit")
        tx_b = b.transaction("bob's edit")
        assert tx_a.base.id == tx_b.base.id == base.id
        with tx_a:
            tx_a.put(NS, "x", {"v": "alice"})
        with tx_b:
            tx_b.put(NS, "y", {"v": "bob"})
            assert tx_b.get(NS, "x") is None  # the transaction reads its own snapshot

        assert tx_a.commit is not None and tx_b.commit is not None
        assert tx_a.commit.parents == (base.id,)
        assert tx_b.commit.parents == (tx_a.commit.id,)
        for mem in (a, b):
            assert mem.head.id == tx_b.commit.id
            assert {i.key: i.value for i in mem.iter_items(NS)} == {
                "shared": {"v": "seed"},
                "x": {"v": "alice"},
                "y": {"v": "bob"},
            }
        view_b = a.at(tx_b.commit.id.hex())
        x = view_b.get(NS, "x")
        assert x is not None and x.value == {"v": "alice"}  # alice's write survived bob's commit
        _assert_linear_history(a, 4)
        assert a.fsck().ok
    finally:
        a.close()
        b.close()


def test_transaction_conflicts_with_concurrent_put(tmp_path: Path) -> None:
    """A plain put on another handle to a key a pending transaction writes makes that transaction fail."""
    url = _url(tmp_path)
    a, b = engram.open(url), engram.open(url)
    try:
        tx = a.transaction("late")
        tx.put(NS, "k", {"v": "tx"})
        winner = b.put(NS, "k", {"v": "put"})
        with pytest.raises(engram.MergeConflictError) as info, tx:
            pass
        assert [(c.namespace, c.key) for c in info.value.conflicts] == [(NS, "k")]
        assert a.head.id == winner.id
        item = a.get(NS, "k")
        assert item is not None and item.value == {"v": "put"}
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------- branches


def _check_branches_are_per_handle(a: Memory, b: Memory) -> None:
    a.put(NS, "common", {"v": 0})
    a.create_branch("feature")
    a.checkout("feature")
    assert (a.branch, b.branch) == ("feature", "main")

    on_feature = a.put(NS, "k", {"v": "feature"})
    on_main = b.put(NS, "k", {"v": "main"})
    assert a.repo.head("feature") == on_feature.id
    assert b.repo.head("main") == on_main.id
    assert on_feature.parents == on_main.parents  # both forked from the same commit

    fa, mb = a.get(NS, "k"), b.get(NS, "k")
    assert fa is not None and fa.value == {"v": "feature"}
    assert mb is not None and mb.value == {"v": "main"}
    assert a.head.id == on_feature.id and b.head.id == on_main.id

    b.checkout("feature")
    b.checkout("main")  # moving b around does not move a
    assert a.branch == "feature"
    a.put(NS, "only-feature", {"v": 1})
    assert b.get(NS, "only-feature") is None
    assert a.get(NS, "only-feature") is not None
    assert len(b.log()) == 3 and len(a.log()) == 4


def test_handles_sqlite_keep_their_own_branch(tmp_path: Path) -> None:
    """Checkout on one SQLite handle does not change what another handle reads or writes."""
    url = _url(tmp_path)
    a, b = engram.open(url), engram.open(url)
    try:
        _check_branches_are_per_handle(a, b)
        assert a.fsck().ok
    finally:
        a.close()
        b.close()


def test_handles_shared_repository_keep_their_own_branch() -> None:
    """Two Memory handles over one Repository object keep separate current branches."""
    repo = open_repository(":memory:")
    _check_branches_are_per_handle(Memory(repo), Memory(repo))
