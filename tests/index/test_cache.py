"""The SQLite vector cache returns the same vectors by point lookups and by a full scan (also streamed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engram import codec
from engram.backends import MemoryChunkStore, SqliteDatabase
from engram.embed import HashingEmbedder
from engram.index.cache import SqliteVectorCache, text_hash
from engram.index.docs import SCAN_FROM, DocIndex
from engram.objects import Record, encode_record
from engram.tree import NodeStore


def test_sqlite_vector_cache_lookup_and_scan_agree(tmp_path: Path) -> None:
    cache = SqliteVectorCache(SqliteDatabase(tmp_path / "v.db"))
    vectors = {text_hash(f"t{i}"): bytes([i % 256]) * 8 for i in range(300)}
    cache.put_many("m1", vectors)
    cache.put_many("m2", {text_hash("t0"): b"other"})
    wanted = [text_hash(f"t{i}") for i in range(0, 400, 2)]
    expected = {h: v for h, v in vectors.items() if h in set(wanted)}
    assert cache.get_many("m1", wanted) == expected
    cache.SCAN_FROM = 10  # the same request through the sequential scan
    assert cache.get_many("m1", wanted) == expected
    assert cache.get_many("m2", wanted) == {text_hash("t0"): b"other"}


def test_scan_many_passes_the_wanted_vectors_in_steps(tmp_path: Path) -> None:
    cache = SqliteVectorCache(SqliteDatabase(tmp_path / "v.db"))
    vectors = {text_hash(f"t{i}"): bytes([i % 256]) * 8 for i in range(300)}
    cache.put_many("m1", vectors)
    cache.put_many("m2", {text_hash("t0"): b"other"})
    wanted = {text_hash(f"t{i}") for i in range(0, 400, 2)}
    parts: list[dict[bytes, bytes]] = []
    cache.scan_many("m1", wanted, parts.append, step=40)
    assert [len(p) for p in parts] == [40, 40, 40, 30]
    assert {h: v for p in parts for h, v in p.items()} == {h: v for h, v in vectors.items() if h in wanted}


def test_a_large_sync_reads_cached_vectors_in_one_scan(tmp_path: Path) -> None:
    """From SCAN_FROM pending vectors the index reads the cache by scanning it: the vectors it sets are the
    cached ones (here deliberately not the embedder's), and only what the cache lacks is embedded."""
    embedder = HashingEmbedder()
    cache = SqliteVectorCache(SqliteDatabase(tmp_path / "v.db"))
    n = SCAN_FROM + 50
    texts = [f"note {i} about item {i % 97}" for i in range(n)]
    fake = np.zeros((n, embedder.dim), dtype=np.float32)
    fake[np.arange(n), np.arange(n) % embedder.dim] = 1.0
    cached = range(0, n, 2)
    cache.put_many(embedder.model_id, {text_hash(texts[i]): fake[i].tobytes() for i in cached})
    index = DocIndex(NodeStore(MemoryChunkStore()), embedder=embedder, cache=cache)
    index.apply(
        (codec.encode_key(("n",), f"k{i}"), encode_record(Record({"text": t}, 1, 1))) for i, t in enumerate(texts)
    )
    assert not index.pending and index.vectors is not None
    rows = index.vectors.rows(np.arange(n, dtype=np.int64))
    assert np.array_equal(rows[0::2], fake[0::2])  # from the cache
    embedded = np.asarray(embedder.embed([texts[1], texts[3]]), dtype=np.float32)
    assert np.allclose(rows[[1, 3]], embedded, atol=1e-3)  # embedded, not in the cache (float16 rows above ANN_MIN)


def test_a_scan_sets_every_item_that_shares_a_cached_text(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    cache = SqliteVectorCache(SqliteDatabase(tmp_path / "v.db"))
    n = SCAN_FROM + 10
    texts = ["one text for many" if i % 3 == 0 else f"note {i}" for i in range(n)]
    shared = np.zeros(embedder.dim, dtype=np.float32)
    shared[5] = 1.0
    cache.put_many(embedder.model_id, {text_hash(texts[0]): shared.tobytes()})
    index = DocIndex(NodeStore(MemoryChunkStore()), embedder=embedder, cache=cache)
    index.apply(
        (codec.encode_key(("n",), f"k{i:06}"), encode_record(Record({"text": t}, 1, 1))) for i, t in enumerate(texts)
    )
    assert not index.pending and index.vectors is not None
    rows = index.vectors.rows(np.arange(0, n, 3, dtype=np.int64))
    assert np.array_equal(rows, np.tile(shared, (len(rows), 1)))  # from the cache, for every one of them
