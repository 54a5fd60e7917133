"""Damage on a remote (a flipped byte in a pack, a truncated pack index), on a folder and on SeaweedFS S3:
``backup verify`` names every bad chunk and pack and exits 2, a thorough push or backup reads back what is really
there and re-sends it, and a restore of a damaged backup refuses before writing anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import engram
from engram import codec
from engram.backends.compression import decompress
from engram.cli import cli
from engram.errors import IntegrityError
from engram.hashing import ChunkId, chunk_id
from engram.maintenance import iter_reachable
from engram.ops.backup import create_backup, get_backup, plan_restore, restore_backup, verify_backup
from engram.ops.remotes import open_remote
from engram.ops.remotes.stores import DAMAGED, Remote
from engram.ops.remotes.sync import is_fresh
from engram.store import Memory
from engram.tree import NodeStore


def _run(store: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", str(store), "--embedder", "hashing", *args], obj={})
    return result.exit_code, result.output


def _filled(path: Path, n: int = 300) -> Memory:
    mem = engram.open(str(path), embedder=None, author="tester")
    with mem.transaction("bulk") as tx:
        for i in range(n):
            tx.put(("items",), f"k{i:05d}", {"text": f"item number {i}"})
    return mem


def _packed_leaves(remote: Remote, mem: Memory, n: int) -> list[ChunkId]:
    """``n`` leaf nodes the head reaches that the remote holds in packs."""
    reached = iter_reachable(remote.chunks, NodeStore(remote.chunks), {mem.head.id})
    nodes = [cid for cid, kind in sorted(reached) if kind == "node" and cid != mem.head.tree]
    packed = []
    for cid in nodes:
        where = remote.chunks.locate(cid)
        if where is not None and where[0].endswith(".pack"):
            packed.append(cid)
    assert len(packed) >= n, "the backup wrote its nodes into packs"
    return packed[:n]


def _flip(url: str, cid: ChunkId) -> str:
    """Flip one byte of ``cid`` where the remote stores it; returns that object's key."""
    remote = open_remote(url)
    where = remote.chunks.locate(cid)
    assert where is not None
    key, at, length = where
    data = bytearray(remote.chunks.bucket.get_many([key])[key])
    data[at + length - 1] ^= 0x20
    remote.chunks.bucket.put_many({key: bytes(data)})
    return key


def test_verify_names_a_flipped_byte_and_a_thorough_push_repairs_it(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    create_backup(mem.repo, open_remote(remote_url), "b1")
    victims = _packed_leaves(open_remote(remote_url), mem, 2)
    keys = {_flip(remote_url, cid) for cid in victims}
    code, shown = _run(tmp_path / "a", "backup", "verify", "--remote", remote_url)
    assert code == 2, shown
    assert all(f"corrupt chunk {cid.hex()}" in shown for cid in victims) and all(key in shown for key in keys)
    report = verify_backup(open_remote(remote_url), get_backup(open_remote(remote_url), "b1"))
    assert not report.ok and sorted(report.corrupt) == sorted(cid.hex() for cid in victims)
    assert {key for cid in victims for key in report.places[cid.hex()]} == keys
    # an incremental backup trusts what the remote says it has: the repair is the thorough one
    code, shown = _run(tmp_path / "a", "push", remote_url, "--all", "--thorough")
    sent = re.search(r"sent (\d+) chunks", shown)
    assert code == 0 and sent is not None and int(sent[1]) >= len(victims), shown  # the 2 (and a new record)
    code, shown = _run(tmp_path / "a", "backup", "verify", "--remote", remote_url)
    assert code == 0 and ": ok" in shown, shown
    fresh = open_remote(remote_url)
    for cid in victims:  # the bad copies are gone, not only shadowed: each object read holds good bytes
        key, at, length = fresh.chunks.locate(cid) or ("", 0, 0)
        data = fresh.chunks.bucket.get_many([key])[key]
        assert chunk_id(decompress(data[at : at + length] if length >= 0 else data)) == cid
        assert fresh.chunks.bad_copies(cid) == []
    assert not any(key in {k for k, _ in fresh.chunks.bucket.iter_keys("packs/")} for key in keys)


def test_a_truncated_pack_index_exits_2_and_a_thorough_backup_repairs_it(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    remote = open_remote(remote_url)
    create_backup(mem.repo, remote, "b1")
    index = next(key for key, _ in remote.chunks.bucket.iter_keys("packs/") if key.endswith(".idx"))
    whole = remote.chunks.bucket.get_many([index])[index]
    remote.chunks.bucket.put_many({index: whole[: len(whole) - 7]})
    code, shown = _run(tmp_path / "a", "backup", "verify", "--remote", remote_url)
    assert code == 2, shown
    assert f"unreadable index {index}" in shown and "missing chunk" in shown, shown
    # a plain backup sees the unreadable index and reads back what is there by itself
    code, shown = _run(tmp_path / "a", "backup", "create", "--remote", remote_url, "--name", "b2")
    assert code == 0 and "sent 0 chunks" not in shown, shown
    code, shown = _run(tmp_path / "a", "backup", "verify", "--remote", remote_url)
    assert code == 0 and shown.count(": ok") == 2, shown
    keys = {key for key, _ in open_remote(remote_url).chunks.bucket.iter_keys("")}
    assert index not in keys and DAMAGED + index.removeprefix("packs/") in keys  # kept aside for a post-mortem


def test_a_thorough_backup_repairs_a_flipped_byte(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    create_backup(mem.repo, open_remote(remote_url), "b1")
    (victim,) = _packed_leaves(open_remote(remote_url), mem, 1)
    _flip(remote_url, victim)
    code, shown = _run(tmp_path / "a", "backup", "create", "--remote", remote_url, "--name", "b2", "--thorough")
    assert code == 0 and "sent 0 chunks" not in shown, shown
    code, shown = _run(tmp_path / "a", "backup", "verify", "--remote", remote_url)
    assert code == 0 and shown.count(": ok") == 2, shown


def test_restore_of_a_corrupt_backup_refuses_and_writes_nothing(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    create_backup(mem.repo, open_remote(remote_url), "b1")
    (victim,) = _packed_leaves(open_remote(remote_url), mem, 1)
    key = _flip(remote_url, victim)
    where = tmp_path / "restored"
    code, shown = _run(tmp_path / "a", "backup", "restore", "b1", "--to", str(where), "--dry-run", "--remote",
                       remote_url)  # fmt: skip
    assert code == 2 and f"corrupt chunk {victim.hex()} in {key}" in shown and "nothing written" in shown, shown
    code, shown = _run(tmp_path / "a", "backup", "restore", "b1", "--to", str(where), "--remote", remote_url)
    assert code == 2 and "a restore refuses it" in shown, shown
    assert not where.exists()
    remote = open_remote(remote_url)
    backup = get_backup(remote, "b1")
    target = engram.open(str(tmp_path / "t"), embedder=None)
    with pytest.raises(IntegrityError):
        restore_backup(remote, backup, target.repo)
    assert is_fresh(target.repo) and target.repo.fsck().ok  # no ref moved: the store is as it was
    plan = plan_restore(remote, backup, target.repo)
    assert not plan.ok and plan.corrupt == [victim.hex()] and plan.missing == []


def test_a_corrupt_leaf_in_a_store_is_an_integrity_error() -> None:
    with pytest.raises(IntegrityError):
        codec.loads(b'{"text": "item num\xffer 1"}')
    with pytest.raises(IntegrityError):
        codec.loads(b'{"text": "item number 1"')
