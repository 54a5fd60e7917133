"""The PostgreSQL search engine: each branch head's index in tables, moved in the ref-move transaction.

``engram_docs`` holds one row per item of an indexed branch head: its encoded record, its value as
JSONB (filters), its analysed terms (a ``tsvector`` with a GIN index selects keyword candidates;
parallel arrays of terms and frequencies feed BM25), and its embedding (pgvector, with an HNSW index per
dimension). ``engram_index_terms`` keeps document frequencies and ``engram_index_heads`` the root
each branch's rows reflect, with the corpus size and length.

Maintenance: :meth:`PgEngine.apply` runs inside the transaction that moves a branch ref (see
:class:`~engram.backends.postgres.PostgresRefStore`), applying the diff between the root the rows
reflect and the new head, so the index and the branch never disagree. A branch is indexed from its
first search on.

Search: SQL selects the candidates (rows sharing a query term, and the nearest vectors) with their term
frequencies, lengths, cosines, confidences and ``updated_at``; BM25 (:func:`engram.index.keyword.bm25`)
and everything after it (:func:`engram.index.ranking.rank`: fusion, profiles, ``min_score``, ties,
paging, explain) run in Python, the same code as the in-process engine, so both return the same items
with the same scores. A filter arrives as a parameterized SQL pre-filter (a superset, built by the
memory API) plus the exact predicate, which runs on the records of the ranked rows.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from engram import codec
from engram.backends.postgres import PostgresDatabase, ensure_schema
from engram.embed.base import Embedder
from engram.errors import EmbedderError, InvalidInputError, StorageError
from engram.hashing import ChunkId
from engram.index import keyword
from engram.index import text as analysis
from engram.index.cache import QueryVectors, VectorCache, embed_through
from engram.index.docs import Doc, confidence_of, make_doc
from engram.index.pgschema import SEARCH_MIGRATIONS
from engram.index.ranking import Hit, Hits, Request, Signals, plan_mode, rank, select
from engram.index.vector import ANN_MIN
from engram.objects import Record, decode_record
from engram.repo import HEADS, Repository
from engram.tree import diff_trees, empty_tree

_log = logging.getLogger(__name__)

#: A filter pushed down to SQL: a boolean SQL expression over ``value`` and the parameters it names.
PreFilter = tuple[str, dict[str, Any]]


#: Rows written at once after which the tables are analysed (bulk loads change the right query plans).
ANALYZE_AFTER = 5_000
#: Rows scored by the vector index per query once a branch is large enough for HNSW.
ANN_CANDIDATES = 400
_SEP = "\x1f"  # between namespace labels in ns_path (labels cannot contain control characters)


def has_pgvector(db: PostgresDatabase) -> bool:
    """True when the server can create (or already has) the ``vector`` extension."""
    return bool(db.run("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"))


def _ns_path(namespace: Iterable[str]) -> str:
    return "".join(label + _SEP for label in namespace)


def _like_prefix(namespace: Iterable[str]) -> str:
    raw = _ns_path(namespace)
    return raw.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _lexeme(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsquery(terms: Iterable[str]) -> str:
    """A ``tsquery`` matching any of these lexemes."""
    return " | ".join(_lexeme(t) for t in dict.fromkeys(terms))


def _tsvector(terms: Iterable[str]) -> str:
    """A ``tsvector`` literal of these lexemes exactly (no parser, no stemming: they are engram's terms)."""
    return " ".join(_lexeme(t) for t in terms)


def _jsonb_text(value: dict[str, Any]) -> str:
    """An item value as JSON that PostgreSQL's JSONB accepts, for the filter pre-filter.

    JSONB cannot hold U+0000, which engram refuses on input, but a record written before that rule may
    have it: such strings lose it here, and object keys holding it are left out (no filter can name
    them), so one old record can never make a search fail. The record itself is untouched.
    """
    text = json.dumps(value)
    return text if "\\u0000" not in text else json.dumps(_without_nul(value))


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {k: _without_nul(v) for k, v in value.items() if "\x00" not in k}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def _vector_text(vector: npt.NDArray[np.float32]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PgEngine:
    """The PostgreSQL search indexes of one repository (one per indexed branch head) and their searches."""

    def __init__(
        self,
        db: PostgresDatabase,
        repo: Repository,
        *,
        embedder: Embedder | None,
        fields: tuple[str, ...],
        cache: VectorCache,
    ) -> None:
        self.db = db
        self.repo = repo
        self.embedder = embedder
        self.fields = fields
        self.cache = cache
        self.model = embedder.model_id if embedder is not None else ""
        self.config = json.dumps(list(fields))
        self._queries = QueryVectors()
        ensure_schema(db.url, SEARCH_MIGRATIONS)
        if embedder is not None:
            dim = int(embedder.dim)
            db.run(
                f"CREATE INDEX IF NOT EXISTS engram_doc_vectors_hnsw_{dim} ON engram_doc_vectors "
                f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) WHERE dim = {dim}"
            )

    # ------------------------------------------------------------------ maintenance

    def prepare(self, name: str, old: ChunkId | None, new: ChunkId | None) -> _Plan | None:
        """Before a branch moves (no lock held): the rows its index will need, if it is indexed."""
        head = self.db.run(
            "SELECT root, model, fields FROM engram_index_heads WHERE repo = %s AND branch = %s",
            (self.db.repo, name[len(HEADS) :]),
        )
        if not head or new is None or (head[0][1], head[0][2]) != (self.model, self.config):
            return None
        return self._plan(bytes(head[0][0]), self.repo.commit(new).tree)

    def apply(self, conn: Any, name: str, old: ChunkId | None, new: ChunkId | None, prepared: _Plan | None) -> None:
        """Inside the ref-move transaction: bring the moved branch's rows to its new head."""
        branch = name[len(HEADS) :]
        head = conn.execute(
            "SELECT root, model, fields FROM engram_index_heads WHERE repo = %s AND branch = %s FOR UPDATE",
            (self.db.repo, branch),
        ).fetchone()
        if head is None:
            return  # not indexed (yet): its first search builds it
        if new is None:
            self._drop(conn, branch)
            return
        if (head[1], head[2]) != (self.model, self.config):
            return  # another configuration's index: its owner re-syncs from the root it recorded
        root = self.repo.commit(new).tree
        if prepared is None or prepared.base != bytes(head[0]) or prepared.target != root:
            prepared = self._plan(bytes(head[0]), root)  # the index moved meanwhile: plan again
        self._write(conn, branch, prepared)

    def _drop(self, conn: Any, branch: str) -> None:
        for table in ("engram_docs", "engram_doc_vectors", "engram_index_terms", "engram_index_heads"):
            conn.execute(f"DELETE FROM {table} WHERE repo = %s AND branch = %s", (self.db.repo, branch))

    def _plan(self, base: ChunkId, target: ChunkId) -> _Plan:
        """What diff(base, target) does to the rows: keys to remove, documents (and vectors) to add."""
        plan = _Plan(base, target)
        if base != target:
            for change in diff_trees(self.repo.nodes, base, target):
                if change.old is not None:
                    plan.removed.append(change.key)
                if change.new is not None:
                    plan.added.append(make_doc(change.key, change.new, self.fields))
            plan.vectors, plan.error = self._vectors(plan.added)
        return plan

    def _write(self, conn: Any, branch: str, plan: _Plan, progress: Callable[[int], None] | None = None) -> None:
        """Apply a plan to the branch's rows, term frequencies and head, on ``conn``."""
        if plan.base == plan.target:
            return
        repo = self.db.repo
        df: Counter[str] = Counter()
        docs = length = 0
        if plan.removed:
            rows = conn.execute(
                "DELETE FROM engram_docs WHERE repo = %s AND branch = %s AND key = ANY(%s) "
                "RETURNING term_list, length, indexed",
                (repo, branch, plan.removed),
            ).fetchall()
            for term_list, size, indexed in rows:
                if indexed:
                    docs -= 1
                    length -= size
                    df.subtract(term_list)
            conn.execute(
                "DELETE FROM engram_doc_vectors WHERE repo = %s AND branch = %s AND key = ANY(%s)",
                (repo, branch, plan.removed),
            )
        batch: list[tuple[Any, ...]] = []
        vectors: list[tuple[Any, ...]] = []
        for doc, vector in zip(plan.added, plan.vectors, strict=True):
            counts = Counter(t for t in doc.terms if "\x00" not in t) if doc.indexed else Counter()
            if doc.indexed:
                docs += 1
                length += len(doc.terms)
                df.update(counts.keys())
            record = doc.record
            batch.append((
                repo, branch, doc.key, _ns_path(doc.namespace), doc.data, _jsonb_text(record.value),
                record.updated_at, record.expires_at, confidence_of(record.value), doc.indexed, sum(counts.values()),
                list(counts), [float(n) for n in counts.values()], _tsvector(counts),
            ))  # fmt: skip
            if vector is not None:
                vectors.append((repo, branch, doc.key, len(vector), _vector_text(vector)))
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY engram_docs (repo, branch, key, ns_path, record, value, updated, expires, confidence, indexed, "
                "length, term_list, tf_list, tsv) FROM STDIN"
            ) as copy,
        ):
            for done, row in enumerate(batch, start=1):
                copy.write_row(row)
                if progress is not None and done % 1000 == 0:
                    progress(1000)
        if vectors:
            with (
                conn.cursor() as cur,
                cur.copy("COPY engram_doc_vectors (repo, branch, key, dim, embedding) FROM STDIN") as vcopy,
            ):
                for vrow in vectors:
                    vcopy.write_row(vrow)
        if progress is not None and len(batch) % 1000:
            progress(len(batch) % 1000)
        if len(batch) >= ANALYZE_AFTER:  # a bulk load: refresh the planner's statistics before the next search
            conn.execute("ANALYZE engram_docs")
            conn.execute("ANALYZE engram_doc_vectors")
        changed = {t: d for t, d in df.items() if d}
        if changed:
            conn.execute(
                "INSERT INTO engram_index_terms (repo, branch, term, df) SELECT %s, %s, t, d "
                "FROM unnest(%s::text[], %s::bigint[]) AS u(t, d) ON CONFLICT (repo, branch, term) "
                "DO UPDATE SET df = engram_index_terms.df + excluded.df",
                (repo, branch, list(changed), list(changed.values())),
            )
            conn.execute(
                "DELETE FROM engram_index_terms WHERE repo = %s AND branch = %s AND term = ANY(%s) AND df <= 0",
                (repo, branch, list(changed)),
            )
        conn.execute(
            "UPDATE engram_index_heads SET root = %s, docs = docs + %s, length = length + %s, vector_error = %s "
            "WHERE repo = %s AND branch = %s",
            (plan.target, docs, length, plan.error, repo, branch),
        )

    def _vectors(self, docs: list[Doc]) -> tuple[list[npt.NDArray[np.float32] | None], str | None]:
        """Embeddings of the indexed documents (through the vector cache); None rows and the reason when
        the embedder fails (the index then records it and hybrid searches degrade to keyword)."""
        out: list[npt.NDArray[np.float32] | None] = [None] * len(docs)
        wanted = [i for i, d in enumerate(docs) if d.indexed]
        if self.embedder is None or not wanted:
            return out, None
        try:
            vectors = embed_through(self.embedder, self.cache, [docs[i].text for i in wanted])
        except EmbedderError as exc:
            return out, str(exc)
        for i, vector in zip(wanted, vectors, strict=True):
            out[i] = vector
        return out, None

    def ensure(self, branch: str, root: ChunkId) -> bool:
        """Make the branch's rows reflect ``root`` (its head); False if another configuration owns them
        or the branch moved on meanwhile (the caller then searches in process)."""
        repo = self.db.repo
        head = self.db.run(
            "SELECT root, model, fields FROM engram_index_heads WHERE repo = %s AND branch = %s", (repo, branch)
        )
        if head and (head[0][1], head[0][2]) != (self.model, self.config):
            return False
        if head and bytes(head[0][0]) == root:
            return True
        start = bytes(head[0][0]) if head else empty_tree(self.repo.nodes)
        current = self.repo.refs.get(HEADS + branch)
        target = self.repo.commit(current).tree if current is not None else root
        plan = self._plan(start, target)  # read and embed before holding a connection and a row lock
        with self.db.connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO engram_index_heads (repo, branch, root, model, fields) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (repo, branch, start, self.model, self.config),
            )
            locked = conn.execute(
                "SELECT root, model, fields FROM engram_index_heads WHERE repo = %s AND branch = %s FOR UPDATE",
                (repo, branch),
            ).fetchone()
            if locked is None or (locked[1], locked[2]) != (self.model, self.config):
                return False  # the branch was deleted, or re-indexed with another configuration, meanwhile
            if bytes(locked[0]) != plan.base:
                plan = self._plan(bytes(locked[0]), target)  # a writer moved the index meanwhile
            self._write(conn, branch, plan)
        return target == root

    def rebuild(self, branch: str, root: ChunkId, progress: Callable[[int], None] | None = None) -> int:
        """Drop the branch's rows and index ``root`` again (``engram reindex``); returns the item count."""
        empty = empty_tree(self.repo.nodes)
        plan = self._plan(empty, root)
        with self.db.connection() as conn, conn.transaction():
            self._drop(conn, branch)
            conn.execute(
                "INSERT INTO engram_index_heads (repo, branch, root, model, fields) VALUES (%s, %s, %s, %s, %s)",
                (self.db.repo, branch, empty, self.model, self.config),
            )
            self._write(conn, branch, plan, progress)
        rows = self.db.run("SELECT count(*) FROM engram_docs WHERE repo = %s AND branch = %s", (self.db.repo, branch))
        return int(rows[0][0])

    # ------------------------------------------------------------------ search

    def query(
        self, branch: str, root: ChunkId, request: Request, now: int, prefilter: PreFilter | None = None
    ) -> Hits | None:
        """Run a search at the branch head ``root`` in PostgreSQL; None when it must run in process."""
        try:
            if not self.ensure(branch, root):
                return None
        except (StorageError, InvalidInputError) as exc:  # down, or refusing data the store holds
            _log.warning("searching %s in process: the PostgreSQL index is unavailable (%s)", branch, exc)
            return None
        return _Query(self, branch, request, prefilter, now).run()

    def query_vector(self, text: str) -> npt.NDArray[np.float32]:
        """A query's embedding (the last 1,024 distinct queries are remembered)."""
        if self.embedder is None:
            raise EmbedderError("no embedder is configured for this store")
        return self._queries.get(self.embedder, text)


@dataclass(slots=True)
class _Plan:
    """The change from the rows of root ``base`` to those of ``target``."""

    base: ChunkId
    target: ChunkId
    removed: list[bytes] = field(default_factory=list)
    added: list[Doc] = field(default_factory=list)
    vectors: list[npt.NDArray[np.float32] | None] = field(default_factory=list)
    error: str | None = None


class _Query:
    """One search: candidates and their raw signals from SQL, ranked by the shared ranking function."""

    def __init__(self, engine: PgEngine, branch: str, request: Request, prefilter: PreFilter | None, now: int) -> None:
        self.s = engine
        self.branch = branch
        self.request = request
        self.now = now
        self.params: dict[str, Any] = {"repo": engine.db.repo, "branch": branch, "now": now}
        self.where = ["repo = %(repo)s", "branch = %(branch)s", "(expires IS NULL OR expires > %(now)s)"]
        if request.prefix:
            self.where.append("ns_path LIKE %(prefix)s ESCAPE '\\'")
            self.params["prefix"] = _like_prefix(request.prefix)
        if prefilter is not None:
            self.where.append(prefilter[0])
            self.params.update(prefilter[1])
        self.records: dict[bytes, Record] = {}

    def run(self) -> Hits:
        if self.request.text is None:
            return self._listing()
        return self._ranked()

    def _listing(self) -> Hits:
        """Newest first, by SQL; the exact filter on the fetched rows, fetching more while it rejects some."""
        request = self.request
        fetch = max(request.offset + request.limit, 1) * (1 if request.accept is None else 4)
        while True:
            rows = self._fetch(
                f"SELECT key, record FROM engram_docs WHERE {' AND '.join(self.where)} "
                f"ORDER BY updated DESC, key LIMIT %(n)s",
                {**self.params, "n": fetch},
            )
            keys = [bytes(row[0]) for row in rows]
            self.records.update((key, decode_record(bytes(row[1]))) for key, row in zip(keys, rows, strict=True))
            chosen = select(iter(range(len(keys))), request.offset, request.limit, self._admit(keys))
            if len(chosen) >= request.limit or len(rows) < fetch:
                return Hits([self._hit(keys[i]) for i in chosen], "list", request.mode or "list")
            fetch *= 4

    def _ranked(self) -> Hits:
        s, request = self.s, self.request
        text = request.text or ""
        head = s.db.run(
            "SELECT docs, length, vector_error FROM engram_index_heads WHERE repo = %s AND branch = %s",
            (s.db.repo, self.branch),
        )[0]
        total, length = int(head[0]), int(head[1])
        plan = plan_mode(
            request.mode, has_embedder=s.embedder is not None, vector_error=head[2], embed=lambda: s.query_vector(text)
        )
        terms = list(dict.fromkeys(analysis.terms(text))) if plan.mode != "semantic" else []
        cand: list[str] = []
        if terms:
            self.params["tsq"] = _tsquery(terms)
            cand.append("tsv @@ %(tsq)s::tsquery")
        vectors, cos = "", "0::float8"
        if plan.vector is not None:
            self.params["q"] = _vector_text(plan.vector)
            cos = "coalesce(-(v.embedding <#> %(q)s::vector), 0::float8)"
            if total >= ANN_MIN:  # the vector signal of the HNSW index's nearest rows only (others score 0)
                self.params["near"] = self._nearest(plan.vector)
                vectors = (
                    "LEFT JOIN (SELECT repo, branch, key, embedding FROM engram_doc_vectors WHERE repo = %(repo)s "
                    "AND branch = %(branch)s AND key = ANY(%(near)s)) v USING (repo, branch, key) "
                )
                cand.append("key = ANY(%(near)s)")
            else:
                vectors = "LEFT JOIN engram_doc_vectors v USING (repo, branch, key) "
                cand = ["TRUE"]
        if not cand:
            return Hits([], plan.mode, plan.requested, plan.degraded)
        tfs = "".join(f", coalesce(tf_list[array_position(term_list, %(t{i})s)], 0)" for i in range(len(terms)))
        self.params.update({f"t{i}": term for i, term in enumerate(terms)})
        rows = self._fetch(
            f"SELECT key, updated, confidence, length, ({cos})::float8{tfs} FROM engram_docs {vectors}"
            f"WHERE {' AND '.join(self.where)} AND indexed AND ({' OR '.join(cand)})",
            self.params,
        )
        keys = [bytes(row[0]) for row in rows]
        columns = list(zip(*rows, strict=True)) if rows else [()] * (5 + len(terms))
        lengths = np.asarray(columns[3], dtype=np.float32)
        stats = self._stats(terms, total, length)
        bm25 = None
        if plan.mode != "semantic":  # the in-process index's arithmetic: float32, term by term, in query order
            bm25 = np.zeros(len(rows), dtype=np.float32)
            for i, term in enumerate(terms):
                tf = np.asarray(columns[5 + i], dtype=np.float32)
                has = tf > 0
                bm25[has] += keyword.bm25(tf[has], lengths[has], stats.idf(term), stats.avgdl)
        signals = Signals(
            np.ones(len(rows), dtype=bool),
            np.asarray(columns[1], dtype=np.int64),
            np.asarray(columns[2], dtype=np.float32),
            bm25=bm25,
            cosine=np.asarray(columns[4], dtype=np.float64) if plan.vector is not None else None,
            ideal=keyword.ideal(stats.idf(term) for term in terms),
        )
        model = s.model if plan.vector is not None else None
        ranking = rank(signals, plan.mode, request.profile, self.now, request.min_score, embedder=model)
        order = ranking.order(keys.__getitem__, request.offset + request.limit)
        chosen = select(order, request.offset, request.limit, self._admit(keys))
        self._load([keys[i] for i in chosen])
        hits = []
        for i in chosen:
            found = self._hit(keys[i])
            explained = ranking.explain(i) if request.explain else None
            hits.append(Hit(found.namespace, found.key, found.record, ranking.score(i), explained))
        return Hits(hits, plan.mode, plan.requested, plan.degraded)

    def _stats(self, terms: list[str], total: int, length: int) -> keyword.Stats:
        """The corpus statistics of the query's terms (document count, total length, their frequencies)."""
        stats = keyword.Stats(total, length)
        if terms:
            rows = self.s.db.run(
                "SELECT term, df FROM engram_index_terms WHERE repo = %s AND branch = %s AND term = ANY(%s)",
                (self.s.db.repo, self.branch, terms),
            )
            stats.df.update({term: int(n) for term, n in rows})
        return stats

    def _admit(self, keys: list[bytes]) -> Callable[[list[int]], list[bool]] | None:
        """The exact filter over positions of ``keys``, loading their records a batch at a time."""
        accept = self.request.accept
        if accept is None:
            return None

        def admit(batch: list[int]) -> list[bool]:
            self._load([keys[i] for i in batch])
            return [accept(self.records[keys[i]].value) for i in batch]

        return admit

    def _load(self, keys: list[bytes]) -> None:
        """Fetch and decode the records of these rows (those not fetched yet)."""
        missing = [key for key in keys if key not in self.records]
        if missing:
            rows = self.s.db.run(
                "SELECT key, record FROM engram_docs WHERE repo = %s AND branch = %s AND key = ANY(%s)",
                (self.s.db.repo, self.branch, missing),
            )
            self.records.update((bytes(k), decode_record(bytes(r))) for k, r in rows)

    def _hit(self, key: bytes) -> Hit:
        namespace, item_key = codec.decode_key(key)
        return Hit(namespace, item_key, self.records[key])

    def _nearest(self, qvec: npt.NDArray[np.float32]) -> list[bytes]:
        dim = len(qvec)
        want = max(ANN_CANDIDATES, 4 * (self.request.offset + self.request.limit))
        with self.s.db.connection() as conn, conn.transaction():
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            conn.execute(f"SET LOCAL hnsw.ef_search = {max(want, 40)}")
            rows = conn.execute(
                f"SELECT v.key FROM engram_doc_vectors v WHERE v.repo = %(repo)s AND v.branch = %(branch)s "
                f"AND v.dim = {dim} AND EXISTS (SELECT 1 FROM engram_docs WHERE {' AND '.join(self.where)} "
                f"AND indexed AND engram_docs.key = v.key) "
                f"ORDER BY v.embedding::vector({dim}) <=> %(q)s::vector({dim}) LIMIT {want}",
                self.params,
            ).fetchall()
        return [bytes(r[0]) for r in rows]

    def _fetch(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Rows of the search query, with room to rank every candidate in memory (no temp files)."""
        with self.s.db.connection() as conn, conn.transaction():
            conn.execute("SET LOCAL work_mem = '64MB'")
            return list(conn.execute(sql, params, binary=True).fetchall())


__all__ = ["ANN_CANDIDATES", "SEARCH_MIGRATIONS", "PgEngine", "PreFilter", "has_pgvector"]
