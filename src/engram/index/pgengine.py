"""The PostgreSQL search engine: each branch head's index in tables, moved in the ref-move transaction.

``engram_docs`` holds one row per item of an indexed branch head: its encoded record, its value as
JSONB (filters), its analysed terms as parallel arrays of terms and frequencies (BM25), its length,
confidence and ``updated_at``. ``engram_postings`` holds one row per (term, item) with the term's
*impact*: BM25's term weight without idf at the branch's reference average length, so a query reads
each of its terms' postings best first and stops early (:mod:`engram.index.pgquery`).
``engram_doc_vectors`` holds the embeddings (pgvector, with an HNSW index per dimension),
``engram_index_terms`` the document frequencies and ``engram_index_heads`` the root each branch's
rows reflect, with the corpus size and length.

Maintenance: :meth:`PgEngine.apply` runs inside the transaction that moves a branch ref (see
:class:`~engram.backends.postgres.PostgresRefStore`), applying the diff between the root the rows
reflect and the new head, so the index and the branch never disagree. The documents and their
embeddings are prepared before (:meth:`PgEngine.prepare`, no lock held). A branch is indexed from its
first search on, or from :meth:`PgEngine.ensure` (``Memory.update_index``).

Search: :class:`~engram.index.pgquery.PgQuery` reads candidates and their raw signals in SQL; BM25
(:func:`engram.index.keyword.bm25`) and everything after it (:func:`engram.index.ranking.rank`) run in
Python, the same code as the in-process engine, so both give an item the same score. A search in the
past (:meth:`PgEngine.past`) scores the head rows minus the items that differ, plus their past versions.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.backends.postgres import PostgresDatabase, ensure_schema
from engram.embed.base import Embedder
from engram.errors import EmbedderError, InvalidInputError, StorageError
from engram.hashing import ChunkId
from engram.index.cache import (
    EMBED_BATCH,
    PostgresVectorCache,
    QueryVectors,
    VectorCache,
    as_array,
    as_blobs,
    embed_through,
    text_hash,
)
from engram.index.corpus import CorpusStats, query_terms
from engram.index.doclist import Doc, make_doc
from engram.index.pgpast import PastOverlay, term_stats
from engram.index.pgquery import PgQuery
from engram.index.pgrows import counts_of, vector_text
from engram.index.pgschema import SEARCH_MIGRATIONS
from engram.index.pgseam import PreFilter
from engram.index.pgsettle import Settler
from engram.index.pgwrite import SMALL_WRITE, Head, Plan, lag, write
from engram.index.ranking import Hits, Request
from engram.index.vector import stored
from engram.repo import HEADS, Repository
from engram.tree import diff_trees, empty_tree

_log = logging.getLogger(__name__)


#: Below this many items a branch's vectors are scanned exactly; from it on, through the HNSW index.
EXACT_BELOW = 5_000
#: Default of :attr:`PgEngine.scope_exact`.
SCOPE_EXACT = 10_000
#: The HNSW index holds the vectors of every repository and branch of the database: a branch that is a small
#: share of it (under 1/SHARED_SHARE) pays an iterative scan through the others' vectors, so up to
#: SHARED_EXACT items it is scanned exactly instead.
SHARED_SHARE = 5
SHARED_EXACT = 30_000
#: A search in the past scores the items that differ from the head as an overlay while at most this many
#: (or this share of the branch) differ; beyond, it runs in process on an index built for that version.
OVERLAY_MIN = 2_000
OVERLAY_SHARE = 0.05
#: Overlays kept per engine (keyed by head root and past root).
OVERLAYS = 8

#: A searchable row without a vector in either vector table (over ``engram_docs d``).
_NO_VECTOR = (
    "NOT EXISTS (SELECT 1 FROM engram_doc_vectors v WHERE v.repo = d.repo AND v.branch = d.branch AND v.key = d.key) "
    "AND NOT EXISTS (SELECT 1 FROM engram_doc_vectors_fresh v WHERE v.repo = d.repo AND v.branch = d.branch "
    "AND v.key = d.key)"
)
_HEAD = "SELECT root, model, fields, docs, length, ref_avgdl, vector_pending FROM engram_index_heads "


def has_pgvector(db: PostgresDatabase) -> bool:
    """True when the server can create (or already has) the ``vector`` extension."""
    return bool(db.run("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"))


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
        exact_below: int = EXACT_BELOW,
        scope_exact: int = SCOPE_EXACT,
    ) -> None:
        self.db = db
        #: Branches with fewer items than this scan their vectors exactly (no HNSW approximation).
        self.exact_below = exact_below
        #: A search whose scope (a namespace prefix) holds at most this many items scores them all exactly from
        #: their rows, read through the namespace index, instead of reading the postings and the HNSW index.
        self.scope_exact = scope_exact
        self.repo = repo
        self.embedder = embedder
        self.fields = fields
        self.cache = cache
        self.model = embedder.model_id if embedder is not None else ""
        self.config = json.dumps(list(fields))
        self._queries = QueryVectors()
        #: Branches known to be indexed here (their writes plan from the old head without asking first).
        self._indexed: set[str] = set()
        self._overlays: OrderedDict[tuple[bytes, bytes], PastOverlay | None] = OrderedDict()
        self._lock = threading.Lock()
        #: New vector-cache rows go in the index write's transaction when the cache is in the same database.
        self._cache_in_transaction = (
            isinstance(cache, PostgresVectorCache) and cache.db.url == db.url and cache.db.repo == db.repo
        )
        #: Moves the vectors commits write into the HNSW index, in the background.
        self.settler = Settler(db)
        ensure_schema(db.url, SEARCH_MIGRATIONS)
        if embedder is not None:
            dim = int(embedder.dim)
            db.run(
                f"CREATE INDEX IF NOT EXISTS engram_doc_vectors_hnsw_{dim} ON engram_doc_vectors "
                f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) WHERE dim = {dim}"
            )

    def prepare(self, name: str, old: ChunkId | None, new: ChunkId | None) -> Plan | None:
        """Before a branch moves (no lock held): the rows its index will need, if it is indexed, with their
        embeddings. The index of a branch follows its head, so the plan starts from the old head's tree."""
        branch = name[len(HEADS) :]
        if new is None:
            return None
        base: bytes | None = None
        if branch in self._indexed and old is not None:
            base = self.repo.commit(old).tree
        else:
            head = self.db.run(_HEAD + "WHERE repo = %s AND branch = %s", (self.db.repo, branch))
            if not head or (head[0][1], head[0][2]) != (self.model, self.config):
                return None
            base = bytes(head[0][0])
        return self._plan(base, self.repo.commit(new).tree)

    def pipelined(self, prepared: Plan | None) -> bool:
        """Whether the ref move that writes ``prepared`` may run in pipeline mode: a small change, written with
        ``INSERT``\\ s (a bulk one goes by ``COPY``, which pipeline mode does not allow)."""
        return prepared is None or len(prepared.added) <= SMALL_WRITE

    def start(self, conn: Any, name: str) -> Any:
        """Inside the ref-move transaction, queued behind the compare-and-swap: read and lock the branch's
        index head row."""
        return conn.execute(_HEAD + "WHERE repo = %s AND branch = %s FOR UPDATE", (self.db.repo, name[len(HEADS) :]))

    def apply(
        self, conn: Any, name: str, old: ChunkId | None, new: ChunkId | None, prepared: Plan | None, started: Any
    ) -> None:
        """Inside the ref-move transaction: bring the moved branch's rows to its new head (``started``: the
        cursor of :meth:`start`)."""
        branch = name[len(HEADS) :]
        row = started.fetchone()
        if row is None:
            self._indexed.discard(branch)
            return  # not indexed (yet): its first search builds it
        if new is None:
            self._indexed.discard(branch)
            self._drop(conn, branch)
            return
        if (row[1], row[2]) != (self.model, self.config):
            return  # another configuration's index: its owner re-syncs from the root it recorded
        head = Head(bytes(row[0]), int(row[3]), int(row[4]), float(row[5]))
        root = self.repo.commit(new).tree
        if prepared is None or prepared.base != head.root or prepared.target != root:
            prepared = self._plan(head.root, root, embed=False)  # the index moved meanwhile: plan again
        write(conn, self.db.repo, branch, prepared, head, model=self.model)
        self._indexed.add(branch)
        self.settler.wrote(len(prepared.added))

    def _drop(self, conn: Any, branch: str) -> None:
        for table in (
            "engram_docs",
            "engram_doc_vectors",
            "engram_doc_vectors_fresh",
            "engram_postings",
            "engram_index_terms",
            "engram_index_namespaces",
            "engram_index_heads",
        ):
            conn.execute(f"DELETE FROM {table} WHERE repo = %s AND branch = %s", (self.db.repo, branch))

    def _plan(self, base: ChunkId, target: ChunkId, *, embed: bool = True) -> Plan:
        """What diff(base, target) does to the rows: keys to remove, documents (and vectors) to add.

        ``embed=False`` (under a lock) takes vectors from the cache only; the others are left pending.
        """
        plan = Plan(base, target)
        if base != target:
            for change in diff_trees(self.repo.nodes, base, target):
                if change.old is not None:
                    plan.removed.append(change.key)
                if change.new is not None:
                    plan.added.append(make_doc(change.key, change.new, self.fields))
            plan.vectors, plan.error = self._vectors(plan.added, embed, plan.cached)
            if self.embedder is not None and plan.error is None:
                plan.pending = sum(1 for d, v in zip(plan.added, plan.vectors, strict=True) if d.indexed and v is None)
        return plan

    def _vectors(
        self, docs: list[Doc], embed: bool = True, deferred: dict[bytes, bytes] | None = None
    ) -> tuple[list[npt.NDArray[np.float32] | None], str | None]:
        """Embeddings of the indexed documents (through the vector cache); None rows and the reason when
        the embedder fails (the index then records it and hybrid searches degrade to keyword)."""
        out: list[npt.NDArray[np.float32] | None] = [None] * len(docs)
        wanted = [i for i, d in enumerate(docs) if d.indexed]
        if self.embedder is None or not wanted:
            return out, None
        if not embed:
            hashes = {i: text_hash(docs[i].vector_text) for i in wanted}
            found = self.cache.get_many(self.model, set(hashes.values()))
            for i, h in hashes.items():
                out[i] = as_array(found[h]) if h in found else None
            return out, None
        texts = [docs[i].vector_text for i in wanted]
        try:
            if deferred is not None and self._cache_in_transaction:
                vectors = self._embed(texts, deferred)
            else:
                vectors = embed_through(self.embedder, self.cache, texts)
        except EmbedderError as exc:
            return out, str(exc)
        for i, vector in zip(wanted, vectors, strict=True):
            out[i] = vector
        return out, None

    def _embed(self, texts: list[str], deferred: dict[bytes, bytes]) -> list[npt.NDArray[np.float32]]:
        """:func:`~engram.index.cache.embed_through` with the cache's new rows left in ``deferred``: the
        write stores them in its own transaction (a cache in the same database), saving a commit."""
        assert self.embedder is not None
        hashes = [text_hash(t) for t in texts]
        found = self.cache.get_many(self.model, set(hashes))
        missing = list({h: t for h, t in zip(hashes, texts, strict=True) if h not in found}.items())
        for i in range(0, len(missing), EMBED_BATCH):
            part = missing[i : i + EMBED_BATCH]
            matrix = np.asarray(self.embedder.embed([t for _, t in part]), dtype=np.float32)
            blobs = as_blobs(matrix, [h for h, _ in part])
            deferred.update(blobs)
            found.update(blobs)
        return [as_array(found[h]) for h in hashes]

    def ensure(self, branch: str, root: ChunkId) -> bool:
        """Make the branch's rows reflect ``root`` (its head); False if another configuration owns them
        or the branch moved on meanwhile (the caller then searches in process)."""
        repo = self.db.repo
        head = self.db.run(_HEAD + "WHERE repo = %s AND branch = %s", (repo, branch))
        if head and (head[0][1], head[0][2]) != (self.model, self.config):
            return False
        if head and int(head[0][6]):
            self._fill_pending(branch)
        if head and bytes(head[0][0]) == root:
            self._indexed.add(branch)
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
            row = conn.execute(_HEAD + "WHERE repo = %s AND branch = %s FOR UPDATE", (repo, branch)).fetchone()
            if row is None or (row[1], row[2]) != (self.model, self.config):
                return False  # the branch was deleted, or re-indexed with another configuration, meanwhile
            locked = Head(bytes(row[0]), int(row[3]), int(row[4]), float(row[5]))
            if locked.root != plan.base:
                plan = self._plan(locked.root, target, embed=False)  # a writer moved the index meanwhile
            write(conn, repo, branch, plan, locked, model=self.model)
        self._indexed.add(branch)
        self.settler.wrote(len(plan.added))
        return target == root

    def _fill_pending(self, branch: str) -> None:
        """Embed the searchable rows written without a vector (their plan was made under a lock), outside any
        lock, then store the vectors of those rows that have not changed since."""
        repo = self.db.repo
        rows = self.db.run(
            "SELECT d.key, d.record FROM engram_docs d WHERE d.repo = %s AND d.branch = %s AND d.indexed "
            f"AND {_NO_VECTOR}",
            (repo, branch),
        )
        docs = [make_doc(bytes(k), bytes(r), self.fields) for k, r in rows]
        vectors, error = self._vectors(docs)
        if error is not None:
            return  # still pending: the next search tries again
        with self.db.connection() as conn, conn.transaction():
            conn.execute(_HEAD + "WHERE repo = %s AND branch = %s FOR UPDATE", (repo, branch))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO engram_doc_vectors_fresh (repo, branch, key, dim, embedding) SELECT %s, %s, %s, %s, "
                    "%s::vector WHERE EXISTS (SELECT 1 FROM engram_docs WHERE repo = %s AND branch = %s "
                    "AND key = %s AND record = %s) ON CONFLICT DO NOTHING",
                    [(repo, branch, d.key, len(v), vector_text(stored(v[None])[0]), repo, branch, d.key, d.data)
                     for d, v in zip(docs, vectors, strict=True) if v is not None],
                )  # fmt: skip
            conn.execute(
                "UPDATE engram_index_heads SET vector_pending = (SELECT count(*) FROM engram_docs d WHERE d.repo = "
                f"%(repo)s AND d.branch = %(branch)s AND d.indexed AND {_NO_VECTOR}) "
                "WHERE repo = %(repo)s AND branch = %(branch)s",
                {"repo": repo, "branch": branch},
            )
        self.settler.wake()

    def lag(self, branch: str) -> int:
        """How many of the branch's vectors are not in the HNSW index yet (searches scan them exactly)."""
        with self.db.connection() as conn:
            return lag(conn, self.db.repo, branch)

    def head_state(self, branch: str) -> tuple[ChunkId, int, int] | None:
        """The root the branch's rows reflect, how many of its items wait for vectors, and how many vectors
        wait for the HNSW index; None when the branch has no rows yet."""
        with self.db.connection() as conn:
            row = conn.execute(
                "SELECT root, vector_pending FROM engram_index_heads WHERE repo = %s AND branch = %s",
                (self.db.repo, branch),
            ).fetchone()
            if row is None:
                return None
            return ChunkId(bytes(row[0])), int(row[1]), lag(conn, self.db.repo, branch)

    def settle(self) -> int:
        """Move every vector not in the HNSW index yet into it now, and refresh the planner's statistics;
        returns how many vectors moved."""
        moved = self.settler.settle_all()
        self.settler.analyze()
        return moved

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
            write(conn, self.db.repo, branch, plan, Head(empty, 0, 0, 0.0), progress, model=self.model)
        self._indexed.add(branch)
        self.settler.wrote(len(plan.added))
        rows = self.db.run("SELECT count(*) FROM engram_docs WHERE repo = %s AND branch = %s", (self.db.repo, branch))
        return int(rows[0][0])

    def query(
        self, branch: str, root: ChunkId, request: Request, now: int, prefilter: PreFilter | None = None
    ) -> Hits | None:
        """Run a search at the branch head ``root`` in PostgreSQL; None when it must run in process.

        Its first statement reads the branch's index head with the query terms' statistics: when the rows
        reflect ``root`` with every vector made, the search goes on from it; else :meth:`ensure` first."""
        for attempt in range(2):
            search = PgQuery(self, branch, request, prefilter, now)
            try:
                with search.consistent():
                    start = search.start()
                    current = start is not None and start.root == root and not start.pending
                    if current and start is not None and start.config == (self.model, self.config):
                        self._indexed.add(branch)
                        return search.run(start)  # on the read view its head was read in
                if attempt == 0 and self.ensure(branch, root):
                    continue  # the rows reflect ``root`` now: read them again
            except (StorageError, InvalidInputError) as exc:  # down, or refusing data the store holds
                if search.running:
                    raise
                _log.warning("searching %s in process: the PostgreSQL index is unavailable (%s)", branch, exc)
                return None
            break
        # The branch moved on (a writer beside this search): its rows reflect a newer head. ``root`` is then searched
        # as a past version of them (the rows minus what differs, plus ``root``'s versions of those items), so the
        # answer is ``root``'s, never a newer version's, and it stays in PostgreSQL.
        return self.query_past(branch, root, request, now, prefilter)

    def query_past(
        self, branch: str, root: ChunkId, request: Request, now: int, prefilter: PreFilter | None = None
    ) -> Hits | None:
        """Run a search at any version ``root`` near ``branch``: the branch's head rows minus the items that
        differ, plus their versions at ``root``. None when it must run in process (not indexed here, or
        too much differs: an index built for that version is cheaper then)."""
        try:
            overlay = self._overlay(branch, root)
        except (StorageError, InvalidInputError) as exc:
            _log.warning("searching the past of %s in process: the PostgreSQL index is unavailable (%s)", branch, exc)
            return None
        if overlay is None:
            return None
        for _ in range(3):
            search = PgQuery(self, branch, request, prefilter, now, overlay)
            with search.consistent():
                start = search.start()
                if start is None:
                    return None
                if start.root == overlay.base:  # the overlay is the difference from the rows this read view reads
                    return search.run(start)
            try:  # a writer moved the head rows since the overlay was made: make it again from them
                overlay = self._overlay(branch, root)
            except (StorageError, InvalidInputError):
                return None
            if overlay is None:
                return None
        return None

    def corpus_stats(self, branch: str, root: ChunkId, query: str, *, past: bool = False) -> CorpusStats | None:
        """The corpus statistics a search of ``query`` scores with at the branch head ``root`` (``past``: at any
        version ``root``, as :meth:`query_past`); None when that search would run in process."""
        try:
            if past:
                overlay = self._overlay(branch, root)
                if overlay is None:
                    return None
            elif self.ensure(branch, root):
                overlay = None
            else:
                return None
            head = self.db.run(
                "SELECT docs, length FROM engram_index_heads WHERE repo = %s AND branch = %s", (self.db.repo, branch)
            )
            terms = query_terms(query)
            return CorpusStats.of(term_stats(self.db, branch, terms, int(head[0][0]), int(head[0][1]), overlay), terms)
        except (StorageError, InvalidInputError) as exc:
            _log.warning("reading the statistics of %s in process: the PostgreSQL index is unavailable (%s)", branch,
                         exc)  # fmt: skip
            return None

    def _overlay(self, branch: str, root: ChunkId) -> PastOverlay | None:
        head = self.db.run(_HEAD + "WHERE repo = %s AND branch = %s", (self.db.repo, branch))
        if not head or (head[0][1], head[0][2]) != (self.model, self.config):
            return None
        base, docs = bytes(head[0][0]), int(head[0][3])
        key = (base, root)
        with self._lock:
            if key in self._overlays:
                self._overlays.move_to_end(key)
                return self._overlays[key]
        limit = max(OVERLAY_MIN, int(docs * OVERLAY_SHARE))
        overlay: PastOverlay | None = PastOverlay([], [], base=base)
        for n, change in enumerate(diff_trees(self.repo.nodes, base, root)):
            if n >= limit:
                overlay = None
                break
            assert overlay is not None
            if change.old is not None:  # the head's version: left out, and out of the statistics
                overlay.excluded.append(change.key)
                old = make_doc(change.key, change.old, self.fields)
                gone = counts_of(old)
                if old.indexed:
                    overlay.docs_delta -= 1
                    overlay.length_delta -= sum(gone.values())
                    overlay.df_delta.subtract(gone.keys())
            if change.new is not None:  # the past version: scored in Python
                doc = make_doc(change.key, change.new, self.fields)
                overlay.docs.append(doc)
                if doc.indexed:
                    found = counts_of(doc)
                    overlay.docs_delta += 1
                    overlay.length_delta += sum(found.values())
                    overlay.df_delta.update(found.keys())
        with self._lock:
            self._overlays[key] = overlay
            while len(self._overlays) > OVERLAYS:
                self._overlays.popitem(last=False)
        return overlay

    def exact(self, items: int, indexed: int) -> bool:
        """Whether a branch of ``items`` items scans its vectors exactly, the HNSW index holding ``indexed``."""
        if items < self.exact_below:
            return True
        return self.exact_below > 0 and items < SHARED_EXACT and items * SHARED_SHARE < indexed

    def query_vector(self, text: str) -> npt.NDArray[np.float32]:
        """A query's embedding (the last 1,024 distinct queries are remembered)."""
        if self.embedder is None:
            raise EmbedderError("no embedder is configured for this store")
        return self._queries.get(self.embedder, text)


__all__ = ["EXACT_BELOW", "SEARCH_MIGRATIONS", "PgEngine", "has_pgvector"]
