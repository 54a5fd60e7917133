"""A restore hashes every chunk it copies exactly once (as it reads it from the remote), and its check afterwards
still finds what is wrong in the target: a copied chunk that did not land, a chunk the target had that is corrupt."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import engram
import engram.hashing
from engram.errors import IntegrityError
from engram.hashing import ID_SIZE, ChunkId
from engram.ops.backup import create_backup, restore_backup, verify_backup
from engram.ops.remotes import open_remote
from engram.store import Memory


def _history(path: Path, commits: int = 40) -> Memory:
    """A store of one bulk commit then ``commits`` single puts (a backup of it is packs on the remote)."""
    mem = engram.open(str(path), embedder=None, author="tester")
    with mem.transaction("bulk") as tx:
        for i in range(300):
            tx.put(("items",), f"k{i:04d}", {"text": f"item number {i} " * 8})
    for i in range(commits):
        mem.put(("items",), f"k{i * 7:04d}", {"text": f"changed {i} " * 8})
    return mem


class _Hashes:
    """Counts chunk-id hashes (BLAKE2b-160) by the id they produce."""

    def __init__(self) -> None:
        self.by_id: Counter[ChunkId] = Counter()

    def blake2b(self, *args: Any, **kwargs: Any) -> Any:
        found = hashlib.blake2b(*args, **kwargs)
        if kwargs.get("digest_size") == ID_SIZE:
            self.by_id[found.digest()] += 1
        return found


def test_a_restore_hashes_each_copied_chunk_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = _history(tmp_path / "src")
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    backup, _ = create_backup(mem.repo, remote, "b")
    target = engram.open(str(tmp_path / "restored"), embedder=None)
    remote = open_remote(f"dir://{tmp_path / 'remote'}")  # nothing read yet
    had = set(target.repo.chunks.iter_ids())
    hashes = _Hashes()
    monkeypatch.setattr(engram.hashing, "hashlib", types.SimpleNamespace(blake2b=hashes.blake2b))
    report = restore_backup(remote, backup, target.repo)
    monkeypatch.undo()
    written = [cid for cid in target.repo.chunks.iter_ids() if cid not in had]
    assert report.fsck.ok and len(written) == report.transfer.chunks > 100
    assert report.plan.commits == 42 and report.fsck.commits == 43  # 40 puts, the bulk, init; + the target's init
    assert report.fsck.nodes >= len(written) - report.plan.commits
    counts = [hashes.by_id[cid] for cid in written]
    assert min(counts) == 1  # every copied chunk was checked against its id...
    assert max(counts) == 1  # ...once: not again by the copy, nor by the check after it
    assert target.get(("items",), "k0007").value["text"].startswith("changed 1 ")
    assert target.fsck().ok  # and a full fsck agrees


def test_the_check_after_a_restore_finds_a_chunk_that_did_not_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = _history(tmp_path / "src", 10)
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    backup, _ = create_backup(mem.repo, remote, "b")
    target = engram.open(str(tmp_path / "restored"), embedder=None)
    store = target.repo.chunks
    put_many = store.put_many
    lost: list[ChunkId] = []

    def lossy(chunks: dict[ChunkId, bytes]) -> None:  # a write that says it is durable and lost one chunk
        if not lost and len(chunks) > 1:
            lost.append(next(iter(chunks)))
        put_many({cid: data for cid, data in chunks.items() if cid not in lost})

    monkeypatch.setattr(store, "put_many", lossy)
    report = restore_backup(remote, backup, target.repo)
    assert not report.fsck.ok and report.fsck.missing == [lost[0].hex()]


def test_the_check_after_a_forced_restore_reads_what_the_target_had(tmp_path: Path) -> None:
    mem = _history(tmp_path / "src", 5)
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    backup, _ = create_backup(mem.repo, remote, "b")
    target = engram.open(str(tmp_path / "restored"), embedder=None)
    target.put(("mine",), "x", {"text": "a value of the target's own " * 200})  # a zlib-stored leaf
    leaf = target.repo.nodes.load(target.repo.commit(target.head.id).tree)
    assert leaf.level == 0
    target.repo.refs.set("heads/mine", target.head.id, None)
    target.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "restored" / "engram.db")) as conn, conn:
        conn.execute("UPDATE chunks SET data = ?, zipped = 0 WHERE id = ?", (b"N garbage", leaf.id))
    target = engram.open(str(tmp_path / "restored"), embedder=None)
    report = restore_backup(remote, backup, target.repo, force=True)
    assert report.fsck.corrupt == [leaf.id.hex()] and not report.fsck.ok


def test_a_corrupt_chunk_on_the_remote_still_restores_nothing(tmp_path: Path) -> None:
    mem = _history(tmp_path / "src", 10)
    remote = open_remote(f"dir://{tmp_path / 'remote'}")
    backup, _ = create_backup(mem.repo, remote, "b")
    packs = sorted((tmp_path / "remote" / "packs").glob("*.pack"), key=lambda p: p.stat().st_size)
    data = bytearray(packs[-1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    packs[-1].write_bytes(bytes(data))
    target = engram.open(str(tmp_path / "restored"), embedder=None)
    before = target.repo.refs.list()
    with pytest.raises(IntegrityError):
        restore_backup(open_remote(f"dir://{tmp_path / 'remote'}"), backup, target.repo)
    assert target.repo.refs.list() == before
    assert not verify_backup(open_remote(f"dir://{tmp_path / 'remote'}"), backup).ok
