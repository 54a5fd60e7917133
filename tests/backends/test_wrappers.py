"""The validating wrapper catches corruption; the LRU stays within its byte budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.backends import LruChunkStore, MemoryChunkStore, ValidatingChunkStore, open_sqlite
from engram.errors import IntegrityError, StorageError
from engram.hashing import chunk_id


def test_validating_store_rejects_corrupt_read() -> None:
    inner = MemoryChunkStore()
    cid = chunk_id(b"good")
    inner.put_many({cid: b"evil"})
    with pytest.raises(IntegrityError, match=cid.hex()):
        ValidatingChunkStore(inner).get(cid)


def test_validating_store_rejects_mislabelled_write() -> None:
    with pytest.raises(IntegrityError):
        ValidatingChunkStore(MemoryChunkStore()).put_many({chunk_id(b"a"): b"b"})


def test_lru_evicts_to_stay_within_budget() -> None:
    inner = MemoryChunkStore()
    cache = LruChunkStore(inner, max_bytes=1000)
    ids = [cache.put(bytes([i]) * 300) for i in range(10)]
    assert cache._size <= 1000
    inner.delete_many(ids[:8])  # evicted entries must come from the inner store: now gone
    assert set(cache.get_many(ids)) == set(ids[-3:]) | set(ids[8:])


def test_sqlite_errors_become_storage_errors(tmp_path: Path) -> None:
    chunks, _ = open_sqlite(tmp_path / "x.db")
    chunks.close()
    with pytest.raises(StorageError):
        chunks.get_many([chunk_id(b"x")])


def test_sqlite_open_on_a_directory_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open"):
        open_sqlite(tmp_path)
