"""A prune that overlaps a backup, on a folder and on SeaweedFS S3: the backup and the prune hold the remote's
lease, so the prune waits for the backup (0 backups lost), and the sweep re-reads the refs after marking."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pytest

import engram
from engram.backends.buckets import Bucket
from engram.errors import ConflictError
from engram.maintenance import iter_reachable
from engram.ops.backup import PruneReport, create_backup, list_backups, prune_backups, verify_backup
from engram.ops.remotes import open_remote
from engram.ops.remotes.lease import acquire, hold_lease, release, renew
from engram.ops.remotes.refstore import BucketRefStore
from engram.ops.remotes.stores import BucketChunkStore, Remote
from engram.store import Memory
from engram.tree import NodeStore


class HookedBucket(Bucket):
    """A real bucket whose manifest write (``before_manifest``) or first read of a pack (``before_read``) first runs
    a hook: the seam where another process's work lands in the middle of this one's."""

    def __init__(self, inner: Bucket) -> None:
        self.inner = inner
        self.url = inner.url
        self.precision_ms = inner.precision_ms
        self.before_manifest: Callable[[], None] | None = None
        self.before_read: Callable[[], None] | None = None

    def _reading(self, keys: list[str]) -> None:
        hook, self.before_read = self.before_read, None
        if hook is not None and any(key.endswith(".pack") for key in keys):
            hook()
        elif hook is not None:
            self.before_read = hook

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        wanted = list(keys)
        self._reading(wanted)
        return self.inner.get_many(wanted)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        self._reading([key])
        return self.inner.get_range(key, start, length)

    def exists_many(self, keys: Iterable[str]) -> set[str]:
        return self.inner.exists_many(keys)

    def put_many(self, objects: Mapping[str, bytes]) -> None:
        self.inner.put_many(objects)

    def delete_many(self, keys: Iterable[str]) -> None:
        self.inner.delete_many(keys)

    def iter_keys(self, prefix: str, start_after: str = "") -> Iterator[tuple[str, int]]:
        return self.inner.iter_keys(prefix, start_after)

    def written_at(self, key: str) -> int | None:
        return self.inner.written_at(key)

    def read(self, key: str) -> tuple[bytes, str] | None:
        return self.inner.read(key)

    def write_if(self, key: str, data: bytes | None, version: str | None) -> bool:
        if key.endswith("%2Fmanifest") and self.before_manifest is not None:
            self.before_manifest()
        return self.inner.write_if(key, data, version)


def _hooked(url: str) -> tuple[Remote, HookedBucket]:
    bucket = HookedBucket(open_remote(url).chunks.bucket)
    return Remote(url, BucketChunkStore(bucket), BucketRefStore(bucket)), bucket


def _filled(path: Path, n: int = 400) -> Memory:
    mem = engram.open(str(path), embedder=None, author="tester")
    with mem.transaction("bulk") as tx:
        for i in range(n):
            tx.put(("items",), f"k{i:05d}", {"text": f"item number {i}"})
    return mem


def test_prune_during_a_backup_waits_and_loses_no_backup(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    create_backup(mem.repo, open_remote(remote_url), "b1")
    for i in range(0, 400, 40):  # b2 shares most chunks with b1 and sends a few of its own
        mem.put(("items",), f"k{i:05d}", {"text": f"changed {i}"})
    remote, bucket = _hooked(remote_url)
    at_manifest, go_on = threading.Event(), threading.Event()

    def delay() -> None:
        at_manifest.set()
        go_on.wait(30)

    bucket.before_manifest = delay
    errors: list[BaseException] = []
    pruned: list[PruneReport] = []

    def backup() -> None:
        try:
            create_backup(mem.repo, remote, "b2")
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    def prune() -> None:
        try:
            pruned.append(prune_backups(open_remote(remote_url), keep_last=1, grace_ms=0, lease_wait=30))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    backing_up = threading.Thread(target=backup)
    backing_up.start()
    assert at_manifest.wait(30), "the backup reached its manifest"
    pruning = threading.Thread(target=prune)
    pruning.start()
    pruning.join(1.5)  # a prune that does not wait for the backup is done by now
    go_on.set()
    backing_up.join(30)
    pruning.join(30)
    assert not errors, errors
    fresh = open_remote(remote_url)
    newest = list_backups(fresh)[-1]
    assert newest.name == "b2" and newest.refs["heads/main"] == mem.head.id
    assert verify_backup(fresh, newest).ok  # 0 backups lost: every chunk b2 reaches is there and intact
    assert pruned[0].removed == ["b1"] and pruned[0].kept == ["b2"]  # it ran after the backup, on what it made
    assert [b.name for b in list_backups(fresh)] == ["b2"]


def test_sweep_marks_a_ref_set_while_it_marked(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    old_head = mem.head.id
    create_backup(mem.repo, open_remote(remote_url), "b1")
    mem.reset("HEAD~1")  # b2 has none of b1's items: b1's chunks are garbage once b1 is removed
    mem.put(("other",), "k", {"text": "other"})
    create_backup(mem.repo, open_remote(remote_url), "b2")
    remote, bucket = _hooked(remote_url)

    def rescue() -> None:  # a push of b1's history lands while the sweep marks (it sends no chunk: all are there)
        assert open_remote(remote_url).refs.set("heads/rescue", old_head, None, reason="push")

    bucket.before_read = rescue
    report = prune_backups(remote, keep_last=1, grace_ms=0)
    assert report.removed == ["b1"] and bucket.before_read is None  # the hook ran during the sweep
    fresh = open_remote(remote_url)
    problems: dict[str, list[str]] = {"missing": [], "corrupt": []}
    reached = list(iter_reachable(fresh.chunks, NodeStore(fresh.chunks), {old_head}, True, problems))
    assert problems == {"missing": [], "corrupt": []} and len(reached) > 3


def test_lease_keeps_a_prune_out_while_a_backup_holds_it(remote_url: str) -> None:
    bucket = open_remote(remote_url).chunks.bucket
    with hold_lease(bucket, "backup", who="nightly"):
        second = acquire(bucket, "backup", wait=0)  # backups share the lease
        with pytest.raises(ConflictError, match="a backup holds the lease"):
            acquire(bucket, "prune", wait=0.3)
        release(second)
    started = time.monotonic()
    prune = acquire(bucket, "prune", wait=0)
    with pytest.raises(ConflictError, match="a prune holds the lease"):
        acquire(bucket, "backup", wait=0.3)
    release(prune)
    expired = acquire(bucket, "prune", ttl=0.5, wait=0)  # a holder that died: its claim runs out
    assert acquire(bucket, "backup", wait=5).kind == "backup" and time.monotonic() - started < 5
    assert not renew(expired) and expired.lost is not None
    with pytest.raises(ConflictError, match="lost its lease"):
        expired.check()
