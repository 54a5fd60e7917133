"""Writers of one branch take turns and never starve: across processes on PostgreSQL (an advisory lock per
ref, granted in turn), and a commit gives up at a deadline, never after a count of lost races.

Compare-and-swap stays the correctness mechanism: the lock is for fairness, so a lock whose holder dies is
released by PostgreSQL with its session, and a pooled connection never goes back to the pool holding one.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from processes import race

from engram.backends import MemoryChunkStore, MemoryRefStore
from engram.backends.base import RefStore
from engram.backends.postgres import open_postgres
from engram.backends.wrappers import ForwardingRefStore
from engram.errors import EngramError, UnavailableError
from engram.hashing import ChunkId
from engram.repo import HEADS, Repository
from engram.store import Memory

NS = ("load",)
PROCESSES = 6
PUTS = 100
KEYS = 10
TIMEOUT = 180.0


class CountingRefs(ForwardingRefStore):
    """A ref store that counts the compare-and-swaps that lost a race (a seam, not a patch)."""

    def __init__(self, inner: RefStore) -> None:
        super().__init__(inner)
        self.lost = 0

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        moved = self.inner.set(name, new, expected, actor=actor, reason=reason)
        self.lost += not moved
        return moved


def _writer(url: str, repo_id: str, writer: int, start: Any, results: Any) -> None:
    """Child process: put this writer's plan on `main`; report (acknowledged puts, give-ups, lost races, seconds)."""
    try:
        chunks, refs = open_postgres(url, repo_id)
        counting = CountingRefs(refs)
        mem = Memory(Repository(chunks, counting), author=f"proc{writer}")
        acks: list[tuple[int, str]] = []
        gave_up: list[str] = []
        try:
            start.wait()
            started = time.perf_counter()
            for i in range(PUTS):
                try:
                    acks.append((i, mem.put(NS, f"w{writer}-k{i % KEYS}", {"writer": writer, "i": i}).id.hex()))
                except EngramError as exc:
                    gave_up.append(f"put {i}: {exc!r}")
            seconds = time.perf_counter() - started
        finally:
            chunks.close()
        results.put((writer, acks, gave_up, counting.lost, seconds, None))
    except BaseException:
        results.put((writer, [], [], 0, 0.0, traceback.format_exc()))


def test_writers_processes_on_one_postgres_branch_take_turns(postgres_url: str, pg_repo_id: str) -> None:
    """Six processes putting on one branch: no put gives up, no compare-and-swap loses a race (the writers
    queue instead), and every acknowledged write is on `main` with the last value of each key."""
    chunks, refs = open_postgres(postgres_url, pg_repo_id)
    Repository(chunks, refs).init()
    chunks.close()
    reports = race(_writer, [(postgres_url, pg_repo_id, w) for w in range(PROCESSES)], TIMEOUT)
    assert not [error for *_, error in reports if error], "\n".join(error for *_, error in reports if error)
    assert [g for _, _, gave_up, *_ in reports for g in gave_up] == []
    assert sum(lost for _, _, _, lost, _, _ in reports) == 0

    chunks, refs = open_postgres(postgres_url, pg_repo_id)
    try:
        mem = Memory(Repository(chunks, refs))
        log = mem.log()
        assert len(log) == PROCESSES * PUTS + 1  # every put one commit on one linear chain
        assert all(len(c.parents) == 1 for c in log[:-1])
        on_main = {c.id.hex() for c in log}
        assert all(cid in on_main for _, acks, *_ in reports for _, cid in acks)
        for writer, acks, *_ in reports:
            for i, cid in acks:
                item = mem.at(cid).get(NS, f"w{writer}-k{i % KEYS}")
                assert item is not None and item.value == {"writer": writer, "i": i}
            for k in range(KEYS):
                last = max(i for i in range(PUTS) if i % KEYS == k)
                item = mem.get(NS, f"w{writer}-k{k}")
                assert item is not None and item.value == {"writer": writer, "i": last}
        assert len(refs.reflog(HEADS + "main")) == PROCESSES * PUTS + 1
        assert mem.fsck().ok
    finally:
        chunks.close()


def _holder(url: str, repo_id: str, start: Any, results: Any) -> None:
    """Child process: take the lock of `heads/main`, say so, and wait to be killed."""
    try:
        _, refs = open_postgres(url, repo_id)
        with refs.lock(HEADS + "main"):
            results.put(("locked", os.getpid()))
            time.sleep(120)
    except BaseException:
        results.put(("error", traceback.format_exc()))


def test_writers_a_lock_whose_holder_is_killed_is_released(postgres_url: str, pg_repo_id: str) -> None:
    import multiprocessing

    chunks, refs = open_postgres(postgres_url, pg_repo_id)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    holder = ctx.Process(target=_holder, args=(postgres_url, pg_repo_id, None, results))
    holder.start()
    try:
        state, pid = results.get(timeout=60)
        assert state == "locked", pid
        started = time.monotonic()
        with pytest.raises(UnavailableError, match="other writers of 'heads/main'"), refs.lock(HEADS + "main", 0.3):
            pass
        assert time.monotonic() - started < 2  # the wait is bounded by its timeout
        os.kill(pid, signal.SIGKILL)
        holder.join(10)
        started = time.monotonic()
        with refs.lock(HEADS + "main", timeout=10):
            assert time.monotonic() - started < 5  # released with the dead holder's session
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join()
        results.close()
        results.join_thread()
        chunks.close()


def _advisory_locks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
        return int(row[0]) if row else 0


def test_writers_a_pooled_connection_never_keeps_a_lock(postgres_url: str, pg_repo_id: str) -> None:
    chunks, refs = open_postgres(postgres_url, pg_repo_id)
    try:
        before = _advisory_locks(postgres_url)
        with refs.lock(HEADS + "main", timeout=5):
            assert _advisory_locks(postgres_url) == before + 1
            with refs.lock(HEADS + "main", timeout=0.1):  # the holder may take it again (one thread)
                pass
        assert _advisory_locks(postgres_url) == before
        with pytest.raises(RuntimeError, match="boom"), refs.lock(HEADS + "main", timeout=5):
            raise RuntimeError("boom")
        assert _advisory_locks(postgres_url) == before
        for _ in range(20):  # every connection of the pool comes back unlocked, again and again
            with refs.lock(HEADS + "main", timeout=5):
                pass
        assert _advisory_locks(postgres_url) == before
    finally:
        chunks.close()


# ---------------------------------------------------------------------------------- deadline


class Rival(ForwardingRefStore):
    """A ref store on which another writer moves `heads/main` just before each of the first ``moves``
    compare-and-swaps (a branch that keeps moving)."""

    def __init__(self, inner: MemoryRefStore, moves: int) -> None:
        super().__init__(inner)
        self.moves = moves
        self.repo: Repository | None = None

    def set(
        self, name: str, new: ChunkId | None, expected: ChunkId | None, *, actor: str = "", reason: str = ""
    ) -> bool:
        if self.moves and self.repo is not None and name == HEADS + "main" and expected is not None:
            self.moves -= 1
            head = self.repo.commit(expected)
            rival = self.repo.write_commit(head.tree, (expected,), "rival", f"rival {self.moves}")
            assert self.inner.set(name, rival.id, expected, actor="rival")
        return self.inner.set(name, new, expected, actor=actor, reason=reason)


@pytest.fixture
def rival() -> Iterator[tuple[Repository, Rival]]:
    refs = Rival(MemoryRefStore(), 0)
    repo = Repository(MemoryChunkStore(), refs)
    repo.init()
    refs.repo = repo
    yield repo, refs


def test_writers_a_commit_outlasts_any_count_of_lost_races(rival: tuple[Repository, Rival]) -> None:
    """250 lost races in a row (more than the old limit of 200 attempts): the commit still lands."""
    repo, refs = rival
    refs.moves = 250
    commit = repo.commit_edits("main", {b"k": b"v"}, author="me", message="patient")
    assert refs.moves == 0
    assert repo.head("main") == commit.id
    assert len(list(repo.iter_first_parents(commit.id))) == 250 + 2  # init, the rivals' commits, ours


def test_writers_a_commit_gives_up_at_its_deadline(rival: tuple[Repository, Rival]) -> None:
    repo, refs = rival
    refs.moves = 10**9
    repo.commit_timeout = 0.3
    started = time.monotonic()
    with pytest.raises(UnavailableError, match=r"kept moving; gave up after 0\.3 s") as info:
        repo.commit_edits("main", {b"k": b"v"}, author="me", message="impatient")
    assert 0.25 < time.monotonic() - started < 10  # gave up at its deadline: the rival never stops
    assert info.value.retry_after is not None
    assert all(c.author == "rival" for c in list(repo.iter_first_parents(repo.head("main")))[:-1])
