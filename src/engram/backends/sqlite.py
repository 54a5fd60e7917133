"""SQLite backend: the embedded default. One file, WAL, durable commits, safe for many processes.

Chunks of 3 KB or more are stored compressed when that saves at least 10%: one zstd frame each (the codec
of remotes, :mod:`engram.backends.compression`, without a dictionary), about three times cheaper to write than
the zlib (level 1) of earlier versions, whose chunks still read. Reads return the original bytes.

Durability by order: chunk writes commit without fsync (``synchronous=NORMAL``); a ref change
commits with ``synchronous=FULL``, which fsyncs the write-ahead log. The log is sequential, so a
durable ref change implies every chunk written before it is durable too: one fsync per commit,
and never a ref pointing at a missing chunk.

A store may opt out of that fsync (:func:`set_synchronous` ``"normal"``, recorded in the file so every
process agrees): a commit then survives a crash of the process (SIGKILL, OOM) but the last commits
before a power loss or an operating-system crash may be lost; the log stays a prefix, so the store is
never corrupt and a ref never points at a missing chunk. See ``docs/storage.md``.
"""

from __future__ import annotations

import builtins
import contextlib
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from engram.backends.base import ChunkStore, RefLogEntry, RefStore, now_ms
from engram.backends.compression import compress, decompress
from engram.errors import EngramError, IntegrityError, InvalidInputError, StorageError, UnavailableError
from engram.hashing import ChunkId

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    id BLOB PRIMARY KEY, data BLOB NOT NULL, written INTEGER NOT NULL, zipped INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS reflog (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL, old BLOB, new BLOB, time INTEGER NOT NULL,
    actor TEXT NOT NULL, reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reflog_name_time ON reflog (name, time, seq);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

#: How a ref change reaches the disk (see :func:`set_synchronous`): ``full`` fsyncs every commit (the
#: default: a commit survives power loss), ``normal`` leaves it to the next checkpoint (a commit survives a
#: crash of the process, not of the machine).
SYNCHRONOUS = ("full", "normal")

_BATCH = 500  # ids per IN (...) query; SQLite allows 32766 parameters

# SQLite's primary result codes (https://sqlite.org/rescode.html).
_BUSY, _LOCKED, _TOOBIG = 5, 6, 18


def translate_error(exc: sqlite3.Error, context: str) -> EngramError:
    """The engram error for a sqlite3 error: another writer holding the database past the busy
    timeout is :class:`UnavailableError` (retry later); a value over SQLite's limits is
    :class:`InvalidInputError`; anything else (disk I/O, a corrupt or closed file) is :class:`StorageError`."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    text = str(exc)
    if code in (_BUSY, _LOCKED) or "database is locked" in text or "database is busy" in text:
        return UnavailableError(f"{context} is busy (another writer holds it): {text}", 1.0)
    if code == _TOOBIG or isinstance(exc, sqlite3.DataError):
        return InvalidInputError(f"{context} refused the input: {text}")
    return StorageError(f"{context}: {text}")


class SqliteDatabase:
    """One SQLite file shared by a :class:`SqliteChunkStore` and a :class:`SqliteRefStore`.

    One connection per process, used under a lock; other processes coordinate through SQLite's
    own locking (``BEGIN IMMEDIATE`` and a busy timeout). Checkpoints (copying the write-ahead log
    into the database file) run on a background thread with its own connection, so no commit pays
    for one; SQLite's automatic checkpoint stays on as a backstop when the log grows large.
    """

    #: Checkpoint in the background once the write-ahead log holds this many bytes.
    CHECKPOINT_BYTES = 4 << 20

    def __init__(self, path: str | Path, *, timeout: float = 30.0, synchronous: str | None = None) -> None:
        self.path = str(path)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        if synchronous is not None:
            _check_synchronous(synchronous)
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create the directory of SQLite store {self.path}: {exc}") from exc
        try:
            self._conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._wal(timeout)
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA wal_autocheckpoint=16384")  # backstop: 64 MB
            self._conn.executescript(_SCHEMA)
            row = self._conn.execute("SELECT value FROM settings WHERE name = 'synchronous'").fetchone()
        except sqlite3.Error as exc:
            raise translate_error(exc, f"cannot open SQLite store at {self.path}") from exc
        #: ``full`` or ``normal``: the argument, else the file's setting (:func:`set_synchronous`), else ``full``.
        self.synchronous = synchronous or (row[0] if row is not None and row[0] in SYNCHRONOUS else "full")
        self._checkpointer: threading.Thread | None = None
        if self.path != ":memory:":
            self._checkpointer = threading.Thread(
                target=_checkpoint_loop,
                args=(self.path, self._stop, self.CHECKPOINT_BYTES),
                name="engram-checkpoint",
                daemon=True,
            )
            self._checkpointer.start()

    def _wal(self, timeout: float) -> None:
        """Switch to WAL. SQLite refuses at once (no busy wait) while another process creates the
        file, so retry until the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
                continue
            if self.path == ":memory:" or str(mode).lower() == "wal":
                return
            if time.monotonic() > deadline:
                raise sqlite3.OperationalError(f"could not switch to WAL mode (journal_mode is {mode})")
            time.sleep(0.005)

    def record_synchronous(self, mode: str) -> None:
        """Record ``mode`` (see :data:`SYNCHRONOUS`) in the file for every handle opened from now on, and use it
        in this one; handles already open elsewhere keep theirs until they reopen."""
        _check_synchronous(mode)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA synchronous=FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO settings (name, value) VALUES ('synchronous', ?)", (mode,))
                conn.execute("COMMIT")
            finally:
                conn.execute("PRAGMA synchronous=NORMAL")

        self.run(work)
        self.synchronous = mode

    def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` with the connection, under the lock, translating driver errors."""
        with self._lock:
            try:
                return work(self._conn)
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                raise translate_error(exc, f"SQLite store {self.path}") from exc

    def __del__(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Stop the checkpoint thread and close the connection."""
        self._stop.set()
        if self._checkpointer is not None and self._checkpointer is not threading.current_thread():
            self._checkpointer.join(timeout=5)
        with self._lock:
            self._conn.close()


class SqliteChunkStore(ChunkStore):
    """Chunks in the ``chunks`` table of a :class:`SqliteDatabase`."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    def get_many(self, ids: Iterable[ChunkId]) -> dict[ChunkId, bytes]:
        wanted = list(ids)

        def work(conn: sqlite3.Connection) -> dict[ChunkId, bytes]:
            found: dict[ChunkId, bytes] = {}
            for i in range(0, len(wanted), _BATCH):
                part = wanted[i : i + _BATCH]
                marks = ",".join("?" * len(part))
                rows = conn.execute(f"SELECT id, data, zipped FROM chunks WHERE id IN ({marks})", part)
                found.update((cid, _unpack(cid, data, zipped)) for cid, data, zipped in rows)
            return found

        return self.db.run(work)

    def has_many(self, ids: Iterable[ChunkId]) -> set[ChunkId]:
        wanted = set(ids)

        def work(conn: sqlite3.Connection) -> set[ChunkId]:
            present: set[ChunkId] = set()
            listed = list(wanted)
            for i in range(0, len(listed), _BATCH):
                part = listed[i : i + _BATCH]
                marks = ",".join("?" * len(part))
                present.update(r[0] for r in conn.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", part))
            return wanted - present

        return self.db.run(work)

    def put_many(self, chunks: Mapping[ChunkId, bytes]) -> None:
        if not chunks:
            return

        stamp = now_ms()
        # compressed before taking the lock: writers on several threads compress in parallel
        rows = [(cid, packed, stamp, zipped) for cid, (packed, zipped) in ((c, _pack(d)) for c, d in chunks.items())]

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO chunks (id, data, written, zipped) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET written = excluded.written",
                rows,
            )
            conn.execute("COMMIT")

        self.db.run(work)

    def iter_ids(
        self, start: ChunkId | None = None, end: ChunkId | None = None, *, written_before: int | None = None
    ) -> Iterator[ChunkId]:
        conditions = ["id > ?" if start is None else "id >= ?"]
        params: list[bytes | int] = [b"" if start is None else start]
        if end is not None:
            conditions.append("id < ?")
            params.append(end)
        if written_before is not None:
            conditions.append("written < ?")
            params.append(written_before)
        sql = f"SELECT id FROM chunks WHERE {' AND '.join(conditions)} ORDER BY id LIMIT 1000"
        first = True

        def page(conn: sqlite3.Connection) -> list[ChunkId]:
            return [bytes(r[0]) for r in conn.execute(sql, params)]

        while True:  # page through, so the lock is never held across a yield
            ids = self.db.run(page)
            yield from ids
            if len(ids) < 1000:
                return
            if first:
                conditions[0], first = "id > ?", False
            params[0] = ids[-1]
            sql = f"SELECT id FROM chunks WHERE {' AND '.join(conditions)} ORDER BY id LIMIT 1000"

    def delete_many(self, ids: Iterable[ChunkId]) -> None:
        doomed = [(cid,) for cid in ids]

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM chunks WHERE id = ?", doomed)
            conn.execute("COMMIT")

        self.db.run(work)

    def close(self) -> None:
        self.db.close()


class SqliteRefStore(RefStore):
    """Refs and reflog in a :class:`SqliteDatabase`; CAS in one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    def get(self, name: str) -> ChunkId | None:
        def work(conn: sqlite3.Connection) -> ChunkId | None:
            row = conn.execute("SELECT value FROM refs WHERE name = ?", (name,)).fetchone()
            return None if row is None else bytes(row[0])

        return self.db.run(work)

    def set(
        self,
        name: str,
        new: ChunkId | None,
        expected: ChunkId | None,
        *,
        actor: str = "",
        reason: str = "",
    ) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            durable = self.db.synchronous == "full"
            if durable:
                conn.execute("PRAGMA synchronous=FULL")
            try:
                return cas(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if durable:
                    conn.execute("PRAGMA synchronous=NORMAL")

        def cas(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT value FROM refs WHERE name = ?", (name,)).fetchone()
            if (None if row is None else bytes(row[0])) != expected:
                conn.execute("ROLLBACK")
                return False
            if new is None:
                conn.execute("DELETE FROM refs WHERE name = ?", (name,))
            else:
                conn.execute("INSERT OR REPLACE INTO refs (name, value) VALUES (?, ?)", (name, new))
            conn.execute(  # time never goes backwards for one ref, even if the clock does
                "INSERT INTO reflog (name, old, new, time, actor, reason) "
                "SELECT ?, ?, ?, max(?, coalesce(max(time), 0)), ?, ? FROM reflog WHERE name = ?",
                (name, expected, new, now_ms(), actor, reason, name),
            )
            conn.execute("COMMIT")
            return True

        return self.db.run(work)

    def list(self, prefix: str = "") -> dict[str, ChunkId]:
        def work(conn: sqlite3.Connection) -> dict[str, ChunkId]:
            rows = conn.execute(
                "SELECT name, value FROM refs WHERE substr(name, 1, ?) = ? ORDER BY name",
                (len(prefix), prefix),
            )
            return {name: bytes(value) for name, value in rows}

        return self.db.run(work)

    def reflog(self, name: str | None = None, limit: int | None = None) -> builtins.list[RefLogEntry]:
        def work(conn: sqlite3.Connection) -> builtins.list[RefLogEntry]:
            rows = conn.execute(
                "SELECT name, old, new, time, actor, reason FROM reflog WHERE (? IS NULL OR name = ?) "
                "ORDER BY seq DESC LIMIT ?",
                (name, name, -1 if limit is None else limit),
            )
            return [RefLogEntry(n, _opt(o), _opt(v), t, a, r) for n, o, v, t, a, r in rows]

        return self.db.run(work)

    def value_at(self, name: str, time_ms: int) -> ChunkId | None:
        def work(conn: sqlite3.Connection) -> ChunkId | None:
            row = conn.execute(
                "SELECT new FROM reflog WHERE name = ? AND time <= ? ORDER BY time DESC, seq DESC LIMIT 1",
                (name, time_ms),
            ).fetchone()
            return None if row is None else _opt(row[0])

        return self.db.run(work)

    def prune_reflog(self, before_ms: int) -> int:
        def work(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            cur = conn.execute(
                "DELETE FROM reflog WHERE time < ? AND seq NOT IN (SELECT max(seq) FROM reflog GROUP BY name)",
                (before_ms,),
            )
            conn.execute("COMMIT")
            return cur.rowcount

        return self.db.run(work)

    def close(self) -> None:
        self.db.close()


#: Chunks at least this large are compressed: smaller ones fit a 4 KB page anyway, so compressing
#: them would cost time on every commit and save little space.
COMPRESS_FROM = 3072


def _checkpoint_loop(path: str, stop: threading.Event, threshold: int) -> None:
    """Copy the write-ahead log into the database whenever it has grown past ``threshold`` bytes.

    A free function (not a method) so the thread does not keep its database object alive.
    """
    wal = Path(path + "-wal")
    conn: sqlite3.Connection | None = None
    try:
        while not stop.wait(0.5):
            try:
                if wal.exists() and wal.stat().st_size > threshold:
                    conn = conn or sqlite3.connect(path, timeout=5.0, isolation_level=None)
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except (OSError, sqlite3.Error):
                continue  # busy or gone: the next round (or SQLite's backstop) will do it
    finally:
        if conn is not None:
            conn.close()


#: The ``zipped`` column: the chunk's own bytes, zlib (written by earlier versions), one zstd frame.
_RAW, _ZLIB, _ZSTD = 0, 1, 2


def _pack(data: bytes) -> tuple[bytes, int]:
    """Store a chunk as a zstd frame when it is large and that saves a tenth: (stored bytes, zipped flag)."""
    if len(data) < COMPRESS_FROM:
        return data, _RAW
    packed = compress(data)
    return (packed, _ZSTD) if packed is not data and len(packed) <= 0.9 * len(data) else (data, _RAW)


def _unpack(cid: ChunkId, stored: bytes, zipped: int) -> bytes:
    """The chunk's bytes from what is stored; a stored copy that cannot be decoded is an :class:`IntegrityError`."""
    try:
        if zipped == _ZSTD:
            return decompress(stored)
        return zlib.decompress(stored) if zipped else stored
    except (IntegrityError, zlib.error) as exc:
        raise IntegrityError(f"chunk {cid.hex()} is corrupt in the SQLite store (cannot be decoded: {exc})") from None


def _opt(value: bytes | None) -> ChunkId | None:
    return None if value is None else bytes(value)


def _check_synchronous(mode: object) -> None:
    if mode not in SYNCHRONOUS:
        raise InvalidInputError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, got {mode!r}")


def set_synchronous(path: str | Path, mode: str) -> None:
    """Choose how the SQLite store file at ``path`` (created if needed) makes commits durable, for every
    process that opens it from now on (handles already open keep their mode until they reopen).

    ``"full"`` (the default) fsyncs the write-ahead log on every ref change: a commit that returned survives
    a power loss. ``"normal"`` does not: a commit that returned survives a crash or kill of the process, but
    the last commits (since the previous checkpoint) may be lost on a power loss or an operating-system crash.
    Either way the store is never corrupt and a ref never points at a missing chunk. ``"normal"`` saves one
    fsync per commit (about 1 ms on a quiet virtual disk, tens of ms on a busy one).
    """
    db = SqliteDatabase(path)
    try:
        db.record_synchronous(mode)
    finally:
        db.close()


def open_sqlite(path: str | Path, *, synchronous: str | None = None) -> tuple[SqliteChunkStore, SqliteRefStore]:
    """Open (creating if needed) a SQLite store file and return its chunk and ref stores.

    ``synchronous`` overrides the file's durability mode for this handle (see :func:`set_synchronous`)."""
    db = SqliteDatabase(path, synchronous=synchronous)
    return SqliteChunkStore(db), SqliteRefStore(db)
