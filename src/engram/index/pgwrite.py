"""Writing a change to a branch's search rows in PostgreSQL (:mod:`engram.index.pgengine` decides when).

A :class:`Plan` is computed with no lock held (the diff between two roots, the documents to add and their
embeddings); :func:`write` applies it on a connection inside a transaction: one statement removes the
old rows of the changed items (documents, postings, vectors), then the new rows go in, with the term
frequencies and the branch's head row. A small change (a single put) goes as pipelined ``INSERT``\\ s,
one round trip; a bulk one by ``COPY`` (binary for vectors). New vectors go to
``engram_doc_vectors_fresh`` (no HNSW index: a commit never waits for an HNSW insert), and a background
mover (:func:`settle`) brings them into the HNSW-indexed ``engram_doc_vectors``; searches read both.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.backends.postgres import ASYNC_COMMIT
from engram.hashing import ChunkId
from engram.index import keyword
from engram.index.doclist import Doc, confidence_of
from engram.index.pgrows import counts_of, jsonb_text, ns_path, vector_text
from engram.index.vector import stored

#: Rows written at once after which the tables are analysed (bulk loads change the right query plans).
ANALYZE_AFTER = 5_000
#: Impacts are recomputed when the average item length leaves [ref / this, ref * this] of the length they assume.
REIMPACT_DRIFT = 2.0
#: Changes of at most this many items are written with pipelined INSERTs (one round trip); larger ones by COPY.
SMALL_WRITE = 32

_DOC_COLUMNS = (
    "repo, branch, key, ns_path, record, value, updated, expires, confidence, indexed, length, term_list, tf_list"
)
_DOC_TYPES = "%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s::text[], %s::real[]"


@dataclass(slots=True)
class Plan:
    """The change from the rows of root ``base`` to those of ``target``.

    ``pending`` counts indexed documents whose vectors were not at hand (a plan made under a lock takes
    vectors from the cache only): they are written without one and embedded later, outside any lock.
    """

    base: ChunkId
    target: ChunkId
    removed: list[bytes] = field(default_factory=list)
    added: list[Doc] = field(default_factory=list)
    vectors: list[npt.NDArray[np.float32] | None] = field(default_factory=list)
    error: str | None = None
    pending: int = 0
    #: New vector-cache rows (text hash -> vector) to store with the write (a cache in the same database).
    cached: dict[bytes, bytes] = field(default_factory=dict)


@dataclass(slots=True)
class Head:
    """A branch's head row, as read under its lock."""

    root: bytes
    docs: int
    length: int
    ref_avgdl: float


def write(
    conn: Any,
    repo: str,
    branch: str,
    plan: Plan,
    head: Head,
    progress: Callable[[int], None] | None = None,
    *,
    model: str = "",
) -> None:
    """Apply a plan to the branch's rows, postings, term frequencies and head row, on ``conn`` (in a
    transaction, holding the head row's lock)."""
    if plan.base == plan.target:
        return
    df: Counter[str] = Counter()
    spaces: Counter[str] = Counter()  # items per namespace (ns_path) added, less those removed
    docs = length = 0
    if plan.removed:
        # Fresh vectors first, in a statement of their own: if the background mover holds one, this waits for
        # it, and the next statement's read view then sees the vector where the mover put it.
        keys = {"repo": repo, "branch": branch, "keys": plan.removed}
        conn.execute(
            "DELETE FROM engram_doc_vectors_fresh WHERE repo = %(repo)s AND branch = %(branch)s "
            "AND key = ANY(%(keys)b)",
            keys,
        )
        rows = conn.execute(
            "WITH gone AS (DELETE FROM engram_docs WHERE repo = %(repo)s AND branch = %(branch)s "
            "AND key = ANY(%(keys)b) RETURNING key, term_list, length, indexed, ns_path), "
            "vectors AS (DELETE FROM engram_doc_vectors WHERE repo = %(repo)s AND branch = %(branch)s "
            "AND key = ANY(%(keys)b)), "
            "postings AS (DELETE FROM engram_postings p USING (SELECT key, unnest(term_list) AS term FROM gone "
            "WHERE indexed) g WHERE p.repo = %(repo)s AND p.branch = %(branch)s AND p.term = g.term "
            "AND p.key = g.key) "
            "SELECT term_list, length, indexed, ns_path FROM gone",
            keys,
        ).fetchall()
        for term_list, size, indexed, path in rows:
            spaces[path] -= 1
            if indexed:
                docs -= 1
                length -= size
                df.subtract(term_list)
    counts = [counts_of(d) for d in plan.added]
    for doc, found in zip(plan.added, counts, strict=True):
        spaces[ns_path(doc.namespace)] += 1
        if doc.indexed:
            docs += 1
            length += sum(found.values())
            df.update(found.keys())
    total, total_length = head.docs + docs, head.length + length
    ref = head.ref_avgdl
    avgdl = total_length / total if total else 0.0
    if avgdl and not ref / REIMPACT_DRIFT <= avgdl <= ref * REIMPACT_DRIFT:
        ref = avgdl  # impacts bound BM25 at this reference length: keep it near the real average
    # in pipeline mode (a ref move expected to be small, planned again under the lock) COPY is not allowed
    small = len(plan.added) <= SMALL_WRITE or in_pipeline(conn)
    rows_out: list[tuple[Any, ...]] = []
    postings: list[tuple[Any, ...]] = []
    vectors: list[tuple[Any, ...]] = []
    for doc, found, vector in zip(plan.added, counts, plan.vectors, strict=True):
        record = doc.record
        size = sum(found.values())
        rows_out.append((
            repo, branch, doc.key, ns_path(doc.namespace), doc.data, jsonb_text(record.value),
            record.updated_at, record.expires_at, confidence_of(record.value), doc.indexed, size,
            list(found), [float(n) for n in found.values()],
        ))  # fmt: skip
        if found and ref:
            tf = np.fromiter(found.values(), dtype=np.float32, count=len(found))
            impacts = keyword.bm25(tf, np.full(len(found), size, dtype=np.float32), 1.0, ref).tolist()
            postings.extend((repo, branch, t, doc.key, w) for t, w in zip(found, impacts, strict=True))
        if vector is not None:
            vector = stored(vector[None])[0]  # float16 precision, as the in-process index keeps vectors
            embedding = vector_text(vector) if small else _vector_bytes(vector)
            vectors.append((repo, branch, doc.key, len(vector), embedding))
    changed = {t: df[t] for t in sorted(df) if df[t]}  # in the primary key's order
    moved = {p: spaces[p] for p in sorted(spaces) if spaces[p]}
    if small:
        # pipelined: one round trip (in a pipelined ref move, the one of its COMMIT)
        with nullcontext() if in_pipeline(conn) else conn.pipeline():
            _insert(conn, rows_out, postings, vectors)
            _finish(conn, repo, branch, plan, (changed, moved), (total, total_length, ref), model)
        if ref != head.ref_avgdl and head.ref_avgdl:
            _reimpact(conn, repo, branch, ref)
        if progress is not None and rows_out:
            progress(len(rows_out))
        return
    _copy(conn, f"engram_docs ({_DOC_COLUMNS})", rows_out, progress)
    postings.sort(key=_index_order)  # in the order of their indexes: each index page is visited once, not per row
    _copy(conn, "engram_postings (repo, branch, term, key, impact)", postings)
    _copy(conn, "engram_doc_vectors_fresh (repo, branch, key, dim, embedding)", vectors, binary=_VECTOR_TYPES)
    if len(rows_out) >= ANALYZE_AFTER:  # a bulk load: refresh the planner's statistics before the next search
        for table in ("engram_docs", "engram_doc_vectors_fresh", "engram_postings", "engram_index_terms"):
            conn.execute(f"ANALYZE {table}")
    _finish(conn, repo, branch, plan, (changed, moved), (total, total_length, ref), model)
    if ref != head.ref_avgdl and head.ref_avgdl:
        _reimpact(conn, repo, branch, ref)
    if any(d < 0 for d in changed.values()):
        conn.execute(
            "DELETE FROM engram_index_terms WHERE repo = %s AND branch = %s AND term = ANY(%s) AND df <= 0",
            (repo, branch, [t for t, d in changed.items() if d < 0]),
        )


def _insert(
    conn: Any, docs: list[tuple[Any, ...]], postings: list[tuple[Any, ...]], vectors: list[tuple[Any, ...]]
) -> None:
    """A small change's rows, as pipelined INSERTs."""
    with conn.cursor() as cur:
        if docs:
            cur.executemany(f"INSERT INTO engram_docs ({_DOC_COLUMNS}) VALUES ({_DOC_TYPES})", docs)
        if postings:  # one statement over arrays: a put has a posting per distinct term
            repo, branch = postings[0][0], postings[0][1]
            cur.execute(
                "INSERT INTO engram_postings (repo, branch, term, key, impact) SELECT %s, %s, t, k, w "
                "FROM unnest(%s::text[], %b::bytea[], %s::real[]) AS u(t, k, w)",
                (repo, branch, [p[2] for p in postings], [p[3] for p in postings], [p[4] for p in postings]),
            )
        if vectors:
            cur.executemany(
                "INSERT INTO engram_doc_vectors_fresh (repo, branch, key, dim, embedding) "
                "VALUES (%s, %s, %s, %s, %s::vector)",
                vectors,
            )


def _finish(
    conn: Any,
    repo: str,
    branch: str,
    plan: Plan,
    deltas: tuple[dict[str, int], dict[str, int]],
    totals: tuple[int, int, float],
    model: str,
) -> None:
    """The term frequencies, the items per namespace, the head row, and the vector cache's new rows (the table of
    engram.index.cache.PostgresVectorCache) when the cache is in this database."""
    total, total_length, ref = totals
    changed, spaces = deltas
    if plan.cached:
        hashes = sorted(plan.cached)  # in the primary key's order
        conn.execute(
            "INSERT INTO engram_vectors (repo, model, text_hash, vector) SELECT %s, %s, h, v "
            "FROM unnest(%b::bytea[], %b::bytea[]) AS t(h, v) ON CONFLICT DO NOTHING",
            (repo, model, hashes, [plan.cached[h] for h in hashes]),
        )
    if changed:
        conn.execute(
            "INSERT INTO engram_index_terms (repo, branch, term, df) SELECT %s, %s, t, d "
            "FROM unnest(%s::text[], %s::bigint[]) AS u(t, d) ON CONFLICT (repo, branch, term) "
            "DO UPDATE SET df = engram_index_terms.df + excluded.df",
            (repo, branch, list(changed), list(changed.values())),
        )
    if spaces:
        conn.execute(
            "INSERT INTO engram_index_namespaces (repo, branch, ns_path, docs) SELECT %s, %s, p, d "
            "FROM unnest(%s::text[], %s::bigint[]) AS u(p, d) ON CONFLICT (repo, branch, ns_path) "
            "DO UPDATE SET docs = engram_index_namespaces.docs + excluded.docs",
            (repo, branch, list(spaces), list(spaces.values())),
        )
        if any(d < 0 for d in spaces.values()):
            conn.execute(
                "DELETE FROM engram_index_namespaces WHERE repo = %s AND branch = %s AND ns_path = ANY(%s) "
                "AND docs <= 0",
                (repo, branch, [p for p, d in spaces.items() if d < 0]),
            )
    conn.execute(
        "UPDATE engram_index_heads SET root = %s, docs = %s, length = %s, ref_avgdl = %s, vector_error = %s, "
        "vector_pending = vector_pending + %s WHERE repo = %s AND branch = %s",
        (plan.target, total, total_length, ref, plan.error, plan.pending, repo, branch),
    )


def _reimpact(conn: Any, repo: str, branch: str, ref: float) -> None:
    """Recompute a branch's impacts at a new reference length (rare: when the average length drifted)."""
    rows = conn.execute(
        "SELECT key, term_list, tf_list, length FROM engram_docs WHERE repo = %s AND branch = %s AND indexed",
        (repo, branch),
    ).fetchall()
    conn.execute("DELETE FROM engram_postings WHERE repo = %s AND branch = %s", (repo, branch))
    postings: list[tuple[Any, ...]] = []
    for key, terms, tfs, size in rows:
        if terms:
            tf = np.asarray(tfs, dtype=np.float32)
            impacts = keyword.bm25(tf, np.full(len(tf), size, dtype=np.float32), 1.0, ref).tolist()
            postings.extend((repo, branch, t, bytes(key), w) for t, w in zip(terms, impacts, strict=True))
    postings.sort(key=_index_order)
    _copy(conn, "engram_postings (repo, branch, term, key, impact)", postings)


def in_pipeline(conn: Any) -> bool:
    """Whether ``conn`` is in pipeline mode."""
    return bool(conn.pgconn.pipeline_status)


def _index_order(posting: tuple[Any, ...]) -> tuple[str, bytes]:
    """A posting row's (term, key): the order of the postings' indexes within a branch."""
    return posting[2], posting[3]


def _vector_bytes(vector: npt.NDArray[np.float32]) -> bytes:
    """A vector in pgvector's binary format (dimension, a reserved zero, big-endian float32s)."""
    return struct.pack(">HH", len(vector), 0) + np.asarray(vector, dtype=">f4").tobytes()


#: Binary COPY types of a vector row; the embedding goes as raw bytes (pgvector's binary format).
_VECTOR_TYPES = ("text", "text", "bytea", "int4", "bytea")


def _copy(
    conn: Any,
    target: str,
    rows: list[tuple[Any, ...]],
    progress: Callable[[int], None] | None = None,
    binary: tuple[str, ...] | None = None,
) -> None:
    """COPY rows into ``target`` (a table and its columns), reporting progress every 1,000 rows; in pipeline
    mode, where COPY is not allowed (a small ref move that rewrites its impacts), pipelined INSERTs."""
    if not rows:
        return
    if in_pipeline(conn):
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {target} VALUES ({', '.join(['%s'] * len(rows[0]))})", rows)
        if progress is not None:
            progress(len(rows))
        return
    with conn.cursor() as cur, cur.copy(f"COPY {target} FROM STDIN" + (" (FORMAT BINARY)" if binary else "")) as copy:
        if binary:
            copy.set_types(list(binary))
        for done, row in enumerate(rows, start=1):
            copy.write_row(row)
            if progress is not None and done % 1000 == 0:
                progress(1000)
    if progress is not None and len(rows) % 1000:
        progress(len(rows) % 1000)


def settle(conn: Any, repo: str, batch: int = 256) -> int:
    """Move up to ``batch`` fresh vectors of a repository into the HNSW-indexed table (one transaction, rows
    locked by a writer skipped); returns how many moved.

    The move commits without waiting for a log flush (:data:`~engram.backends.postgres.ASYNC_COMMIT`): it
    changes where a vector is kept, not what a search finds, and a crash that loses it leaves the vector in
    the fresh table (the move is one transaction). The commits of the puts next to it pay no extra fsync.
    """
    return int(
        conn.execute(
            "WITH moved AS (DELETE FROM engram_doc_vectors_fresh f WHERE (f.repo, f.branch, f.key) IN (SELECT repo, "
            "branch, key FROM engram_doc_vectors_fresh WHERE repo = %s LIMIT %s FOR UPDATE SKIP LOCKED) "
            "RETURNING f.repo, f.branch, f.key, f.dim, f.embedding) "
            "INSERT INTO engram_doc_vectors (repo, branch, key, dim, embedding) "
            f"SELECT m.repo, m.branch, m.key, m.dim, m.embedding FROM moved m, {ASYNC_COMMIT} "
            "ON CONFLICT (repo, branch, key) DO UPDATE SET dim = excluded.dim, embedding = excluded.embedding",
            (repo, batch),
        ).rowcount
    )


def lag(conn: Any, repo: str, branch: str) -> int:
    """Vectors of a branch not in the HNSW index yet (searches scan them exactly meanwhile)."""
    row = conn.execute(
        "SELECT count(*) FROM engram_doc_vectors_fresh WHERE repo = %s AND branch = %s", (repo, branch)
    ).fetchone()
    return int(row[0])


__all__ = ["ANALYZE_AFTER", "REIMPACT_DRIFT", "SMALL_WRITE", "Head", "Plan", "lag", "settle", "write"]
