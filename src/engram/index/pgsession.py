"""What a PostgreSQL search reads first, and the one read view it reads everything on.

A search's first statement (:func:`read_start`) reads the branch's index head with the query terms' statistics and
the size of its scope. Every statement of the search then runs in one read-only ``REPEATABLE READ`` transaction on
one connection (:class:`Session`), so a writer moving the branch meanwhile changes nothing it reads: its head, lists,
rows and records are of one version. The ``BEGIN`` goes with the first statement and the ``COMMIT`` may go with the
last, pipelined, so the read view costs no round trip of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from engram.backends.postgres import PostgresDatabase

#: The first statement of a search: the branch's index head, the planner's count of the vectors in the database's
#: HNSW index, the document frequency of each query term (NULL: no item holds it), and the scope's size.
_START = (
    "SELECT h.root, h.model, h.fields, h.docs, h.length, h.vector_error, h.ref_avgdl, h.vector_pending, "
    "(SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'engram_doc_vectors'::regclass), "
    "ARRAY(SELECT t.df FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS u (term, n) LEFT JOIN engram_index_terms t "
    "ON t.repo = h.repo AND t.branch = h.branch AND t.term = u.term ORDER BY u.n), {scope} "
    "FROM engram_index_heads h WHERE h.repo = %(repo)s AND h.branch = %(branch)s"
)
#: The items of a search's scope (its namespace prefix), counted per namespace at write time (pgwrite).
_SCOPE = (
    "(SELECT coalesce(sum(n.docs), 0)::bigint FROM engram_index_namespaces n WHERE n.repo = h.repo "
    "AND n.branch = h.branch AND n.ns_path LIKE %(prefix)s ESCAPE '\\')"
)
_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"


@dataclass(frozen=True, slots=True)
class Start:
    """A branch's index head as a search starts: the root its rows reflect and the configuration (model,
    fields) that wrote them, its indexed items and their total length, why its vectors failed (None: they did
    not), the reference average length of its impacts, its items waiting for a vector, the vectors in the
    database's HNSW index (an estimate), the document frequencies of the query's terms, and how many items its
    scope holds (None: the whole branch)."""

    root: bytes
    config: tuple[str, str]
    docs: int
    length: int
    vector_error: str | None
    ref_avgdl: float
    pending: int
    hnsw: int
    df: dict[str, int]
    scope: int | None = None


class Session:
    """The statements of one search: on one read view inside :meth:`consistent`, else each on a pooled connection."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._conn: Any = None
        self._begin = False  # the BEGIN waits to go with the first statement
        self._ended = False  # the COMMIT went with a last statement

    @contextmanager
    def consistent(self) -> Iterator[None]:
        """Run the statements issued inside on one connection and one read view."""
        with self.db.connection() as conn:
            self._conn, self._begin, self._ended = conn, True, False
            try:
                yield
            except BaseException:
                self._conn = None
                if not self._begin and not self._ended:
                    with suppress(Exception):  # the error that got here is the one to report
                        conn.execute("ROLLBACK")
                raise
            self._conn = None
            if not self._begin and not self._ended:
                conn.execute("COMMIT")

    def run(self, sql: str, params: Any, *, last: bool = False, **options: Any) -> list[tuple[Any, ...]]:
        """One statement's rows, on the read view when there is one: the first statement goes with the BEGIN, and
        the ``last`` with the COMMIT, in one round trip each (pipelined)."""
        conn = self._conn
        if conn is None or (not self._begin and not last) or self._ended:
            with self.connection() as conn:
                cursor = conn.execute(sql, params, **options)
                return list(cursor.fetchall()) if cursor.description is not None else []
        with conn.pipeline() as pipeline:
            self.begin_on(conn)
            cursor = conn.execute(sql, params, **options)
            if last:
                conn.execute("COMMIT")
                self._ended = True
            pipeline.sync()  # one round trip; the cursor's result is there after it
            return list(cursor.fetchall()) if cursor.description is not None else []

    def begin_on(self, conn: Any) -> None:
        """Queue the read view's BEGIN on ``conn`` if it is the read view's and the BEGIN has not gone yet (a caller
        pipelining statements of its own sends it with them)."""
        if conn is self._conn and self._begin:
            conn.execute(_BEGIN)
            self._begin = False

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """The read view's connection, or a pooled one."""
        if self._conn is not None:
            yield self._conn
            return
        with self.db.connection() as conn:
            yield conn


def read_start(session: Session, params: dict[str, Any], terms: list[str], scoped: bool) -> Start | None:
    """The branch's index head with the document frequencies of ``terms`` and, when ``scoped`` (``params`` has the
    scope's ``prefix`` pattern), the scope's size, in one statement; None when the branch has no rows."""
    sql = _START.format(scope=_SCOPE if scoped else "NULL::bigint")
    row = session.run(sql, {**params, "terms": terms})
    if not row:
        return None
    root, model, fields, docs, length, error, ref, pending, hnsw, df, scope = row[0]
    return Start(
        bytes(root), (model, fields), int(docs), int(length), error, float(ref), int(pending), int(hnsw),
        {t: int(n) for t, n in zip(terms, df, strict=True) if n is not None}, None if scope is None else int(scope),
    )  # fmt: skip


__all__ = ["Session", "Start", "read_start"]
