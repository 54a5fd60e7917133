"""Search on PostgreSQL: each branch head's index in tables, moved in the ref-move transaction.

``engram_docs`` holds one row per item of an indexed branch head: its encoded record, its value as
JSONB (filters), its analysed terms (a ``tsvector`` with a GIN index selects keyword candidates;
parallel arrays of terms and frequencies feed BM25), and its embedding (pgvector, with an HNSW index per
dimension). ``engram_index_terms`` keeps document frequencies and ``engram_index_heads`` the root
each branch's rows reflect, with the corpus size and length.

Maintenance: :meth:`PgSearch.on_move` runs inside the transaction that moves a branch ref (see
:class:`~engram.backends.postgres.PostgresRefStore`), applying the diff between the root the rows
reflect and the new head, so the index and the branch never disagree. A branch is indexed from its
first search on.

Scoring mirrors :mod:`engram.store.search` formula for formula (BM25 with the same analysis and
constants, min-max fusion over the same candidates, the same profiles), so a search returns what
the in-process engine returns; filters become a parameterized SQL/JSON path pre-filter that is a
superset of the MongoDB semantics, and the exact filter then runs on the ranked rows.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from engram import codec
from engram.backends.postgres import Migration, PostgresDatabase, ensure_schema
from engram.embed.base import Embedder
from engram.errors import EmbedderError, InvalidInputError, StorageError
from engram.hashing import ChunkId
from engram.index import text as analysis
from engram.index.cache import QueryVectors, VectorCache, embed_through
from engram.index.docs import Doc, confidence_of, make_doc
from engram.index.keyword import K1, B
from engram.index.vector import ANN_MIN
from engram.objects import decode_record
from engram.repo import HEADS, Repository
from engram.store.filters import And, Compare, Filter, Nor, Not, Or, compile_filter, matches
from engram.store.item import SearchItem, SearchResults
from engram.store.ops import SearchOp
from engram.store.ranking import get_profile
from engram.store.search import KEYWORD_WEIGHT, check, search_item
from engram.tree import diff_trees, empty_tree

_log = logging.getLogger(__name__)

SEARCH_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        101,
        "search: documents with tsvector, JSONB and pgvector embeddings per indexed branch head",
        """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE engram_index_heads (
            repo text NOT NULL,
            branch text NOT NULL,
            root bytea NOT NULL,
            model text NOT NULL,
            fields text NOT NULL,
            docs bigint NOT NULL DEFAULT 0,
            length bigint NOT NULL DEFAULT 0,
            vector_error text,
            PRIMARY KEY (repo, branch)
        );
        CREATE TABLE engram_docs (
            repo text NOT NULL,
            branch text NOT NULL,
            key bytea NOT NULL,
            ns_path text NOT NULL,
            record bytea NOT NULL,
            value jsonb NOT NULL,
            updated bigint NOT NULL,
            expires bigint,
            confidence real NOT NULL,
            indexed boolean NOT NULL,
            length integer NOT NULL,
            terms jsonb NOT NULL,
            tsv tsvector NOT NULL,
            dim integer,
            embedding vector,
            PRIMARY KEY (repo, branch, key)
        );
        CREATE INDEX engram_docs_tsv ON engram_docs USING gin (tsv);
        CREATE INDEX engram_docs_ns ON engram_docs (repo, branch, ns_path text_pattern_ops);
        CREATE TABLE engram_index_terms (
            repo text NOT NULL,
            branch text NOT NULL,
            term text NOT NULL,
            df bigint NOT NULL,
            PRIMARY KEY (repo, branch, term)
        );
        """,
    ),
    Migration(
        102,
        "search: keep embeddings inline (a TOAST fetch per row made exact scoring 10x slower)",
        "ALTER TABLE engram_docs ALTER COLUMN embedding SET STORAGE MAIN;",
    ),
    Migration(
        103,
        "search: term frequencies as parallel arrays (4x faster to read per row than a JSONB map)",
        """
        ALTER TABLE engram_docs ADD COLUMN term_list text[], ADD COLUMN tf_list real[];
        UPDATE engram_docs SET term_list = ARRAY(SELECT jsonb_object_keys(terms)),
            tf_list = ARRAY(SELECT (terms->>k)::real FROM jsonb_object_keys(terms) AS k);
        ALTER TABLE engram_docs ALTER COLUMN term_list SET NOT NULL, ALTER COLUMN tf_list SET NOT NULL,
            DROP COLUMN terms;
        """,
    ),
    Migration(
        104,
        "search: no compression or out-of-line storage for rows under 8 KB (scoring reads every column per row)",
        "ALTER TABLE engram_docs SET (toast_tuple_target = 8160);",
    ),
    Migration(
        105,
        "search: embeddings in their own table, so keyword scoring reads narrow rows",
        """
        CREATE TABLE engram_doc_vectors (
            repo text NOT NULL,
            branch text NOT NULL,
            key bytea NOT NULL,
            dim integer NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (repo, branch, key)
        );
        ALTER TABLE engram_doc_vectors ALTER COLUMN embedding SET STORAGE MAIN;
        INSERT INTO engram_doc_vectors (repo, branch, key, dim, embedding)
            SELECT repo, branch, key, dim, embedding FROM engram_docs WHERE embedding IS NOT NULL;
        ALTER TABLE engram_docs DROP COLUMN embedding, DROP COLUMN dim;
        """,
    ),
)

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


class PgSearch:
    """The PostgreSQL search indexes of one repository (one per indexed branch head)."""

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

    def search(self, branch: str, root: ChunkId, request: SearchOp, now: int) -> SearchResults | None:
        """Run a search at the branch head ``root`` in PostgreSQL; None when it must run in process."""
        check(request)
        compiled = compile_filter(request.filter)
        try:
            if not self.ensure(branch, root):
                return None
        except (StorageError, InvalidInputError) as exc:  # down, or refusing data the store holds
            _log.warning("searching %s in process: the PostgreSQL index is unavailable (%s)", branch, exc)
            return None
        return _Query(self, branch, request, compiled, now).run()

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
    """One search: SQL built from the request, rows ranked in PostgreSQL, the exact filter applied here."""

    def __init__(self, search: PgSearch, branch: str, request: SearchOp, compiled: Filter | None, now: int) -> None:
        self.s = search
        self.branch = branch
        self.request = request
        self.compiled = compiled
        self.now = now
        self.params: dict[str, Any] = {"repo": search.db.repo, "branch": branch, "now": now}
        self.where = ["repo = %(repo)s", "branch = %(branch)s", "(expires IS NULL OR expires > %(now)s)"]
        if request.namespace_prefix:
            self.where.append("ns_path LIKE %(prefix)s ESCAPE '\\'")
            self.params["prefix"] = _like_prefix(request.namespace_prefix)
        self.filter_sql = _FilterSql(self.params).build(compiled) if compiled is not None else "TRUE"

    def run(self) -> SearchResults:
        request = self.request
        if request.query is None:
            sql = (
                f"SELECT key, record, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM engram_docs "
                f"WHERE {' AND '.join(self.where)} AND {self.filter_sql} ORDER BY updated DESC, key LIMIT %(n)s"
            )
            return SearchResults(self._page(sql, None), "list", request.mode or "list")
        return self._ranked()

    def _ranked(self) -> SearchResults:
        s, request = self.s, self.request
        requested: str = request.mode or ("hybrid" if s.embedder is not None else "keyword")
        mode, degraded = requested, None
        head = s.db.run(
            "SELECT docs, length, vector_error FROM engram_index_heads WHERE repo = %s AND branch = %s",
            (s.db.repo, self.branch),
        )[0]
        total, length, vector_error = int(head[0]), int(head[1]), head[2]
        qvec: npt.NDArray[np.float32] | None = None
        if mode in ("hybrid", "semantic"):
            try:
                if vector_error is not None:
                    raise EmbedderError(vector_error)
                qvec = s.query_vector(request.query or "")
            except EmbedderError as exc:
                if mode == "semantic":
                    raise
                mode, degraded = "keyword", f"embedder unavailable, ran keyword search instead: {exc}"
        terms = list(dict.fromkeys(analysis.terms(request.query or "")))
        tfs, kw = self._bm25(terms, total, length) if mode != "semantic" else ("", "0::float8")
        cos = "0::float8"
        cand = []
        if mode != "semantic" and terms:
            self.params["tsq"] = _tsquery(terms)
            cand.append("tsv @@ %(tsq)s::tsquery")
        vectors = ""
        if qvec is not None:
            self.params["q"] = _vector_text(qvec)
            cos = "coalesce(-(v.embedding <#> %(q)s::vector), 0::float8)"
            if total >= ANN_MIN:  # the vector signal of the HNSW index's nearest rows only (others score 0)
                self.params["near"] = self._nearest(qvec)
                vectors = (
                    "LEFT JOIN (SELECT repo, branch, key, embedding FROM engram_doc_vectors WHERE repo = %(repo)s "
                    "AND branch = %(branch)s AND key = ANY(%(near)s)) v USING (repo, branch, key) "
                )
                cand.append("key = ANY(%(near)s)")
            else:
                vectors = "LEFT JOIN engram_doc_vectors v USING (repo, branch, key) "
                cand = ["TRUE"]
        if not cand:
            return SearchResults([], mode, requested, degraded)
        positive = {"keyword": "kw > 0", "semantic": "cos > 0"}.get(mode, "(kw > 0 OR cos > 0)")
        if mode == "keyword":
            sim = "kw / nullif(kwhi, 0)"
        elif mode == "semantic":
            sim = "least(greatest(cos, 0), 1)"
        else:
            sim = f"{KEYWORD_WEIGHT} * {_min_max('kw', 'kwlo', 'kwhi')} + {1 - KEYWORD_WEIGHT} * " + _min_max(
                "cos", "cslo", "cshi"
            )
        profile = get_profile(request.profile)
        self.params.update(ws=profile.similarity, wc=profile.confidence, wr=profile.recency, hl=profile.half_life_hours)
        # The exponent is capped: 0.5 ** 1000 is 0 for ranking, and PostgreSQL raises "underflow" where a
        # float would reach 0 (an item 1,075 half-lives old made every search of its branch fail).
        recency = (
            "power(0.5::float8, least(greatest(%(now)s - updated, 0)::float8 / 3600000.0::float8 / %(hl)s::float8, "
            "1000.0::float8))"
        )
        min_score = ""
        if request.min_score is not None:
            self.params["min_score"] = request.min_score
            min_score = "AND final >= %(min_score)s::float8 "
        # Scores over narrow rows, computed once (a materialized CTE); records are fetched for the page only.
        # Equal scores: newest first, then by tree key (namespace, then item key), as the in-process engine.
        sql = (
            f"WITH c AS MATERIALIZED (SELECT key, updated, confidence::float8 AS confidence, length::float8 AS len"
            f"{tfs}, ({cos})::float8 AS cos, ({self.filter_sql}) AS ok FROM engram_docs {vectors}"
            f"WHERE {' AND '.join(self.where)} AND indexed AND ({' OR '.join(cand)})), "
            f"k AS (SELECT key, updated, confidence, cos, ok, ({kw})::float8 AS kw FROM c), "
            f"w AS (SELECT *, min(kw) OVER () AS kwlo, max(kw) OVER () AS kwhi, min(cos) OVER () AS cslo, "
            f"max(cos) OVER () AS cshi FROM k WHERE {positive}), "
            f"s AS (SELECT *, coalesce({sim}, 0) AS sim FROM w), "
            f"r AS (SELECT *, %(ws)s::float8 * sim + %(wc)s::float8 * confidence + %(wr)s::float8 * rec AS final "
            f"FROM (SELECT *, {recency} AS rec FROM s) x), "
            f"top AS (SELECT * FROM r WHERE ok {min_score}ORDER BY final DESC, updated DESC, key LIMIT %(n)s) "
            f"SELECT top.key, d.record, kw, cos, kwlo, kwhi, cslo, cshi, final, rec FROM top "
            f"JOIN engram_docs d ON d.repo = %(repo)s AND d.branch = %(branch)s AND d.key = top.key "
            f"ORDER BY final DESC, top.updated DESC, top.key"
        )

        def explain(row: tuple[Any, ...]) -> dict[str, Any]:
            _, _, kwv, cosv, kwlo, kwhi, cslo, cshi, _, rec = row
            kw_norm = kwv / kwhi if kwhi else kwv
            cos_norm = None
            if mode == "keyword":
                similarity = kw_norm
            elif mode == "semantic":
                similarity = min(max(cosv, 0.0), 1.0)
            else:
                kw_norm, cos_norm = _min_max_value(kwv, kwlo, kwhi), _min_max_value(cosv, cslo, cshi)
                similarity = KEYWORD_WEIGHT * kw_norm + (1 - KEYWORD_WEIGHT) * cos_norm
            record = decode_record(bytes(row[1]))
            out: dict[str, Any] = {
                "mode": mode,
                "profile": profile.name,
                "weights": {"similarity": profile.similarity, "confidence": profile.confidence,
                            "recency": profile.recency},
                "similarity": float(similarity),
                "confidence": confidence_of(record.value),
                "recency": float(rec),
            }  # fmt: skip
            if mode != "semantic":
                out["bm25"], out["bm25_normalized"] = float(kwv), float(kw_norm)
            if qvec is not None:
                out["cosine"] = float(cosv)
                if cos_norm is not None:
                    out["cosine_normalized"] = float(cos_norm)
                out["embedder"] = s.model
            if mode == "hybrid":
                out["keyword_weight"] = KEYWORD_WEIGHT
            return out

        items = self._page(sql, explain if request.explain else None, scored=True)
        return SearchResults(items, mode, requested, degraded)

    def _bm25(self, terms: list[str], total: int, length: int) -> tuple[str, str]:
        """The term-frequency columns to select (``, tf0, tf1 ...``) and the BM25 expression over them."""
        if not terms:
            return "", "0::float8"
        rows = self.s.db.run(
            "SELECT term, df FROM engram_index_terms WHERE repo = %s AND branch = %s AND term = ANY(%s)",
            (self.s.db.repo, self.branch, terms),
        )
        df = {term: int(n) for term, n in rows}
        avgdl = length / total if total else 1.0
        parts, columns = [], []
        for i, term in enumerate(terms):
            idf = math.log(1.0 + (total - df.get(term, 0) + 0.5) / (df.get(term, 0) + 0.5))
            self.params[f"t{i}"], self.params[f"idf{i}"] = term, idf
            columns.append(f", coalesce(tf_list[array_position(term_list, %(t{i})s)], 0)::float8 AS tf{i}")
            parts.append(
                f"%(idf{i})s::float8 * tf{i} * {K1 + 1!r}::float8 / "
                f"(tf{i} + {K1!r}::float8 * ({1 - B!r}::float8 + {B!r}::float8 * len / {avgdl!r}::float8))"
            )
        return "".join(columns), " + ".join(parts)

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
            return list(conn.execute(sql, params).fetchall())

    def _page(
        self, sql: str, explain: Callable[[tuple[Any, ...]], dict[str, Any]] | None, *, scored: bool = False
    ) -> list[SearchItem]:
        """Rows in rank order through the exact filter, fetching more when the filter rejects some."""
        request = self.request
        want = request.offset + request.limit
        fetch = max(want, 1) * (1 if self.compiled is None else 4)
        while True:
            rows = self._fetch(sql, {**self.params, "n": fetch})
            out: list[SearchItem] = []
            skipped = 0
            for row in rows:
                record = decode_record(bytes(row[1]))
                if self.compiled is not None and not matches(self.compiled, record.value):
                    continue
                if skipped < request.offset:
                    skipped += 1
                    continue
                if len(out) >= request.limit:
                    break
                ns, key = codec.decode_key(bytes(row[0]))
                score = float(row[8]) if scored else None
                out.append(search_item(ns, key, record, score, explain(row) if explain else None))
            if len(out) >= request.limit or len(rows) < fetch:
                return out
            fetch *= 4


def _min_max(value: str, low: str, high: str) -> str:
    """SQL for :func:`engram.store.search._min_max` of one row (the window gives low and high)."""
    return (
        f"(CASE WHEN {high} <= {low} THEN (CASE WHEN {high} > 0 AND {value} > 0 THEN 1.0 ELSE 0.0 END) "
        f"ELSE least(greatest(({value} - {low}) / ({high} - {low}), 0), 1) END)"
    )


def _min_max_value(value: float, low: float, high: float) -> float:
    if high <= low:
        return 1.0 if high > 0 and value > 0 else 0.0
    return min(max((value - low) / (high - low), 0.0), 1.0)


class _FilterSql:
    """A compiled filter as a parameterized SQL pre-filter on ``value`` (SQL/JSON path, lax mode).

    Every clause is a superset of the MongoDB semantics (the exact filter runs on the ranked rows
    afterwards); negations, sizes, string ranges and numeric path labels, whose SQL/JSON meaning
    differs, become TRUE, and so do numbers beyond +-2**53 (JSONB compares the decimal a float is
    written as, Python the float's exact binary value: past 2**53 an integer can fall between the two).
    ``$regex`` is TRUE too, never PostgreSQL's backtracking regular expressions: RE2 decides it in
    Python, in time linear in the text.
    """

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.n = 0

    def build(self, node: Filter) -> str:
        if isinstance(node, And):
            return "(" + " AND ".join([self.build(p) for p in node.parts] or ["TRUE"]) + ")"
        if isinstance(node, Or):
            return "(" + " OR ".join(self.build(p) for p in node.parts) + ")"
        if isinstance(node, Nor | Not):
            return "TRUE"
        return self._compare(node)

    def _compare(self, node: Compare) -> str:
        if any(label.isdigit() for label in node.path):
            return "TRUE"
        path = "$" + "".join('."' + label.replace("\\", "\\\\").replace('"', '\\"') + '"' for label in node.path)
        op, arg = node.op, node.arg
        if op == "$exists":
            return self._exists(path, None) if arg else "TRUE"
        if op == "$eq":
            return self._eq(path, arg)
        if op in ("$in", "$all"):
            parts = [self._eq(path, a) for a in arg]
            if not parts:
                return "FALSE" if op == "$in" else "TRUE"
            return "(" + (" OR " if op == "$in" else " AND ").join(parts) + ")"
        if op in ("$gt", "$gte", "$lt", "$lte") and _number(arg):
            symbol = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
            return self._exists(path, f"@ {symbol} $v", arg)
        if op == "$between" and _number(arg[0]) and _number(arg[1]):
            return self._exists(path, "@ >= $v && @ <= $w", arg[0], arg[1])
        return "TRUE"

    def _eq(self, path: str, arg: Any) -> str:
        if arg is None or isinstance(arg, list | dict) or (_numeric(arg) and not _number(arg)):
            return "TRUE"
        return self._exists(path, "@ == $v", arg)

    def _exists(self, path: str, test: str | None, v: Any = None, w: Any = None) -> str:
        self.n += 1
        key = f"fp{self.n}"
        self.params[key] = path + (f" ? ({test})" if test else "")
        self.params[key + "v"] = json.dumps({"v": v, "w": w}, allow_nan=False)
        return f"jsonb_path_exists(value, %({key})s::jsonpath, %({key}v)s::jsonb)"


#: Numbers this far from zero compare the same in JSONB and in Python (beyond, the clause is TRUE).
EXACT_LIMIT = 2**53


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    """A JSON number that JSONB compares as Python does: finite (JSON cannot carry infinities) and
    within +-2**53 (an integer of any size is fine for both, but not next to a float that large)."""
    return _numeric(value) and -EXACT_LIMIT < value < EXACT_LIMIT


__all__ = ["SEARCH_MIGRATIONS", "PgSearch", "has_pgvector"]
