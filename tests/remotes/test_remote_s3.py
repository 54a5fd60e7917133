"""Remotes and backups on a real S3-compatible server (SeaweedFS), including the server dying mid-push."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from conftest import S3Server

import engram
from engram.errors import CircuitOpenError, UnavailableError
from engram.ops.backup import create_backup, list_backups, prune_backups, restore_backup, verify_backup
from engram.ops.remotes import clone_into, open_remote, push
from engram.store import Memory

T = TypeVar("T")


def _filled(path: Path, n: int) -> Memory:
    mem = engram.open(str(path), embedder=None, author="tester")
    with mem.transaction("bulk") as tx:
        for i in range(n):
            tx.put(("items",), f"k{i:05d}", {"text": f"item number {i}"})
    return mem


def test_s3_push_then_clone(s3: S3Server, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a", 500)
    mem.tag("v1")
    remote = open_remote(s3.url())
    report = push(mem.repo, remote.chunks, remote.refs)
    assert report.ok and report.chunks > 0
    assert push(mem.repo, remote.chunks, remote.refs).chunks == 0
    other = engram.open(str(tmp_path / "b"), embedder=None)
    clone_into(other.repo, remote.chunks, remote.refs)
    assert other.head.id == mem.head.id and other.count(("items",)) == 500 and other.fsck().ok
    remote.close()


def _once_closed(call: Callable[[], T], timeout: float = 15.0) -> T:
    """``call()`` once the S3 breaker, opened by the outage, lets requests through again (it says when)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except CircuitOpenError as exc:
            if time.monotonic() > deadline:
                raise
            time.sleep(min(exc.retry_after or 0.5, 0.5))


def test_s3_server_killed_mid_push_then_resumed(s3: S3Server, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a", 6000)
    remote = open_remote(s3.url())
    copied: list[int] = []

    def kill_after_first_batch(phase: str, done: int, total: int | None) -> None:
        if phase == "copying":
            copied.append(done)
            if len(copied) == 1:
                s3.kill()

    with pytest.raises(UnavailableError):
        push(mem.repo, remote.chunks, remote.refs, progress=kill_after_first_batch)
    total = copied and copied[0]
    s3.start()
    assert _once_closed(remote.refs.list) == {}  # no ref moved: the remote is as it was, plus unreferenced chunks
    resumed = push(mem.repo, remote.chunks, remote.refs)
    assert resumed.ok and resumed.present >= total > 0  # what the first push wrote is not sent again
    assert remote.refs.get("heads/main") == mem.head.id
    other = engram.open(str(tmp_path / "b"), embedder=None)
    clone_into(other.repo, remote.chunks, remote.refs)
    assert other.count(("items",)) == 6000 and other.fsck().ok
    remote.close()


def test_s3_backup_verify_restore_prune(s3: S3Server, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a", 1000)
    remote = open_remote(s3.url())
    create_backup(mem.repo, remote, "b1")
    mem.put(("items",), "k00001", {"text": "v2"})
    _, second = create_backup(mem.repo, remote, "b2")
    assert second.chunks <= 4
    assert [b.name for b in list_backups(remote)] == ["b1", "b2"]
    assert all(verify_backup(remote, b).ok for b in list_backups(remote))
    target = engram.open(str(tmp_path / "restored"), embedder=None)
    restored = restore_backup(remote, list_backups(remote)[0], target.repo)
    assert restored.fsck.ok and target.get(("items",), "k00001").value == {"text": "item number 1"}
    pruned = prune_backups(remote, keep_last=1, grace_ms=0)
    assert pruned.removed == ["b1"] and pruned.chunks_removed > 0
    assert verify_backup(remote, list_backups(remote)[0]).ok
    remote.close()
