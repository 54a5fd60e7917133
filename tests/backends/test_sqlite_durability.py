"""SQLite's durability modes: ``full`` (the default) fsyncs every ref change; ``normal``, recorded in the file,
does not, and still loses nothing a killed process acknowledged (issue #13)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import engram
from engram.backends import RefStore
from engram.backends.sqlite import SqliteDatabase, SqliteRefStore, open_sqlite, set_synchronous
from engram.errors import InvalidInputError
from engram.hashing import chunk_id
from engram.testing import RefStoreContract


class TestSqliteRefStoreNormal(RefStoreContract):
    @pytest.fixture
    def refs(self, tmp_path: Path) -> Iterator[RefStore]:
        store = open_sqlite(tmp_path / "r.db", synchronous="normal")[1]
        yield store
        store.close()


def _statements(db: SqliteDatabase, work: object) -> list[str]:
    """The SQL statements the connection ran while ``work()`` ran."""
    seen: list[str] = []
    db.run(lambda conn: conn.set_trace_callback(seen.append))
    try:
        work()  # type: ignore[operator]
    finally:
        db.run(lambda conn: conn.set_trace_callback(None))
    return seen


def test_sqlite_durability_full_is_the_default_and_fsyncs_each_ref_change(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "s.db")
    try:
        assert db.synchronous == "full"
        refs = SqliteRefStore(db)
        seen = _statements(db, lambda: refs.set("heads/main", chunk_id(b"a"), None))
        assert "PRAGMA synchronous=FULL" in seen and seen[-1] == "PRAGMA synchronous=NORMAL"
    finally:
        db.close()


def test_sqlite_durability_normal_is_recorded_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    set_synchronous(path, "normal")
    db = SqliteDatabase(path)  # every later handle (any process) reads the file's mode
    try:
        assert db.synchronous == "normal"
        refs = SqliteRefStore(db)
        seen = _statements(db, lambda: refs.set("heads/main", chunk_id(b"a"), None))
        assert not any("synchronous" in s for s in seen) and "COMMIT" in seen
        assert refs.get("heads/main") == chunk_id(b"a")
    finally:
        db.close()
    override = SqliteDatabase(path, synchronous="full")  # a handle may ask for more
    try:
        assert override.synchronous == "full"
    finally:
        override.close()
    set_synchronous(path, "full")
    again = SqliteDatabase(path)
    try:
        assert again.synchronous == "full"
    finally:
        again.close()


def test_sqlite_durability_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="synchronous must be one of full, normal"):
        set_synchronous(tmp_path / "s.db", "off")
    with pytest.raises(InvalidInputError, match="got 'OFF'"):
        SqliteDatabase(tmp_path / "s.db", synchronous="OFF")
    db = SqliteDatabase(tmp_path / "s.db")
    try:
        assert db.synchronous == "full"  # nothing was recorded
    finally:
        db.close()


WRITER = """
import sys
import engram

mem = engram.open(sys.argv[1], embedder=None)
for i in range(1_000_000):
    commit = mem.put(("crash",), f"k{i % 20}", {"i": i})
    print(commit.id.hex(), i, flush=True)
"""


def test_sqlite_durability_normal_loses_nothing_a_killed_process_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    set_synchronous(path, "normal")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(engram.__file__).parents[1]), env.get("PYTHONPATH")]))
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, f"sqlite:///{path}"], stdout=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        acks = [proc.stdout.readline().split() for _ in range(40)]
        proc.send_signal(signal.SIGKILL)
        acks += [line.split() for line in proc.stdout.read().splitlines()]
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and len(acks) >= 40
    mem = engram.open(f"sqlite:///{path}", embedder=None)
    try:
        head = mem.repo.head("main")
        for commit, _ in acks:
            assert mem.repo.is_ancestor(bytes.fromhex(commit), head)
        last = int(acks[-1][1])
        assert mem.get(("crash",), f"k{last % 20}").value == {"i": last}  # type: ignore[union-attr]
        assert mem.repo.fsck().ok
        mem.put(("crash",), "after", {"ok": True})  # the store keeps accepting writes
    finally:
        mem.close()
