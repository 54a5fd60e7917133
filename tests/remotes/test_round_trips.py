"""Restore, verify and clone of a history of many small commits, on a real S3-compatible server (SeaweedFS): the
requests they make grow with the packs on the remote, not with the commits (a walk along the commits finds the
next ones in the packs it already fetched)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import S3Server

import engram
from engram.errors import IntegrityError
from engram.ops.backup import create_backup, get_backup, plan_restore, restore_backup, verify_backup
from engram.ops.remotes import Remote, clone_into, open_remote, push, sync
from engram.ops.remotes.packs import PACKS
from engram.ops.remotes.stores import BucketChunkStore
from engram.store import Memory

COMMITS = 300


class Requests:
    """Counts the calls that read from a remote's bucket: each is one round trip (a call's keys go in parallel)."""

    def __init__(self, remote: Remote) -> None:
        self.calls: list[str] = []
        bucket: Any = remote.chunks.bucket
        for name in ("get_many", "get_range", "exists_many", "read"):
            setattr(bucket, name, self._counted(name, getattr(bucket, name)))

    def _counted(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            self.calls.append(name)
            if name == "get_many":
                keys = list(args[0])
                return call(keys) if keys else {}
            return call(*args)

        return counted


@pytest.fixture(scope="module")
def history(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[Memory, str, int]:
    """A store of COMMITS single-put commits (what a server writes), backed up and pushed to one S3 prefix;
    (the store, the remote's URL, the packs on it)."""
    folder = tmp_path_factory.mktemp("round-trips")
    mem = engram.open(str(folder / "source"), embedder=None, author="tester")
    for i in range(COMMITS):
        mem.put(("notes",), f"k{i:04d}", {"text": f"note number {i} " + "x" * 200})
    url = s3_server.url()
    remote = open_remote(url)
    create_backup(mem.repo, remote, "b1")
    assert push(mem.repo, remote.chunks, remote.refs).ok
    packs = sum(1 for key, _ in remote.chunks.bucket.iter_keys(PACKS) if key.endswith(".idx"))
    remote.close()
    return mem, url, packs


def _fresh(url: str) -> tuple[Remote, Requests]:
    remote = open_remote(url)  # nothing cached
    return remote, Requests(remote)


def test_restore_makes_requests_per_pack_not_per_commit(history: tuple[Memory, str, int], tmp_path: Path) -> None:
    mem, url, packs = history
    remote, requests = _fresh(url)
    target = engram.open(str(tmp_path / "restored"), embedder=None)
    report = restore_backup(remote, get_backup(remote, "b1"), target.repo)
    assert report.fsck.ok and report.plan.commits == COMMITS + 1 and target.head.id == mem.head.id
    assert target.count(("notes",)) == COMMITS
    # before: one request per commit (each one read alone, as a byte range of its pack)
    assert len(requests.calls) <= 2 * packs + 10, (len(requests.calls), packs)
    assert packs < COMMITS / 10
    remote.close()
    target.close()


def test_verify_and_dry_run_make_requests_per_pack(history: tuple[Memory, str, int], tmp_path: Path) -> None:
    _, url, packs = history
    remote, requests = _fresh(url)
    backup = get_backup(remote, "b1")
    report = verify_backup(remote, backup)
    assert report.ok and report.commits == COMMITS + 1
    assert len(requests.calls) <= 2 * packs + 10, (len(requests.calls), packs)
    remote, requests = _fresh(url)
    plan = plan_restore(remote, get_backup(remote, "b1"), engram.open(str(tmp_path / "t"), embedder=None).repo)
    assert plan.ok and plan.commits == COMMITS + 1
    assert len(requests.calls) <= 2 * packs + 10, (len(requests.calls), packs)
    remote.close()


def test_clone_makes_requests_per_pack(history: tuple[Memory, str, int], tmp_path: Path) -> None:
    mem, url, packs = history
    remote, requests = _fresh(url)
    target = engram.open(str(tmp_path / "cloned"), embedder=None)
    clone_into(target.repo, remote.chunks, remote.refs)
    assert target.head.id == mem.head.id and target.fsck().ok
    assert len(requests.calls) <= 2 * packs + 10, (len(requests.calls), packs)
    remote.close()
    target.close()


def test_a_commit_pack_read_whole_is_still_checked_chunk_by_chunk(
    history: tuple[Memory, str, int], tmp_path: Path
) -> None:
    """The packs a walk fetches whole are checked like any read: one flipped byte in the commit a restore reaches
    last is an IntegrityError, and nothing is restored."""
    mem, url, _ = history
    remote = open_remote(url)
    first = mem.repo.commit(mem.head.id)
    while first.parents:
        first = mem.repo.commit(first.parents[0])
    store = remote.chunks
    assert isinstance(store, BucketChunkStore)
    key, original = _flip(store, first.id)
    try:
        fresh = open_remote(url)
        target = engram.open(str(tmp_path / "restored"), embedder=None)
        before = target.head.id
        with pytest.raises(IntegrityError):
            restore_backup(fresh, get_backup(fresh, "b1"), target.repo)
        assert target.head.id == before
        report = verify_backup(open_remote(url), get_backup(fresh, "b1"))
        assert report.corrupt == [first.id.hex()] and report.places[first.id.hex()] == [key]
        target.close()
        fresh.close()
    finally:
        store.bucket.put_many({key: original})
        remote.close()


def _flip(store: BucketChunkStore, cid: bytes) -> tuple[str, bytes]:
    """Flip one byte in the middle of ``cid``'s bytes in its pack; return the pack's key and its original bytes
    (for the caller to put back)."""
    found = store.locate(cid)
    assert found is not None and found[2] > 0, "the chunk is in a pack"
    key, at, length = found
    original = store.bucket.get_many([key])[key]
    damaged = bytearray(original)
    damaged[at + length // 2] ^= 0xFF
    store.bucket.put_many({key: bytes(damaged)})
    return key, original


def test_read_along_brings_the_following_commits_checked(history: tuple[Memory, str, int]) -> None:
    """A read of one commit brings the commits stored after it, its ancestors in order; a corrupt one of those is
    left out and not reported (nobody asked for it), while asking for it reports it."""
    mem, url, _ = history
    chain = [mem.head.id]
    while len(chain) < 8:
        chain.append(mem.repo.commit(chain[-1]).parents[0])
    remote = open_remote(url)
    store = remote.chunks
    found, bad = store.read_along([chain[0]], 5)
    assert list(found) == chain[:6] and not bad
    assert all(found[cid] == mem.repo.chunks.get_many([cid])[cid] for cid in chain[:6])
    key, original = _flip(store, chain[3])
    try:
        fresh = open_remote(url)
        found, bad = fresh.chunks.read_along([chain[0]], 5)
        assert chain[3] not in found and not bad and set(found) == {*chain[:3], *chain[4:6]}
        found, bad = fresh.chunks.read_along([chain[3]], 2)
        assert chain[3] not in found and list(bad) == [chain[3]] and list(found) == chain[4:6]
        fresh.close()
    finally:
        store.bucket.put_many({key: original})
        remote.close()


def test_a_corrupt_commit_read_along_refuses_the_clone(history: tuple[Memory, str, int], tmp_path: Path) -> None:
    """A commit in the middle of the history, which the walk gets along with the ones before it instead of asking
    for it, is checked all the same: one flipped byte is an IntegrityError and the clone writes no ref."""
    mem, url, _ = history
    cid = mem.head.id
    for _ in range(COMMITS // 2):
        cid = mem.repo.commit(cid).parents[0]
    remote = open_remote(url)
    store = remote.chunks
    key, original = _flip(store, cid)
    try:
        fresh = open_remote(url)
        target = engram.open(str(tmp_path / "cloned"), embedder=None)
        before = target.head.id
        with pytest.raises(IntegrityError, match=cid.hex()):
            clone_into(target.repo, fresh.chunks, fresh.refs)
        assert target.head.id == before and not target.repo.refs.list("tags/")
        target.close()
        fresh.close()
    finally:
        store.bucket.put_many({key: original})
        remote.close()


@pytest.mark.parametrize("hold", [sync.HOLD_BYTES, 16 << 10])
def test_clone_keeps_compressed_copies_and_writes_the_exact_chunks(
    history: tuple[Memory, str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold: int
) -> None:
    """The walk keeps what it will write as the remote stores it (zstd frames, most with the remote's dictionary),
    a fraction of the chunks' bytes; the clone writes exactly the source's chunks, also when the memory bound
    (HOLD_BYTES) is small and most of them are read again at write time."""
    mem, url, _ = history
    monkeypatch.setattr(sync, "HOLD_BYTES", hold)
    remote = open_remote(url)
    target = engram.open(str(tmp_path / "cloned"), embedder=None)
    plan = sync.plan_copy(remote.chunks, target.repo.chunks, set(remote.refs.list("heads/").values()))
    kept = sum(len(frame) for frame, _ in plan.frames.values())
    assert plan.ok and kept <= hold
    if hold > kept + plan.bytes:
        assert len(plan.frames) >= plan.chunks // 2 and kept < plan.bytes / 2
        assert any(dictionary is not None for _, dictionary in plan.frames.values())
    report = clone_into(target.repo, remote.chunks, remote.refs)
    ids = report.written
    assert len(ids) == plan.chunks and target.head.id == mem.head.id
    assert target.repo.chunks.get_many(ids) == mem.repo.chunks.get_many(ids)
    assert target.fsck().ok
    remote.close()
    target.close()
