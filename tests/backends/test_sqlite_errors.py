"""SQLite's errors mean what they say, as PostgreSQL's do: a database another writer holds is UnavailableError
(503, retry), a value over SQLite's limits InvalidInputError (422), a broken file StorageError (500)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engram.backends.sqlite import SqliteChunkStore, SqliteDatabase, SqliteRefStore
from engram.errors import InvalidInputError, StorageError, UnavailableError
from engram.hashing import chunk_id


def test_sqlite_errors_a_database_held_by_another_writer_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    db = SqliteDatabase(path, timeout=0.2)
    refs = SqliteRefStore(db)
    cid = SqliteChunkStore(db).put(b"chunk")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(UnavailableError, match="busy") as info:
            refs.set("heads/main", cid, None)
        assert info.value.retry_after is not None
        other.execute("ROLLBACK")
        assert refs.set("heads/main", cid, None)  # free again: the same write succeeds
    finally:
        other.close()
        db.close()


def test_sqlite_errors_a_value_over_the_limit_is_invalid_input(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "store.db")
    chunks = SqliteChunkStore(db)
    try:
        db.run(lambda conn: conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1000))
        data = bytes(range(256)) * 8  # 2 KB, incompressible enough to stay large
        with pytest.raises(InvalidInputError, match="too big"):
            chunks.put_many({chunk_id(data): data})
        assert chunks.has_many([chunk_id(data)]) == {chunk_id(data)}
    finally:
        db.close()


def test_sqlite_errors_a_broken_file_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"not a database" * 512)
    with pytest.raises(StorageError, match="cannot open SQLite store") as info:
        SqliteDatabase(path)
    assert not isinstance(info.value, UnavailableError | InvalidInputError)
