"""Backups to dir:// remotes: incremental, listed, verified, restored with fsck, pruned with a sweep."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import engram
from engram.errors import ConflictError, InvalidInputError, NotFoundError
from engram.maintenance import iter_reachable
from engram.ops.backup import (
    create_backup,
    get_backup,
    list_backups,
    plan_restore,
    prune_backups,
    restore_backup,
    verify_backup,
)
from engram.ops.remotes import open_remote
from engram.store import Memory, tenant_url
from engram.tree import NodeStore


def _filled(path: Path, n: int = 2000) -> Memory:
    mem = engram.open(str(path), embedder=None, author="tester")
    with mem.transaction("bulk") as tx:
        for i in range(n):
            tx.put(("items",), f"k{i:05d}", {"text": f"item number {i}"})
    return mem


def test_backup_is_incremental_and_listed(tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    first, sent = create_backup(mem.repo, remote, "one")
    for i in range(10):
        mem.put(("items",), f"k{i:05d}", {"text": f"changed {i}"})
    second, again = create_backup(mem.repo, remote, "two")
    assert again.bytes < sent.bytes / 5 and again.chunks <= 10 * 4  # per commit: itself, a leaf, the path up
    assert [b.name for b in list_backups(remote)] == ["one", "two"]
    assert first.items == {"main": 2000} and second.refs["heads/main"] == mem.head.id
    assert get_backup(remote, "latest").name == "two"
    with pytest.raises(ConflictError):
        create_backup(mem.repo, remote, "one")
    with pytest.raises(NotFoundError):
        get_backup(remote, "nope")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_restore_dry_run_then_restore_with_fsck(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    mem = _filled(tmp_path / "a", 500)
    mem.tag("before")
    mem.put(("items",), "k00001", {"text": "later"})
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    backup, _ = create_backup(mem.repo, remote)
    where = str(tmp_path / "restored")
    if kind == "postgres":
        where = tenant_url(request.getfixturevalue("postgres_url"), "t" + uuid.uuid4().hex[:12])
    target = engram.open(where, embedder=None)
    plan = plan_restore(remote, backup, target.repo)
    assert plan.commits == 3 and plan.bytes > 0 and plan.chunks > 0
    assert plan.changes["heads/main"][1] == mem.head.id and plan.changes["tags/before"][0] is None
    assert target.count(("items",)) == 0  # a dry run writes nothing
    report = restore_backup(remote, backup, target.repo)
    assert report.fsck.ok and report.fsck.commits == 3 + 1  # + the target's own first commit, in its reflog
    assert target.get(("items",), "k00001").value == {"text": "later"}
    assert target.at("before").get(("items",), "k00001").value == {"text": "item number 1"}
    with pytest.raises(ConflictError):
        restore_backup(remote, backup, target.repo)


def test_verify_finds_a_corrupt_and_a_missing_chunk(tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a", 300)
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    backup, _ = create_backup(mem.repo, remote)
    assert verify_backup(remote, backup).ok
    reached = iter_reachable(remote.chunks, NodeStore(remote.chunks), {mem.head.id})
    # a chunk the backup needs (the remote may hold others it does not reach): a tree node below the root
    victim = next(cid for cid, kind in sorted(reached) if kind != "commit" and cid != mem.head.tree)
    where = remote.chunks.locate(victim)
    assert where is not None
    key, at, length = where
    path = tmp_path / "remote" / key
    data = bytearray(path.read_bytes())
    data[at + max(length, 1) - 1] ^= 0xFF  # one flipped bit in the chunk, loose or in a pack
    path.write_bytes(bytes(data))
    remote = open_remote(f"dir://{tmp_path / 'remote'}")  # nothing cached
    report = verify_backup(remote, backup)
    assert victim.hex() in report.corrupt
    path.with_suffix(".idx").unlink(missing_ok=True)
    path.unlink()
    report = verify_backup(open_remote(f"dir://{tmp_path / 'remote'}"), backup)
    assert victim.hex() in report.missing


def test_prune_keeps_by_rule_and_sweeps_unreached_chunks(tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a", 1000)
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    create_backup(mem.repo, remote, "b1")
    mem.put(("items",), "k00001", {"text": "v2"})
    create_backup(mem.repo, remote, "b2")
    mem.reset("HEAD~1")
    mem.put(("items",), "k00002", {"text": "v3"})  # b2's change is no longer in any branch
    create_backup(mem.repo, remote, "b3")
    with pytest.raises(InvalidInputError):
        prune_backups(remote)
    preview = prune_backups(remote, keep_last=1, dry_run=True)
    assert preview.removed == ["b2", "b1"] and preview.kept == ["b3"]
    before = len(list(remote.chunks.iter_ids()))
    report = prune_backups(remote, keep_last=1, grace_ms=0)
    assert [b.name for b in list_backups(remote)] == ["b3"]
    assert report.chunks_removed > 0
    assert len(list(remote.chunks.iter_ids())) == before - report.chunks_removed
    assert verify_backup(remote, get_backup(remote, "b3")).ok
    kept = prune_backups(remote, keep_days=1, grace_ms=0)
    assert kept.kept == ["b3"] and kept.chunks_removed == 0
