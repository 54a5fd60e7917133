"""Remote chunks are compressed with a zstd dictionary trained from the remote's own chunks (docs/adr/
0005-compression.md), on a folder and on SeaweedFS S3: the dictionary is stored once (``dicts/<id>``, its id derived
from its hash) before any frame names it, a fresh reader fetches it, remote bytes per item are at most 30 % of the
uncompressed figure, frames written without a dictionary (and chunks written uncompressed) still read, and a
damaged or lost dictionary is corruption that ``backup verify`` names and a thorough push repairs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

import engram
from engram.backends.base import now_ms
from engram.backends.compression import MAGIC, TRAIN_MIN_BYTES, Dictionary, compress, frame_dictionary
from engram.cli import cli
from engram.errors import IntegrityError
from engram.ops.backup import create_backup, get_backup, restore_backup, verify_backup
from engram.ops.remotes import open_remote
from engram.ops.remotes.packs import PACKS, decode_index, make_packs
from engram.ops.remotes.stores import CHUNKS, DICTS, Remote, chunk_key
from engram.store import Memory

_WORDS = [
    "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=random.Random(-i).randint(2, 9)))
    for i in range(3000)
]
_WEIGHTS = [1 / (r + 1) for r in range(len(_WORDS))]


def _filled(path: Path, n: int, seed: int = 5) -> Memory:
    """A store of ``n`` typical memories (sentences of common words, tags, a user, a timestamp), 500 per commit."""
    mem = engram.open(str(path), embedder=None, author="tester")
    rng = random.Random(seed)
    for start in range(0, n, 500):
        with mem.transaction(f"load {start}") as tx:
            for i in range(start, min(n, start + 500)):
                words = rng.choices(_WORDS, weights=_WEIGHTS, k=rng.randint(15, 45))
                tx.put(("agents", f"a{i % 7}"), f"m{i:05d}", {
                    "text": " ".join(words).capitalize() + ".", "kind": rng.choice(["preference", "fact"]),
                    "user": f"user-{i % 50}", "tags": rng.sample(_WORDS[:40], 3), "importance": round(rng.random(), 2),
                    "created": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z"})  # fmt: skip
    return mem


def _run(store: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", str(store), "--embedder", "hashing", *args], obj={})
    return result.exit_code, result.output


def _frames(remote: Remote) -> tuple[list[bytes], list[bytes]]:
    """Every stored copy of a chunk on the remote: (pack entries, loose objects)."""
    bucket = remote.chunks.bucket
    keys = [key for prefix in (PACKS, CHUNKS) for key, _ in bucket.iter_keys(prefix)]
    found = bucket.get_many(keys)
    copies: list[bytes] = []
    for key, data in found.items():
        if key.endswith(".idx"):
            body = found[key.removesuffix(".idx") + ".pack"]
            pack = decode_index(key.removesuffix(".idx"), data)
            copies.extend(body[at : at + n] for at, n in pack.entries.values())
    return copies, [data for key, data in found.items() if key.startswith(CHUNKS)]


def test_one_dictionary_is_trained_stored_and_fetched_by_a_fresh_reader(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a", 3000)
    ids = list(mem.repo.chunks.iter_ids())
    data = mem.repo.chunks.get_many(ids)
    create_backup(mem.repo, open_remote(remote_url), "b1")
    remote = open_remote(remote_url)
    (key,) = [key for key, _ in remote.chunks.bucket.iter_keys(DICTS)]
    dictionary = Dictionary.load(remote.chunks.bucket.get_many([key])[key])
    assert key == DICTS + dictionary.name  # addressed by its id, which is derived from its hash
    packed, loose = _frames(remote)
    named = [frame_dictionary(copy) for copy in packed if copy.startswith(MAGIC)]
    assert set(named) == {dictionary.id} and len(named) >= 0.9 * len(packed)  # the rest: commits too small to shrink
    assert loose and all(frame_dictionary(copy) == 0 for copy in loose)  # the backup's record: no dictionary
    stored = sum(map(len, packed)) + sum(map(len, loose)) + len(dictionary.data)
    raw = sum(map(len, data.values()))
    print(f"\nremote bytes with the dictionary: {stored:,} of {raw:,} ({stored / raw:.1%}), {stored / 3000:.0f} B/item")
    assert stored / raw <= 0.30
    assert remote.chunks.get_many(ids) == data  # a reader that never saw the dictionary fetches it
    target = engram.open(str(tmp_path / "b"), embedder=None)
    assert restore_backup(remote, get_backup(remote, "b1"), target.repo).fsck.ok
    assert target.repo.chunks.get_many(ids) == data
    # another store's backup to the same remote writes with the dictionary found there, not a second one
    other = _filled(tmp_path / "c", 1500, seed=9)
    create_backup(other.repo, open_remote(remote_url), "b2")
    assert [k for k, _ in open_remote(remote_url).chunks.bucket.iter_keys(DICTS)] == [key]
    assert verify_backup(open_remote(remote_url), get_backup(open_remote(remote_url), "b2")).ok


def test_a_small_write_trains_nothing_and_frames_of_every_kind_read_side_by_side(
    remote_url: str, tmp_path: Path
) -> None:
    mem = _filled(tmp_path / "a", 1500)
    ids = list(mem.repo.chunks.iter_ids())
    data = mem.repo.chunks.get_many(ids)
    old = open_remote(remote_url)
    # what earlier versions wrote: a pack of the chunks' own bytes, a pack and loose objects of plain frames
    thirds = [ids[: len(ids) // 3], ids[len(ids) // 3 : 2 * len(ids) // 3], ids[2 * len(ids) // 3 :]]
    for pack, body in make_packs([(cid, data[cid]) for cid in thirds[0]], now_ms()):
        old.chunks.bucket.put_many({pack.name + ".pack": body, pack.name + ".idx": pack.encode_index()})
    for pack, body in make_packs([(cid, compress(data[cid])) for cid in thirds[1]], now_ms()):
        old.chunks.bucket.put_many({pack.name + ".pack": body, pack.name + ".idx": pack.encode_index()})
    old.chunks.bucket.put_many({chunk_key(cid): compress(data[cid]) for cid in thirds[2]})
    small = {cid: data[cid] for cid in thirds[2][:3]}
    assert sum(map(len, small.values())) < TRAIN_MIN_BYTES
    open_remote(remote_url).chunks.put_many(small)  # too few bytes to train from: plain frames, no dictionary
    assert list(open_remote(remote_url).chunks.bucket.iter_keys(DICTS)) == []
    assert open_remote(remote_url).chunks.get_many(ids) == data
    # a large write trains one; every kind of copy then reads in one call
    new = _filled(tmp_path / "b", 1500, seed=9)
    more = new.repo.chunks.get_many(list(new.repo.chunks.iter_ids()))
    open_remote(remote_url).chunks.put_many(more)
    assert len(list(open_remote(remote_url).chunks.bucket.iter_keys(DICTS))) == 1
    assert open_remote(remote_url).chunks.get_many([*ids, *more]) == {**data, **more}


@pytest.mark.parametrize("how", ["flip", "lost"])
def test_a_damaged_dictionary_is_named_by_verify_and_a_thorough_push_repairs(
    remote_url: str, tmp_path: Path, how: str
) -> None:
    mem = _filled(tmp_path / "a", 1500)
    ids = list(mem.repo.chunks.iter_ids())
    create_backup(mem.repo, open_remote(remote_url), "b1")
    remote = open_remote(remote_url)
    (key,) = [key for key, _ in remote.chunks.bucket.iter_keys(DICTS)]
    if how == "flip":
        body = bytearray(remote.chunks.bucket.get_many([key])[key])
        body[len(body) // 2] ^= 0x20
        remote.chunks.bucket.put_many({key: bytes(body)})
    else:
        remote.chunks.bucket.delete_many([key])
    with pytest.raises(IntegrityError, match="corrupt"):
        open_remote(remote_url).chunks.get_many(ids)
    report = verify_backup(open_remote(remote_url), get_backup(open_remote(remote_url), "b1"))
    assert not report.ok and report.corrupt and not report.missing  # below a corrupt node the walk cannot see
    assert all(key in report.places[cid] for cid in report.corrupt)
    code, shown = _run(tmp_path / "a", "backup", "verify", "--remote", remote_url)
    assert code == 2 and key in shown, shown
    code, shown = _run(tmp_path / "a", "push", remote_url, "--all", "--thorough")
    assert code == 0, shown
    code, shown = _run(tmp_path / "a", "backup", "verify", "--remote", remote_url)
    assert code == 0 and ": ok" in shown, shown
    fresh = open_remote(remote_url)
    assert fresh.chunks.get_many(ids) == mem.repo.chunks.get_many(ids)
    assert all(fresh.chunks.bad_copies(cid) == [] for cid in ids)
