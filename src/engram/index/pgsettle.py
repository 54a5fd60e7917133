"""The background mover of fresh vectors into the HNSW index (see :mod:`engram.index.pgwrite`).

A commit writes its new vectors to ``engram_doc_vectors_fresh``, which has no HNSW index, so it never
waits for an HNSW insert; searches scan those rows exactly. A :class:`Settler` thread per engine moves
them, a batch per transaction, into ``engram_doc_vectors`` (HNSW-indexed) soon after the commits that
wrote them. Its lag is visible (:meth:`~engram.index.pgengine.PgEngine.lag`), costs only search time
(the exact scan of what has not moved yet), never correctness, and any process's mover may move any
repository's rows (rows a writer holds are skipped).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from engram.backends.postgres import PostgresDatabase
from engram.index.pgwrite import settle

_log = logging.getLogger(__name__)

#: Vectors moved per transaction (each is an HNSW insert: a transaction holds their rows for ~0.1-1 s).
BATCH = 128
#: Seconds between passes while rows may still be arriving (a commit may not be visible yet when woken).
POLL = 0.2
#: Idle passes after which the mover sleeps until the next wake-up.
IDLE_PASSES = 10
#: Vectors moved in one go after which the fresh table is vacuumed.
VACUUM_AFTER = 2_000
#: Rows written (by this process) after which the search tables are analysed again.
ANALYZE_AFTER = 5_000


class Settler:
    """A daemon thread moving one repository's fresh vectors into the HNSW index, woken after writes."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._written = 0
        self._stopped = False

    def wrote(self, rows: int) -> None:
        """Rows were written to the search tables: once enough have been since the last time, the planner's
        statistics are refreshed in the background (stale ones after a load pick slow plans)."""
        with self._lock:
            self._written += rows
        if rows:
            self.wake()

    def analyze(self) -> None:
        """Refresh the planner's statistics of the search tables now."""
        with self._lock:
            self._written = 0
        with self.db.connection() as conn:
            for table in ("engram_docs", "engram_postings", "engram_doc_vectors_fresh", "engram_index_terms"):
                conn.execute(f"ANALYZE {table}")

    def close(self, timeout: float = 10.0) -> None:
        """Stop the mover thread (the store is closing): it finishes the batch it is moving, if any, and ends.
        Vectors not moved yet stay in the fresh table, scanned exactly, until another mover takes them."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def wake(self) -> None:
        """New fresh vectors were (or are about to be) committed: move them soon."""
        with self._lock:
            if self._stopped:
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=f"engram-settle-{self.db.repo}", daemon=True)
                self._thread.start()
        self._wake.set()

    def settle_all(self) -> int:
        """Move every fresh vector of the repository now (in this thread); returns how many moved."""
        moved = 0
        while True:
            done = self._pass()
            moved += done
            if done < BATCH:
                self._vacuum(moved)
                return moved

    def _vacuum(self, moved: int) -> None:
        """After many rows left the fresh table, vacuum it: the moves and the scans of what remains would
        otherwise wade through their dead rows until autovacuum comes."""
        if moved >= VACUUM_AFTER:
            with self.db.connection() as conn:
                conn.execute("VACUUM (ANALYZE) engram_doc_vectors_fresh")

    def _pass(self) -> int:
        with self.db.connection() as conn:
            return settle(conn, self.db.repo, BATCH)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed():
                return
            idle = moved_now = 0
            while idle < IDLE_PASSES:
                if self._closed():
                    return
                try:
                    moved = self._pass()
                except Exception as exc:  # a background thread must never die noisily: retry on the next wake
                    if self._closed():
                        return
                    _log.warning("moving fresh vectors of %s into the HNSW index failed: %s", self.db.repo, exc)
                    break
                idle = 0 if moved else idle + 1
                moved_now += moved
                if moved < BATCH and moved_now >= VACUUM_AFTER:
                    try:
                        self._vacuum(moved_now)
                    except Exception as exc:  # as above
                        _log.warning("vacuuming the fresh vectors of %s failed: %s", self.db.repo, exc)
                    moved_now = 0
                if self._written >= ANALYZE_AFTER:
                    try:
                        self.analyze()
                    except Exception as exc:  # as above
                        _log.warning("refreshing the search tables' statistics failed: %s", exc)
                if moved < BATCH and self._wake.wait(POLL):  # woken: by more writes, or to stop
                    self._wake.clear()
                    if self._closed():
                        return

    def _closed(self) -> bool:
        pool: Any = self.db.pool
        return self._stopped or bool(pool.closed)


__all__ = ["ANALYZE_AFTER", "BATCH", "Settler"]
