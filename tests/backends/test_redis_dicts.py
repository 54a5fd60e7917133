"""The Redis chunk cache compresses with a zstd dictionary trained from the first chunks it stores (docs/adr/
0005-compression.md), against the real Redis: no dictionary until there are enough chunks, one dictionary shared by
every cache of a repository (the first trained wins), readers that never saw it fetch it, and a dictionary that
was evicted or damaged makes its values misses (served from the store, never an error) until a writer puts it
back."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import redis
from typical_chunks import CountingStore, typical_chunks

from engram.backends import MemoryChunkStore
from engram.backends.compression import Dictionary, frame_dictionary
from engram.backends.redis import SAMPLE_BYTES, RedisChunkCache
from engram.hashing import ChunkId


@pytest.fixture(scope="module")
def chunks(tmp_path_factory: pytest.TempPathFactory) -> dict[ChunkId, bytes]:
    """The chunks of a store of 6,000 typical JSON memories, written in 3 commits (~2.6 MB)."""
    found = typical_chunks(tmp_path_factory.mktemp("chunks") / "s", items=6000, per_commit=2000, seed=7)
    assert sum(map(len, found.values())) >= 2 * SAMPLE_BYTES
    return found


def _named(client: redis.Redis, prefix: str, ids: Iterable[ChunkId]) -> set[int]:
    """The dictionary ids the cached values of ``ids`` name (0: none)."""
    return {frame_dictionary(value) for value in client.mget([f"{prefix}default:c:{cid.hex()}" for cid in ids])}


def _dict_keys(client: redis.Redis, prefix: str) -> list[str]:
    return sorted(key.decode() for key in client.scan_iter(match=f"{prefix}default:d:*") if b"current" not in key)


def test_no_dictionary_until_enough_chunks_then_one_for_every_cache(
    client: redis.Redis, prefix: str, chunks: dict[ChunkId, bytes]
) -> None:
    items = sorted(chunks.items(), key=lambda kv: len(kv[1]))
    few, size = [], 0
    for cid, data in items:
        if size + len(data) >= SAMPLE_BYTES // 2:
            break
        few.append(cid)
        size += len(data)
    first = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix)
    first.put_many({cid: chunks[cid] for cid in few})
    assert _named(client, prefix, few) == {0} and client.get(f"{prefix}default:d:current") is None
    rest = [cid for cid in chunks if cid not in few]
    half = rest[: len(rest) // 2]
    first.put_many({cid: chunks[cid] for cid in half})  # enough samples now: trained, then used
    (key,) = _dict_keys(client, prefix)
    dictionary = Dictionary.load(client.get(key) or b"")
    assert client.get(f"{prefix}default:d:current") == dictionary.name.encode() and key.endswith(dictionary.name)
    assert _named(client, prefix, half) - {0} == {dictionary.id}
    # another process's cache: finds the dictionary, writes with it, and trains none
    other = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix)
    other.put_many({cid: chunks[cid] for cid in rest[len(rest) // 2 :]})
    assert _named(client, prefix, rest[len(rest) // 2 :]) - {0} == {dictionary.id}
    assert _dict_keys(client, prefix) == [key]
    # a reader that never saw it fetches it: everything from Redis
    inner = CountingStore()
    assert RedisChunkCache(inner, client, prefix=prefix).get_many(chunks) == chunks and inner.reads == []


def test_two_caches_that_trained_at_once_end_with_the_first_dictionary(
    client: redis.Redis, prefix: str, chunks: dict[ChunkId, bytes]
) -> None:
    ids = list(chunks)
    late = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix)
    late.put_many({ids[0]: chunks[ids[0]]})  # asked Redis for a dictionary: none yet
    early = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix)
    early.put_many({cid: chunks[cid] for cid in ids[: len(ids) // 2]})
    current = client.get(f"{prefix}default:d:current")
    assert current is not None
    late.put_many({cid: chunks[cid] for cid in reversed(ids[len(ids) // 2 :])})  # trains its own, adopts the first
    assert client.get(f"{prefix}default:d:current") == current
    assert _named(client, prefix, ids[len(ids) // 2 :]) - {0} == {int(current, 16)}
    late.put_many({cid: chunks[cid] for cid in ids[:50]})
    assert _named(client, prefix, ids[:50]) - {0} == {int(current, 16)}


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("how", ["evicted", "damaged"])
def test_a_lost_dictionary_makes_misses_and_a_writer_puts_it_back(
    client: redis.Redis, prefix: str, chunks: dict[ChunkId, bytes], how: str, verify: bool
) -> None:
    writer = RedisChunkCache(MemoryChunkStore(), client, prefix=prefix)
    writer.put_many(chunks)
    (key,) = _dict_keys(client, prefix)
    good = client.get(key) or b""
    if how == "evicted":
        client.delete(key)
    else:
        client.set(key, good[:1000] + bytes([good[1000] ^ 0x20]) + good[1001:])
    inner = CountingStore()
    inner.put_many(chunks)
    assert RedisChunkCache(inner, client, prefix=prefix, verify=verify).get_many(chunks) == chunks
    assert len(inner.reads) >= len(chunks) - 5  # all but the values too small to compress: from the store
    if how == "evicted":  # the next write of a cache that writes with it puts it back
        writer.put_many({next(iter(chunks)): chunks[next(iter(chunks))]})
        assert client.get(key) == good
        inner = CountingStore()
        assert RedisChunkCache(inner, client, prefix=prefix, verify=verify).get_many(chunks) == chunks
        assert inner.reads == []
