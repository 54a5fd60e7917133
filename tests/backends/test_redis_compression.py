"""The Redis chunk cache stores zstd frames (docs/adr/0005-compression.md) against the real Redis: chunks round-trip,
values cached uncompressed before still serve, a damaged value is a miss that is overwritten (never a zstd
exception), and a cached chunk takes a fraction of the memory it took."""

from __future__ import annotations

import pytest
import redis
from typical_chunks import CountingStore, typical_chunks

from engram.backends import MemoryChunkStore
from engram.backends.compression import MAGIC, Dictionary, compress, decompress
from engram.backends.redis import RedisChunkCache
from engram.hashing import ChunkId


@pytest.fixture(scope="module")
def chunks(tmp_path_factory: pytest.TempPathFactory) -> dict[ChunkId, bytes]:
    """The chunks of a store of 3,000 typical JSON memories (sentences of common words, tags, a timestamp)."""
    return typical_chunks(tmp_path_factory.mktemp("chunks") / "s", items=3000, per_commit=3000, seed=5)


def test_chunks_round_trip_as_frames(client: redis.Redis, prefix: str, chunks: dict[ChunkId, bytes]) -> None:
    RedisChunkCache(MemoryChunkStore(), client, prefix=prefix).put_many(chunks)
    inner = CountingStore()
    cache = RedisChunkCache(inner, client, prefix=prefix)
    assert cache.get_many(chunks) == chunks and inner.reads == []  # all from Redis
    values = client.mget([f"{prefix}default:c:{cid.hex()}" for cid in chunks])
    current = client.get(f"{prefix}default:d:current")
    dictionary = Dictionary.load(client.get(f"{prefix}default:d:{current.decode()}") or b"")
    # each a frame with the dictionary trained from them, unless it would not be smaller
    assert values == [compress(data, dictionary) for data in chunks.values()]
    assert sum(isinstance(v, bytes) and v.startswith(MAGIC) for v in values) >= len(values) - 2  # all but the commit


def test_a_value_cached_uncompressed_before_still_serves(
    client: redis.Redis, prefix: str, chunks: dict[ChunkId, bytes]
) -> None:
    for cid, data in chunks.items():
        client.set(f"{prefix}default:c:{cid.hex()}", data)  # what a version without compression cached
    for verify in (True, False):
        inner = CountingStore()
        assert RedisChunkCache(inner, client, prefix=prefix, verify=verify).get_many(chunks) == chunks
        assert inner.reads == []


@pytest.mark.parametrize("verify", [True, False])
def test_a_damaged_value_is_a_miss_and_is_overwritten(
    client: redis.Redis, prefix: str, chunks: dict[ChunkId, bytes], verify: bool
) -> None:
    cid, data = max(chunks.items(), key=lambda kv: len(kv[1]))
    key = f"{prefix}default:c:{cid.hex()}"
    frame = bytearray(compress(data))
    frame[len(frame) // 2] ^= 0x55
    for damaged in (bytes(frame), bytes(frame[:-3]), MAGIC + b"\xa4" + b"\xff" * 8):
        client.set(key, damaged)
        inner = CountingStore()
        inner.put_many({cid: data})
        assert RedisChunkCache(inner, client, prefix=prefix, verify=verify).get_many([cid]) == {cid: data}
        assert inner.reads == [cid]  # read from the store ...
        stored = client.get(key)
        assert isinstance(stored, bytes) and decompress(stored) == data  # ... and cached again, good


def test_a_cached_chunk_takes_a_fraction_of_the_memory(
    client: redis.Redis, prefix: str, chunks: dict[ChunkId, bytes]
) -> None:
    RedisChunkCache(MemoryChunkStore(), client, prefix=prefix).put_many(chunks)
    raw_prefix = prefix + "raw:"
    for cid, data in chunks.items():
        client.set(f"{raw_prefix}{cid.hex()}", data)  # the same chunks as they were cached before
    used = sum(int(client.memory_usage(f"{prefix}default:c:{cid.hex()}") or 0) for cid in chunks)
    before = sum(int(client.memory_usage(f"{raw_prefix}{cid.hex()}") or 0) for cid in chunks)
    ratio = used / before
    each, was = used / len(chunks), before / len(chunks)
    dicts = sum(int(client.memory_usage(key) or 0) for key in client.scan_iter(match=f"{prefix}default:d:*"))
    print(
        f"\nRedis memory per cached chunk: {each:,.0f} B of {was:,.0f} B ({ratio:.1%}); the dictionary "
        f"{dicts:,} B once ({(used + dicts) / before:.1%} with it, {len(chunks)} chunks)"
    )
    assert 0 < ratio <= 0.30  # typical JSON items (measured: see docs/adr/0005-compression.md)
