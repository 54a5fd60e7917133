"""Packs on a remote (issue #15 performance): many chunks in one object, read whole or by byte ranges."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from conftest import S3Server

from engram.backends.base import now_ms
from engram.errors import StorageError
from engram.hashing import chunk_id
from engram.ops.remotes import open_remote
from engram.ops.remotes.buckets import DirBucket
from engram.ops.remotes.stores import PACK_MIN, PACKS, BucketChunkStore, Pack, decode_index, make_packs


def _chunks(n: int, size: int = 100, tag: bytes = b"c") -> dict[bytes, bytes]:
    # incompressible, so stored sizes are the chunks' own (compression is tested in test_compression.py)
    blobs = [tag + b"%06d" % i + random.Random(i).randbytes(size) for i in range(n)]
    return {chunk_id(b): b for b in blobs}


def _objects(root: Path, prefix: str) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / prefix).rglob("*") if p.is_file())


@pytest.fixture
def store(tmp_path: Path) -> BucketChunkStore:
    return open_remote(f"dir://{tmp_path / 'remote'}").chunks


def test_many_chunks_are_one_pack_a_few_are_loose(store: BucketChunkStore, tmp_path: Path) -> None:
    many, few = _chunks(100), _chunks(PACK_MIN - 1, tag=b"f")
    store.put_many(many)
    store.put_many(few)
    root = tmp_path / "remote"
    packs = _objects(root, PACKS)
    assert len(packs) == 2 and packs[0].endswith(".idx") and packs[1].endswith(".pack")
    assert len(_objects(root, "chunks")) == len(few)
    fresh = open_remote(f"dir://{root}").chunks  # reads the index from the remote
    assert fresh.get_many([*many, *few]) == {**many, **few}
    assert fresh.has_many([*many, *few, chunk_id(b"absent")]) == {chunk_id(b"absent")}
    assert list(fresh.iter_ids()) == sorted([*many, *few])


class CountingBucket(DirBucket):
    """A folder that counts whole-object reads of packs and ranged reads."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.whole: list[str] = []
        self.ranged: list[tuple[str, int, int]] = []

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        listed = list(keys)
        self.whole.extend(key for key in listed if key.endswith(".pack"))
        return super().get_many(listed)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        self.ranged.append((key, start, length))
        return super().get_range(key, start, length)


def test_sparse_reads_use_byte_ranges_and_whole_packs_are_cached(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    data = _chunks(400, size=2000)
    open_remote(f"dir://{root}").chunks.put_many(data)
    bucket = CountingBucket(root)
    reader = BucketChunkStore(bucket)
    ids = list(data)
    assert reader.get_many([ids[3], ids[250]]) == {ids[3]: data[ids[3]], ids[250]: data[ids[250]]}
    assert len(bucket.ranged) == 2 and not bucket.whole  # two far-apart chunks: two small ranges, not the pack
    stored = [(reader.locate(cid) or ("", 0, 0))[2] for cid in (ids[3], ids[250])]  # a sampled chunk may shrink
    assert [length for _, _, length in bucket.ranged] == stored  # with the dictionary trained from them
    assert reader.get_many(ids[:10]) == {cid: data[cid] for cid in ids[:10]}
    assert len(bucket.ranged) == 3  # ten neighbours: one range
    assert reader.get_many(ids) == data and len(bucket.whole) == 1  # most of it: the whole pack, once
    assert reader.get_many(ids[100:300]) == {cid: data[cid] for cid in ids[100:300]}
    assert len(bucket.whole) == 1 and len(bucket.ranged) == 3  # from the pack read last


def test_large_writes_are_several_packs(tmp_path: Path) -> None:
    store = BucketChunkStore(DirBucket(tmp_path / "remote"), pack_bytes=50_000)
    data = _chunks(300, size=1000)
    store.put_many(data)
    assert len(_objects(tmp_path / "remote", PACKS)) == 2 * 7  # 300 kB in packs of 50 kB: 7 packs + indexes
    assert open_remote(f"dir://{tmp_path / 'remote'}").chunks.get_many(list(data)) == data


def test_delete_rewrites_a_pack_without_the_deleted_chunks(store: BucketChunkStore, tmp_path: Path) -> None:
    data = _chunks(50)
    store.put_many(data)
    ids = list(data)
    store.delete_many(ids[:10])
    fresh = open_remote(f"dir://{tmp_path / 'remote'}").chunks
    assert fresh.has_many(ids) == set(ids[:10])
    assert fresh.get_many(ids) == {cid: data[cid] for cid in ids[10:]}
    assert len(_objects(tmp_path / "remote", PACKS)) == 2  # the old pack is gone
    store.delete_many(ids[10:])
    assert _objects(tmp_path / "remote", PACKS) == []
    assert open_remote(f"dir://{tmp_path / 'remote'}").chunks.has_many(ids) == set(ids)


def test_write_time_is_the_newest_copy(store: BucketChunkStore) -> None:
    old = _chunks(20, tag=b"o")
    store.put_many(old)
    time.sleep(0.005)
    cut = now_ms()
    time.sleep(0.005)
    new = _chunks(20, tag=b"n")
    store.put_many(new)
    assert sorted(store.iter_ids(written_before=cut)) == sorted(old)
    first = next(iter(old))
    store.put_many({first: old[first]})  # again, loose: its newest copy is young now
    assert sorted(store.iter_ids(written_before=cut)) == sorted(set(old) - {first})
    store.put_many(old)  # the same pack again: renewed
    assert list(store.iter_ids(written_before=cut)) == []
    lo, hi = sorted(old)[3], sorted(old)[9]
    assert list(store.iter_ids(lo, hi)) == sorted(c for c in [*old, *new] if lo <= c < hi)


def test_locate_names_the_object_and_range(store: BucketChunkStore, tmp_path: Path) -> None:
    data = _chunks(30)
    store.put_many(data)
    loose = store.put(b"on its own")
    cid = list(data)[7]
    key, at, length = store.locate(cid) or ("", 0, 0)
    assert key.startswith(PACKS) and (tmp_path / "remote" / key).read_bytes()[at : at + length] == data[cid]
    assert store.locate(loose) == (f"chunks/{loose.hex()[:2]}/{loose.hex()}", 0, -1)
    assert store.locate(chunk_id(b"nowhere")) is None


def test_pack_index_round_trips_and_damage_is_reported() -> None:
    packs = make_packs(list(_chunks(5).items()), 1234)
    pack, body = packs[0]
    back = decode_index(pack.name, pack.encode_index())
    assert back == Pack(pack.name, 1234, pack.entries) and pack.size == len(body)
    with pytest.raises(StorageError, match="damaged"):
        decode_index(pack.name, pack.encode_index()[:-3])
    with pytest.raises(StorageError, match="damaged"):
        decode_index(pack.name, b"XXXX" + pack.encode_index()[4:])


def test_packs_on_s3_with_ranges(s3: S3Server) -> None:
    url = s3.url()
    remote = open_remote(url)
    data = _chunks(300, size=3000)
    remote.chunks.put_many(data)
    ids = list(data)
    reader = open_remote(url).chunks
    assert reader.get_many([ids[1], ids[200]]) == {ids[1]: data[ids[1]], ids[200]: data[ids[200]]}
    assert reader.get_many(ids) == data
    assert reader.has_many(ids) == set()
    reader.delete_many(ids[:5])
    assert open_remote(url).chunks.has_many(ids) == set(ids[:5])
    empty = reader.put(b"")
    assert reader.get_many([empty]) == {empty: b""}
    remote.close()
    reader.close()


def test_a_walk_through_a_pack_fetches_it_once(tmp_path: Path) -> None:
    """One chunk at a time, as a walk along commits reads: a small pack is fetched whole at the first read and
    the next chunks come from it; a large one is read by range twice, then whole."""
    root = tmp_path / "remote"
    small, large = _chunks(100, size=300, tag=b"s"), _chunks(200, size=2000, tag=b"l")
    writer = open_remote(f"dir://{root}").chunks
    writer.put_many(small)
    writer.put_many(large)
    bucket = CountingBucket(root)
    reader = BucketChunkStore(bucket)
    for cid, data in small.items():
        assert reader.get_many([cid]) == {cid: data}
    assert len(bucket.whole) == 1 and not bucket.ranged  # before: 100 ranged reads
    for cid, data in list(large.items())[:50]:
        assert reader.get_many([cid]) == {cid: data}
    assert len(bucket.ranged) == 2 and len(bucket.whole) == 2  # before: 50 ranged reads
