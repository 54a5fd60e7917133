"""How the SQLite store keeps large chunks: one zstd frame each; chunks earlier versions wrote with zlib still read,
and a stored copy that cannot be decoded is corruption (fsck names it), never a codec exception."""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from pathlib import Path

import pytest

from engram.backends.compression import MAGIC
from engram.backends.sqlite import open_sqlite
from engram.errors import IntegrityError
from engram.hashing import chunk_id
from engram.maintenance import fsck
from engram.tree import NodeStore

BIG = b"N" + b'{"text": "a memory about the weather in Lisbon", "n": 1}' * 100  # 5.6 kB, compresses well
SMALL = b"N" + b"x" * 100


def _rows(path: Path) -> dict[bytes, tuple[bytes, int]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {
            bytes(cid): (bytes(data), zipped)
            for cid, data, zipped in conn.execute("SELECT id, data, zipped FROM chunks")
        }


def test_large_chunks_are_zstd_frames_and_read_back(tmp_path: Path) -> None:
    chunks, _ = open_sqlite(tmp_path / "s.db")
    chunks.put_many({chunk_id(BIG): BIG, chunk_id(SMALL): SMALL})
    rows = _rows(tmp_path / "s.db")
    stored, zipped = rows[chunk_id(BIG)]
    assert zipped == 2 and stored.startswith(MAGIC) and len(stored) < len(BIG) / 5
    assert rows[chunk_id(SMALL)] == (SMALL, 0)
    assert chunks.get_many([chunk_id(BIG), chunk_id(SMALL)]) == {chunk_id(BIG): BIG, chunk_id(SMALL): SMALL}


def test_chunks_earlier_versions_wrote_with_zlib_still_read(tmp_path: Path) -> None:
    chunks, _ = open_sqlite(tmp_path / "s.db")
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as conn, conn:
        conn.execute("INSERT INTO chunks (id, data, written, zipped) VALUES (?, ?, 0, 1)",
                     (chunk_id(BIG), zlib.compress(BIG, 1)))  # fmt: skip
    assert chunks.get_many([chunk_id(BIG)]) == {chunk_id(BIG): BIG}


@pytest.mark.parametrize("zipped", [1, 2])
def test_a_copy_that_cannot_be_decoded_is_corruption(tmp_path: Path, zipped: int) -> None:
    chunks, refs = open_sqlite(tmp_path / "s.db")
    nodes = NodeStore(chunks)
    writer = nodes.writer()
    leaf = writer.write(0, [b"k"], [b'{"v": "' + b"a value worth compressing " * 300 + b'"}']).id
    writer.flush()
    stored, _ = _rows(tmp_path / "s.db")[leaf]
    damaged = bytearray(stored if zipped == 2 else zlib.compress(chunks.get_many([leaf])[leaf], 1))
    damaged[len(damaged) // 2] ^= 0xFF
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as conn, conn:
        conn.execute("UPDATE chunks SET data = ?, zipped = ? WHERE id = ?", (bytes(damaged), zipped, leaf))
    with pytest.raises(IntegrityError, match=leaf.hex()):
        chunks.get_many([leaf])
    refs.set("heads/main", leaf, None)
    report = fsck(chunks, refs, nodes)
    assert report.corrupt == [leaf.hex()] and not report.ok
