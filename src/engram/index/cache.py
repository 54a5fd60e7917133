"""Vectors stored once per (model id, text): an embedding cache shared by every version and index.

Embeddings are derived data: the versioned records hold text, and a vector is looked up by the
model's id and the SHA-256 of the text, so unchanged text is never embedded twice and switching
models never rewrites history.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from engram.backends.postgres import ASYNC_COMMIT, PostgresDatabase
from engram.backends.sqlite import SqliteDatabase
from engram.embed.base import Embedder


def text_hash(text: str) -> bytes:
    """The cache key of a text."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class VectorCache(Protocol):
    """Stored vectors keyed by (model id, text hash)."""

    def get_many(self, model: str, hashes: Iterable[bytes]) -> dict[bytes, bytes]:
        """Vectors (float32 bytes) found for these text hashes."""
        ...

    def put_many(self, model: str, vectors: Mapping[bytes, bytes]) -> None:
        """Store vectors (float32 bytes) by text hash."""
        ...


class MemoryVectorCache:
    """An in-process vector cache."""

    def __init__(self) -> None:
        self._data: dict[tuple[str, bytes], bytes] = {}
        self._lock = threading.Lock()

    def get_many(self, model: str, hashes: Iterable[bytes]) -> dict[bytes, bytes]:
        with self._lock:
            return {h: self._data[(model, h)] for h in hashes if (model, h) in self._data}

    def put_many(self, model: str, vectors: Mapping[bytes, bytes]) -> None:
        with self._lock:
            for h, v in vectors.items():
                self._data[(model, h)] = v


class SqliteVectorCache:
    """Vectors in a ``vectors`` table of the store's SQLite file."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        db.run(
            lambda conn: conn.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, text_hash BLOB NOT NULL, "
                "vector BLOB NOT NULL, PRIMARY KEY (model, text_hash)) WITHOUT ROWID"
            )
        )

    #: Beyond this many hashes one sequential scan of the model's vectors beats point lookups.
    SCAN_FROM = 20_000

    def get_many(self, model: str, hashes: Iterable[bytes]) -> dict[bytes, bytes]:
        wanted = list(hashes)
        if len(wanted) >= self.SCAN_FROM:
            return self._scan(model, set(wanted))

        def work(conn: sqlite3.Connection) -> dict[bytes, bytes]:
            found: dict[bytes, bytes] = {}
            for i in range(0, len(wanted), 500):
                part = wanted[i : i + 500]
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT text_hash, vector FROM vectors WHERE model = ? AND text_hash IN ({marks})", [model, *part]
                )
                found.update((bytes(h), bytes(v)) for h, v in rows)
            return found

        return self.db.run(work)

    def scan_many(
        self, model: str, wanted: Collection[bytes], sink: Callable[[dict[bytes, bytes]], None], step: int = 16_384
    ) -> None:
        """Pass the stored vectors of ``wanted`` hashes to ``sink``, up to ``step`` at a time, reading the
        model's vectors in one sequential scan: for many hashes ~10x faster than point lookups (random
        reads of a table keyed by hash), and never all of them in memory at once."""

        def work(conn: sqlite3.Connection) -> None:
            part: dict[bytes, bytes] = {}
            for h, v in conn.execute("SELECT text_hash, vector FROM vectors WHERE model = ?", (model,)):
                if h in wanted:
                    part[bytes(h)] = bytes(v)
                    if len(part) >= step:
                        sink(part)
                        part = {}
            if part:
                sink(part)

        self.db.run(work)

    def _scan(self, model: str, wanted: set[bytes]) -> dict[bytes, bytes]:
        def work(conn: sqlite3.Connection) -> dict[bytes, bytes]:
            rows = conn.execute("SELECT text_hash, vector FROM vectors WHERE model = ?", (model,))
            return {bytes(h): bytes(v) for h, v in rows if bytes(h) in wanted}

        return self.db.run(work)

    def put_many(self, model: str, vectors: Mapping[bytes, bytes]) -> None:
        if not vectors:
            return

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT OR IGNORE INTO vectors (model, text_hash, vector) VALUES (?, ?, ?)",
                [(model, h, v) for h, v in vectors.items()],
            )
            conn.execute("COMMIT")

        self.db.run(work)


class PostgresVectorCache:
    """Vectors in the ``engram_vectors`` table, per repository (see :mod:`engram.backends.postgres`)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    def get_many(self, model: str, hashes: Iterable[bytes]) -> dict[bytes, bytes]:
        wanted = list(hashes)
        found: dict[bytes, bytes] = {}
        for i in range(0, len(wanted), 10_000):
            rows = self.db.run(
                "SELECT text_hash, vector FROM engram_vectors WHERE repo = %s AND model = %s AND text_hash = ANY(%s)",
                (self.db.repo, model, wanted[i : i + 10_000]),
            )
            found.update((bytes(h), bytes(v)) for h, v in rows)
        return found

    def put_many(self, model: str, vectors: Mapping[bytes, bytes]) -> None:
        """Store vectors in one statement whose commit does not wait for a log flush (derived data: a crash
        can only lose vectors to embed again; see :data:`~engram.backends.postgres.ASYNC_COMMIT`)."""
        if vectors:
            self.db.run(
                "INSERT INTO engram_vectors (repo, model, text_hash, vector) "
                f"SELECT %s, %s, h, v FROM unnest(%s::bytea[], %s::bytea[]) AS t(h, v), {ASYNC_COMMIT} "
                "ON CONFLICT DO NOTHING",
                (self.db.repo, model, list(vectors), list(vectors.values())),
            )


#: Texts embedded per call to the embedder.
EMBED_BATCH = 64


def embed_through(embedder: Embedder, cache: VectorCache, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
    """Vectors of ``texts``: from the cache, embedding (in batches) only the texts it lacks and storing
    them. Raises :class:`~engram.errors.EmbedderError` when the embedder fails."""
    model = embedder.model_id
    hashes = [text_hash(t) for t in texts]
    found = cache.get_many(model, set(hashes))
    missing = list({h: t for h, t in zip(hashes, texts, strict=True) if h not in found}.items())
    for i in range(0, len(missing), EMBED_BATCH):
        part = missing[i : i + EMBED_BATCH]
        blobs = as_blobs(np.asarray(embedder.embed([t for _, t in part]), dtype=np.float32), [h for h, _ in part])
        cache.put_many(model, blobs)
        found.update(blobs)
    return [as_array(found[h]) for h in hashes]


class QueryVectors:
    """Embeddings of recent queries (the last ``size`` distinct ones), so a repeated query embeds once."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._found: OrderedDict[tuple[str, str], npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, embedder: Embedder, text: str) -> npt.NDArray[np.float32]:
        """The query's embedding by ``embedder``."""
        key = (embedder.model_id, text)
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
                return found
        found = np.asarray(embedder.embed_query(text), dtype=np.float32)
        with self._lock:
            self._found[key] = found
            if len(self._found) > self.size:
                self._found.popitem(last=False)
        return found


def as_array(blob: bytes) -> npt.NDArray[np.float32]:
    """A stored vector as a float32 array."""
    return np.frombuffer(blob, dtype=np.float32)


def as_blobs(matrix: npt.NDArray[np.float32], hashes: Sequence[bytes]) -> dict[bytes, bytes]:
    """Rows of a matrix as stored vectors keyed by text hash."""
    return {h: np.ascontiguousarray(row, dtype=np.float32).tobytes() for h, row in zip(hashes, matrix, strict=True)}
