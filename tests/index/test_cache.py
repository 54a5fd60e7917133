"""The SQLite vector cache returns the same vectors by point lookups and by a full scan."""

from __future__ import annotations

from pathlib import Path

from engram.backends import SqliteDatabase
from engram.index.cache import SqliteVectorCache, text_hash


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
