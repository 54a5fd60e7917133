"""Remote objects are zstd frames (docs/adr/0005-compression.md), on a folder and on SeaweedFS S3: backups restore
byte-identically and take a fraction of the bytes, packs and loose chunks written uncompressed before still read,
and a damaged frame is an IntegrityError (never a zstd exception) that ``backup verify`` names."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import engram
from engram.backends.base import now_ms
from engram.backends.compression import MAGIC, compress, decompress
from engram.errors import IntegrityError
from engram.hashing import ChunkId, chunk_id
from engram.ops.backup import create_backup, get_backup, restore_backup, verify_backup
from engram.ops.remotes import open_remote
from engram.ops.remotes.packs import PACKS, make_packs
from engram.ops.remotes.stores import CHUNKS, Remote, chunk_key
from engram.store import Memory

_WORDS = [
    "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=random.Random(-i).randint(2, 9)))
    for i in range(3000)
]


def _item(rng: random.Random, i: int) -> dict[str, object]:
    """A typical memory: a sentence of common words (Zipf-like), a few tags, a user, a timestamp."""
    words = rng.choices(_WORDS, weights=[1 / (r + 1) for r in range(len(_WORDS))], k=rng.randint(15, 45))
    return {"text": " ".join(words).capitalize() + ".", "kind": rng.choice(["preference", "fact", "episode"]),
            "user": f"user-{i % 50}", "tags": rng.sample(_WORDS[:40], 3), "importance": round(rng.random(), 2),
            "created": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z"}  # fmt: skip


def _filled(path: Path, n: int = 2000) -> Memory:
    mem = engram.open(str(path), embedder=None, author="tester")
    rng = random.Random(5)
    with mem.transaction("bulk") as tx:
        for i in range(n):
            tx.put(("agents", f"a{i % 7}"), f"m{i:05d}", _item(rng, i))
    return mem


def _stored(remote: Remote) -> dict[str, bytes]:
    keys = [key for prefix in (PACKS, CHUNKS) for key, _ in remote.chunks.bucket.iter_keys(prefix)]
    return remote.chunks.bucket.get_many(keys)


def test_a_backup_is_compressed_and_restores_byte_identically(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a")
    _, report = create_backup(mem.repo, open_remote(remote_url), "b1")
    remote = open_remote(remote_url)
    stored = _stored(remote)
    chunks = [key for key in stored if key.startswith(CHUNKS) or key.endswith(".pack")]
    ids = list(remote.chunks.iter_ids())
    raw = sum(len(data) for data in remote.chunks.get_many(ids).values())
    assert raw >= report.bytes > 0  # everything sent (and the backup record), read back whole
    packed = sum(len(stored[key]) for key in chunks)
    ratio = packed / raw
    print(f"\nremote bytes: {packed:,} of {raw:,} uncompressed ({ratio:.1%}), {packed / 2000:.0f} B per item")
    assert ratio <= 0.30  # typical JSON items (measured: see docs/adr/0005-compression.md)
    target = engram.open(str(tmp_path / "b"), embedder=None)
    restored = restore_backup(remote, get_backup(remote, "b1"), target.repo)
    assert restored.fsck.ok
    for i in range(0, 2000, 37):
        ns, key = ("agents", f"a{i % 7}"), f"m{i:05d}"
        assert (got := target.get(ns, key)) is not None and got.value == (mem.get(ns, key) or got).value
    assert {cid: data for cid, data in target.repo.chunks.get_many(ids).items()} == mem.repo.chunks.get_many(ids)


def test_uncompressed_packs_and_loose_chunks_from_before_still_read(remote_url: str, tmp_path: Path) -> None:
    mem = _filled(tmp_path / "a", 300)
    ids = list(mem.repo.chunks.iter_ids())
    data = mem.repo.chunks.get_many(ids)
    old = open_remote(remote_url)
    # what a version without compression wrote: packs of the chunks' own bytes, and loose chunks
    packed, loose = ids[: len(ids) // 2], ids[len(ids) // 2 :]
    for pack, body in make_packs([(cid, data[cid]) for cid in packed], now_ms()):
        old.chunks.bucket.put_many({pack.name + ".pack": body, pack.name + ".idx": pack.encode_index()})
    old.chunks.bucket.put_many({chunk_key(cid): data[cid] for cid in loose})
    for name, cid in mem.repo.refs.list().items():
        assert old.refs.set(name, cid, None)
    fresh = open_remote(remote_url)
    assert fresh.chunks.get_many(ids) == data
    assert fresh.chunks.has_many(ids) == set()
    clone = engram.open(str(tmp_path / "b"), embedder=None)
    clone.repo.chunks.put_many(fresh.chunks.get_many(ids))
    assert clone.repo.fsck().ok
    # new writes beside them are frames; both kinds read in one call
    extra = {chunk_id(b"N" + bytes(i)): b"N" + bytes(i) for i in range(3)}
    fresh.chunks.put_many(extra)
    assert open_remote(remote_url).chunks.get_many([*ids, *extra]) == {**data, **extra}


def _corrupt(remote: Remote, cid: ChunkId, how: str) -> str:
    key, at, length = remote.chunks.locate(cid) or ("", 0, 0)
    body = bytearray(remote.chunks.bucket.get_many([key])[key])
    end = len(body) if length < 0 else at + length
    assert bytes(body[at : at + 4]) == MAGIC  # a frame
    if how == "flip":
        body[(at + end) // 2] ^= 0x55
    else:  # a header that claims an absurd size, the rest garbage
        body[at:end] = (MAGIC + b"\xa4" + b"\xff" * 8 + b"\x00" * (end - at))[: end - at]
    remote.chunks.bucket.put_many({key: bytes(body)})
    return key


@pytest.mark.parametrize("how", ["flip", "header"])
def test_a_damaged_frame_is_an_integrity_error_that_verify_names(remote_url: str, tmp_path: Path, how: str) -> None:
    mem = _filled(tmp_path / "a", 600)
    create_backup(mem.repo, open_remote(remote_url), "b1")
    remote = open_remote(remote_url)
    leaves = sorted(remote.chunks.iter_ids())
    sizes = {cid: len(data) for cid, data in remote.chunks.get_many(leaves).items()}
    victim = max(sizes, key=lambda cid: sizes[cid])  # a large chunk: a frame with several blocks
    key = _corrupt(remote, victim, how)
    fresh = open_remote(remote_url)
    with pytest.raises(IntegrityError, match=victim.hex()):
        fresh.chunks.get_many([victim])
    report = verify_backup(open_remote(remote_url), get_backup(open_remote(remote_url), "b1"))
    assert not report.ok and report.corrupt == [victim.hex()] and report.places[victim.hex()] == [key]


def test_the_codec_never_raises_zstd_errors() -> None:
    data = b"N" + b'{"text": "hello"}' * 100
    frame = compress(data)
    assert frame.startswith(MAGIC) and len(frame) < len(data) and decompress(frame) == data
    assert decompress(data) == data  # an old, uncompressed copy
    for damaged in (frame[:-3], frame[:10], frame[:4], frame[:20] + b"\x00" + frame[21:]):
        with pytest.raises(IntegrityError):
            decompress(damaged)
    noise = random.Random(1).randbytes(500)
    assert compress(noise) == noise  # a frame would not be smaller: stored as it is
    tricky = MAGIC + noise  # a chunk that looks like a frame is always stored as one
    assert compress(tricky) != tricky and decompress(compress(tricky)) == tricky
