"""One search in PostgreSQL: candidates read from sorted lists until no unread item can rank, then the
shared ranking function.

A ranked search reads, to a depth ``n``, a few lists sorted by something that bounds an item's score:
each query term's postings by impact (BM25's term weight at the branch's reference length, stored at
write time), the nearest vectors (pgvector HNSW, the search's filters pushed into the scan, or an
exact scan on a small branch), and, when the profile weighs them, the newest and the most confident
items. Every item read is scored exactly from its row (term frequencies, length, cosine, confidence,
``updated_at``) by :func:`engram.index.keyword.bm25` and :func:`engram.index.ranking.rank`, the same code
as the in-process engine. Then the threshold test (Fagin's threshold algorithm): an item on no list
scores at most what the lists' last values allow; when the page's last item beats that bound the
answer is final, else the depth grows fourfold. Cost grows with the query terms' postings that must be
read (few for rare terms, whose lists end early; common terms have small idfs and stop mattering), not
with the branch. The vector list is as exact as the HNSW index (approximate above ``exact_below``).

A search's first statement reads the branch's index head with its query terms' statistics
(:meth:`PgQuery.start`); the first round reads the lists and the rows of every item on them in one more.
A later round reads again only the lists that deepened, and fetches the row of an item read only when
its bound (its values on the lists that gave it, the lists' last values elsewhere) can still reach the
page found so far: most items of a common word's deeper postings are never fetched.

A search in the past adds an overlay (:class:`PastOverlay`): the head rows of the items that differ are
left out, and the past versions of those items are scored in Python with the past corpus statistics.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from engram import codec
from engram.codec import is_system
from engram.errors import EmbedderError
from engram.index import keyword
from engram.index.cache import embed_through
from engram.index.corpus import query_terms
from engram.index.doclist import Doc, confidence_of
from engram.index.fusion import fusion_weights
from engram.index.pglists import CONFIDENT, FRESH, NEWEST, SLACK, VECTOR, Lists, Reads
from engram.index.pgpast import PastOverlay, with_overlay
from engram.index.pgrows import counts_of, like_prefix, vector_text
from engram.index.pgseam import PreFilter, SearchEngine
from engram.index.pgsession import Session, Start, read_start
from engram.index.ranking import (
    Hit,
    Hits,
    ModePlan,
    Ranking,
    Request,
    Signals,
    keyword_score,
    plan_mode,
    rank,
    recency_score,
    select,
    semantic_score,
)
from engram.index.vector import stored
from engram.objects import Record, decode_record

_log = logging.getLogger(__name__)


#: A scope of at most this many items is read, records and cosines included, in one statement with the COMMIT.
SMALL_SCOPE = 1_000
#: Rounds of deepening after which a search scores its whole scope exactly instead (each round reads its lists
#: four times deeper: this many rounds read them 4**8 = 65,536 times the first depth): a search terminates.
MAX_ROUNDS = 8


class PgQuery:
    """One search of one indexed branch (and optional past overlay)."""

    def __init__(
        self,
        engine: SearchEngine,
        branch: str,
        request: Request,
        prefilter: PreFilter | None,
        now: int,
        overlay: PastOverlay | None = None,
    ) -> None:
        self.s = engine
        self.branch = branch
        self.request = request
        self.now = now
        self.overlay = overlay
        self.params: dict[str, Any] = {"repo": engine.db.repo, "branch": branch, "now": now}
        self.where = ["d.repo = %(repo)s", "d.branch = %(branch)s", "(d.expires IS NULL OR d.expires > %(now)s)"]
        if request.prefix:
            self.where.append("d.ns_path LIKE %(prefix)s ESCAPE '\\'")
            self.params["prefix"] = like_prefix(request.prefix)
        if request.hide_system:  # the system namespaces' paths start with "_" (escaped for LIKE)
            self.where.append("d.ns_path NOT LIKE '\\_%%' ESCAPE '\\'")
        if prefilter is not None:
            self.where.append(prefilter[0])
            self.params.update(prefilter[1])
        #: Whether the lists apply the scope and filter as they read (a selective search), or leave it to the
        #: rows read (the expiry alone: an expired item read from a list still bounds what follows it).
        self.pushdown = bool(request.prefix) or prefilter is not None
        if overlay is not None and overlay.excluded:
            self.where.append("d.key <> ALL(%(excluded)b)")
            self.params["excluded"] = overlay.excluded
        self.excluded = 0 if overlay is None else len(overlay.excluded)
        self.records: dict[bytes, Record] = {}
        self._session = Session(engine.db)
        #: Encoded records fetched with a small scope's rows, decoded when a page or a filter needs them.
        self._raw: dict[bytes, bytes] = {}
        #: Whether :meth:`run` started (an error from then on is the search's, not the index's availability).
        self.running = False
        #: A small scope (at most the engine's ``scope_exact`` items) is scored exactly; so is any search whose
        #: lists were deepened ``MAX_ROUNDS`` times.
        self.scope_exact = engine.scope_exact
        #: A ranked search's state across rounds: each list's depth read; its items, their values and the items
        #: decided (fetched, or unable to rank); the rows fetched (each item's id and signal columns); cosines
        #: fetched for items off the vector lists.
        self._read_to: dict[int, int] = {}
        self._reads = Reads()
        self._row_ids: list[npt.NDArray[np.int64]] = []
        self._row_columns: list[npt.NDArray[np.float64]] = []
        self._fetched: dict[bytes, float] = {}
        #: An item read whose bound is under the page's last score so far cannot reach the page: it is never
        #: fetched. Off the vector lists its cosine counts as 1 unless they are exact (the last cosine of an
        #: HNSW scan bounds the others only approximately); with that last cosine instead, its bound is held
        #: against the lower floor :meth:`_cosines` measures, which decides the same items as when every item
        #: read is fetched.
        self._page = -math.inf
        self._floor = -math.inf
        self._terms: list[str] = []
        self._query_text = ""
        self.extra = [] if overlay is None else [d for d in overlay.docs if self._in_scope(d)]
        for doc in self.extra:
            self.records[doc.key] = doc.record

    def _in_scope(self, doc: Doc) -> bool:
        expires = doc.record.expires_at
        if self.request.hide_system and is_system(doc.namespace):
            return False
        return doc.namespace[: len(self.request.prefix)] == self.request.prefix and (
            expires is None or expires > self.now
        )

    def start(self) -> Start | None:
        """What the search reads first, in one statement: the branch's index head, the document frequencies of the
        query's terms and the size of its scope; None when the branch has no rows."""
        text, mode = self.request.text, self.request.mode
        terms = query_terms(text) if text is not None and mode != "semantic" else []
        return read_start(self._session, self.params, terms, bool(self.request.prefix))

    def consistent(self) -> AbstractContextManager[None]:
        """Run the statements of this search inside on one read view (:class:`~engram.index.pgsession.Session`)."""
        return self._session.consistent()

    def _run(self, sql: str, params: Any, *, last: bool = False, **options: Any) -> list[tuple[Any, ...]]:
        return self._session.run(sql, params, last=last, **options)

    def run(self, start: Start) -> Hits:
        """The page of hits, from the head read by :meth:`start`."""
        self.running = True
        if self.request.text is None:
            return self._listing()
        if start.scope is not None and start.scope <= self.scope_exact:
            return self._exact(self.request.text, start)
        return self._ranked(self.request.text, start)

    def _listing(self) -> Hits:
        """Newest first, by SQL; the exact filter on the fetched rows, fetching more while it rejects some."""
        request = self.request
        fetch = max(request.offset + request.limit, 1) * (1 if request.accept is None else 4)
        while True:
            rows = self._fetch(
                f"SELECT d.key, d.record, d.updated FROM engram_docs d WHERE {' AND '.join(self.where)} "
                f"ORDER BY d.updated DESC, d.key LIMIT %(n)s",
                {**self.params, "n": fetch},
            )
            found = [(bytes(r[0]), int(r[2])) for r in rows] + [(d.key, d.record.updated_at) for d in self.extra]
            found.sort(key=lambda kv: (-kv[1], kv[0]))
            keys = [k for k, _ in found]
            self.records.update((bytes(r[0]), decode_record(bytes(r[1]))) for r in rows)
            chosen = select(iter(range(len(keys))), request.offset, request.limit, self._admit(keys))
            if len(chosen) >= request.limit or len(rows) < fetch:
                return Hits([self._hit(keys[i]) for i in chosen], "list", request.mode or "list")
            fetch *= 4

    def _planned(self, text: str, head: Start) -> tuple[ModePlan, list[str], keyword.Stats, keyword.Stats]:
        """The mode a ranked search runs in, its terms, the branch's statistics of them (with the past overlay's
        difference) and the statistics it scores with (a fan-out's, engram.index.corpus, when it has them)."""
        s, request = self.s, self.request
        plan = plan_mode(
            request.mode, has_embedder=s.embedder is not None, vector_error=head.vector_error,
            embed=lambda: s.query_vector(text),
        )  # fmt: skip
        terms = query_terms(text) if plan.mode != "semantic" else []
        local = with_overlay(keyword.Stats(head.docs, head.length), head.df, terms, self.overlay)
        return plan, terms, local, local if request.stats is None else request.stats.stats()

    def _ranked(self, text: str, head: Start) -> Hits:
        s, request = self.s, self.request
        plan, terms, local, stats = self._planned(text, head)
        want = request.offset + request.limit
        lists = Lists(
            terms,
            plan,
            request,
            stats,
            exact=s.exact(head.docs, head.hnsw),
            excluded=self.excluded,
            filtered=self.pushdown,
            local=local,
            weights=fusion_weights(s.model or None),
        )
        ref = head.ref_avgdl
        model = s.model if plan.vector is not None else None
        self._query_text = vector_text(plan.vector) if plan.vector is not None else ""
        self._terms = terms
        for _ in range(MAX_ROUNDS + 1):
            if lists.any():
                self._read(lists, fetch=not self._read_to)
                lists.read(self._reads.summary())
                pending = self._reads.unprobed()
                if len(pending):
                    self._probe(self._promising(lists, ref, pending))
            keys, signals = self._signals(terms, plan, stats, lists.cosine_cap())
            ranking = rank(signals, plan.mode, request.profile, self.now, request.min_score, embedder=model)
            chosen = select(ranking.order(keys.__getitem__, want), request.offset, request.limit, self._admit(keys))
            if lists.settled(ranking, chosen, request, lists.bound(ref, self.now)):
                break
            if len(chosen) >= request.limit > 0:
                self._page = ranking.score(chosen[-1])
            lists.deepen(ref)
        else:  # the lists kept deepening: score the scope exactly (bounded, and the same page)
            _log.info("search of %s scored its scope exactly after %d rounds", self.branch, MAX_ROUNDS)
            return self._exact(text, head)
        return self._page_of(ranking, chosen, keys, plan, head)

    def _page_of(self, ranking: Ranking, chosen: list[int], keys: list[bytes], plan: ModePlan, head: Start) -> Hits:
        """The hits of the page ``chosen`` (positions of ``keys``), their records loaded."""
        self._load([keys[i] for i in chosen])
        hits = []
        for i, score in zip(chosen, ranking.scores_of(chosen), strict=True):
            found = self._hit(keys[i])
            explained = ranking.explain(i) if self.request.explain else None
            hits.append(Hit(found.namespace, found.key, found.record, score, explained))
        return Hits(hits, plan.mode, plan.requested, plan.degraded, head.pending)

    def _exact(self, text: str, head: Start) -> Hits:
        """Score every searchable item of the scope from its row, in one statement (a small scope: a namespace's
        items are one range of keys, read by primary key, so the cost follows the scope, not the branch)."""
        s, request = self.s, self.request
        plan, terms, _, stats = self._planned(text, head)
        self._terms = terms
        params = {**self.params, **{f"t{i}": t for i, t in enumerate(terms)}, "terms": terms}
        where = list(self.where)
        if request.prefix:  # a namespace's items are one range of keys: read by primary key, in every table
            params["lo"], params["hi"] = codec.prefix_range(request.prefix)
            where.append("d.key >= %(lo)s AND d.key < %(hi)s")
        if plan.mode == "keyword":
            where.append("d.term_list && %(terms)s::text[]")
        joined, cosine = "", ", NULL::float8"
        # A small scope's statement reads everything the search needs (records and every cosine too) and ends the
        # read view. In a larger one a hybrid search fetches the cosines of the candidates that can still reach the
        # page afterwards (_cosines: most items of a scope score too low by keywords alone).
        small = head.scope is not None and head.scope <= SMALL_SCOPE and not self.extra
        if plan.vector is not None and (plan.mode == "semantic" or small):
            dim = len(plan.vector)
            params["q"] = vector_text(plan.vector)
            scope = "v.repo = %(repo)s AND v.branch = %(branch)s" + (
                " AND v.key >= %(lo)s AND v.key < %(hi)s" if request.prefix else ""
            )
            joined = (
                " LEFT JOIN (SELECT DISTINCT ON (key) key, c FROM (" + " UNION ALL ".join(
                    f"SELECT v.key, -(v.embedding <#> %(q)s::vector)::float8 AS c FROM {table} v WHERE {scope} "
                    f"AND v.dim = {dim}" for table in ("engram_doc_vectors", "engram_doc_vectors_fresh")
                ) + ") u ORDER BY key) c ON c.key = d.key"
            )  # fmt: skip
            cosine = ", coalesce(c.c, 0)"
        rows = self._run(
            f"SELECT d.key{self._columns(False)}{cosine}{', d.record' if small else ''} FROM engram_docs d{joined} "
            f"WHERE {' AND '.join(where)} AND d.indexed",
            params,
            last=small,
            binary=True,
        )
        if plan.vector is not None:
            self._query_text = params["q"] = vector_text(plan.vector)
        keys = [bytes(r[0]) for r in rows]
        width = 4 + len(terms)
        if small:
            self._raw = {key: bytes(r[-1]) for key, r in zip(keys, rows, strict=True)}
            rows = [r[:-1] for r in rows]
        table = np.array([r[1:] for r in rows], dtype=np.float64).reshape(len(rows), width)
        known = plan.mode == "semantic" or (small and plan.vector is not None)
        near = np.nan_to_num(table[:, -1], nan=0.0) if known else np.full(len(rows), np.nan)
        keys, signals = self._signals(terms, plan, stats, 1.0, (keys, table[:, :-1], near))
        model = s.model if plan.vector is not None else None
        ranking = rank(signals, plan.mode, request.profile, self.now, request.min_score, embedder=model)
        want = request.offset + request.limit
        chosen = select(ranking.order(keys.__getitem__, want), request.offset, request.limit, self._admit(keys))
        return self._page_of(ranking, chosen, keys, plan, head)

    def _read(self, lists: Lists, *, fetch: bool) -> None:
        """Read the lists whose depth grew since the last round (each from its start: a list is a prefix of its
        order), remembering each list's items and values; with ``fetch`` (the first round), also the rows of
        every item read, in the same statement (kept as :meth:`_probe` keeps its rows)."""
        depths = {**lists.depths, **({FRESH: lists.depths[VECTOR]} if VECTOR in lists.depths else {})}
        grown = {i: n for i, n in depths.items() if self._read_to.get(i) != n}
        params = {**self.params, **{f"n{i}": depths[i] for i in range(len(lists.terms))}}
        params["nv"], params["nn"], params["nc"] = (depths.get(k, 0) for k in (VECTOR, NEWEST, CONFIDENT))
        where = " AND ".join(self.where)
        # a correlated scalar subquery, never turned into a join: one primary-key probe per item read
        scope = f"AND (SELECT d.indexed FROM engram_docs d WHERE {where} AND d.key = {{}}.key) "
        parts = []
        for i, term in enumerate(lists.terms):
            params[f"t{i}"] = term
            if i in grown:
                parts.append(
                    f"(SELECT {i} AS l, p.key, p.impact::float8 AS v FROM engram_postings p WHERE p.repo = %(repo)s "
                    f"AND p.branch = %(branch)s AND p.term = %(t{i})s {scope.format('p') if self.pushdown else ''}"
                    f"ORDER BY p.impact DESC LIMIT %(n{i})s)"
                )
        if lists.vector is not None and VECTOR in grown:
            dim = len(lists.vector)
            params["q"] = self._query_text
            order = (
                f"v.embedding::vector({dim}) <=> %(q)s::vector({dim})" if not lists.exact else "v.embedding <#> %(q)s"
            )
            filtered = scope.format("v") if self.pushdown and lists.mode == "semantic" else ""
            for list_id, table, by in ((VECTOR, "engram_doc_vectors", order), (FRESH, "engram_doc_vectors_fresh", "")):
                parts.append(
                    f"(SELECT {list_id}, v.key, -(v.embedding <#> %(q)s::vector)::float8 FROM {table} v "
                    f"WHERE v.repo = %(repo)s AND v.branch = %(branch)s AND v.dim = {dim} {filtered}"
                    f"ORDER BY {by or 'v.embedding <#> %(q)s'} LIMIT %(nv)s)"
                )
        for list_id, column, limit in ((NEWEST, "updated", "nn"), (CONFIDENT, "confidence", "nc")):
            if list_id in grown:
                parts.append(
                    f"(SELECT {list_id}, d.key, d.{column}::float8 FROM engram_docs d WHERE {where} AND d.indexed "
                    f"ORDER BY d.{column} DESC LIMIT %({limit})s)"
                )
        self._read_to.update(grown)
        if not parts:
            return
        sql = (
            f"WITH lists (l, key, v) AS MATERIALIZED ({' UNION ALL '.join(parts)}) "
            f"SELECT l, key, v{self._columns(True)} FROM lists"
        )
        if fetch:
            sql += (
                f" UNION ALL SELECT NULL, d.key, NULL{self._columns(False)} FROM engram_docs d WHERE {where} "
                "AND d.indexed AND d.key = ANY(ARRAY(SELECT DISTINCT key FROM lists))"
            )
        with self._session.connection() as conn, conn.pipeline():  # one round trip for both statements
            self._session.begin_on(conn)
            if VECTOR in grown:  # session settings (the pooled connection keeps them; they only steer HNSW scans)
                conn.execute(
                    "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false), "
                    "set_config('hnsw.ef_search', %s, false)",
                    (str(min(max(params["nv"], 40), 1000)),),
                )
            cursor = conn.execute(sql, params, binary=True, prepare=False)  # a generic plan cannot see depths
            found = cursor.fetchall()
        read: dict[int, tuple[list[bytes], list[float]]] = {i: ([], []) for i in grown}
        rows = []
        for r in found:
            if r[0] is None:
                rows.append((r[1], *r[3:]))
            else:
                keys, values = read[r[0]]
                keys.append(bytes(r[1]))
                values.append(r[2])
        self._reads.take(read)  # every item fetched is on a list: the lists first, so each has an id
        if fetch:
            self._reads.probed(self._reads.unprobed())
        self._keep(rows)

    def _columns(self, empty: bool) -> str:
        """The signal columns of an item's row (``updated``, confidence, length, each query term's frequency) as
        the statements select them from ``engram_docs d``; NULLs with ``empty``."""
        if empty:
            return ", NULL::bigint, NULL::real, NULL::integer" + ", NULL::real" * len(self._terms)
        return ", d.updated, d.confidence, d.length" + "".join(
            f", coalesce(d.tf_list[array_position(d.term_list, %(t{i})s)], 0)" for i in range(len(self._terms))
        )

    def _promising(self, lists: Lists, ref: float, pending: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Of the items read but not fetched yet (``pending``, ids), those that could still reach the page (see
        ``_page``): an item's bound takes its values on the lists that gave it, and the lists' last values
        elsewhere. Every pending item is decided here: fetched next, or unable to rank."""
        self._reads.probed(pending)
        if self._page == -math.inf and self._floor == -math.inf:
            return pending
        values = self._reads.values(pending)
        cap = lists.cosine_cap()
        keep = lists.bounds(values, ref, cap if lists.exact else 1.0) >= self._page
        if self._floor > -math.inf:
            keep &= lists.bounds(values, ref, cap) >= self._floor
        return pending[keep]

    def _probe(self, ids: npt.NDArray[np.int64]) -> None:
        """Fetch the rows (signals) of these items, in scope and searchable."""
        if not len(ids):
            return
        keys = [self._reads.keys[i] for i in ids.tolist()]
        params = {**self.params, "keys": keys, **{f"t{i}": t for i, t in enumerate(self._terms)}}
        sql = (
            f"SELECT d.key{self._columns(False)} FROM engram_docs d WHERE {' AND '.join(self.where)} "
            "AND d.indexed AND d.key = ANY(%(keys)b)"
        )
        self._keep(self._fetch(sql, params))

    def _keep(self, rows: list[tuple[Any, ...]]) -> None:
        """Keep fetched rows (key, ``updated``, confidence, length, each query term's frequency) as their items'
        ids and a float array of their columns, converted once."""
        if not rows:
            return
        ids = self._reads.ids
        self._row_ids.append(np.fromiter((ids[bytes(r[0])] for r in rows), dtype=np.int64, count=len(rows)))
        self._row_columns.append(np.array([r[1:] for r in rows], dtype=np.float64))

    def _signals(
        self,
        terms: list[str],
        plan: ModePlan,
        stats: keyword.Stats,
        cap: float,
        rows: tuple[list[bytes], npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None,
    ) -> tuple[list[bytes], Signals]:
        """The candidates (rows fetched, then the overlay's documents) and their raw signals. ``rows``: an exact
        search's rows (keys, their signal columns, their cosines, NaN where still to fetch), else the rows the
        lists' rounds fetched, with the cosines the vector lists gave."""
        if rows is not None:
            keys, table, cosine = rows
            keys = list(keys)
        else:
            width = 3 + len(terms)
            row_ids = np.concatenate(self._row_ids) if self._row_ids else np.zeros(0, dtype=np.int64)
            table = np.concatenate(self._row_columns) if self._row_columns else np.zeros((0, width))
            all_keys = self._reads.keys
            keys = [all_keys[i] for i in row_ids.tolist()]
            cosine = self._reads.near(row_ids)
        updated = table[:, 0].astype(np.int64)
        confidence = table[:, 1].astype(np.float32)
        lengths = table[:, 2].astype(np.float32)
        tfs = [table[:, 3 + j].astype(np.float32) for j in range(len(terms))]
        eligible = np.ones(len(keys), dtype=bool)
        if self.extra:
            extra = self.extra
            counts = [counts_of(d) for d in extra]
            keys += [d.key for d in extra]
            updated = np.concatenate([updated, [d.record.updated_at for d in extra]]).astype(np.int64)
            confidence = np.concatenate([confidence, [confidence_of(d.record.value) for d in extra]]).astype(np.float32)
            lengths = np.concatenate([lengths, [sum(c.values()) for c in counts]]).astype(np.float32)
            tfs = [
                np.concatenate([tf, [c.get(t, 0) for c in counts]]).astype(np.float32)
                for tf, t in zip(tfs, terms, strict=True)
            ]
            cosine = np.concatenate([cosine, self._overlay_cosines(plan)])
            eligible = np.concatenate([eligible, [d.indexed for d in extra]])
        bm25 = None
        if plan.mode != "semantic":  # the in-process index's arithmetic: float32, term by term, in query order
            bm25 = np.zeros(len(keys), dtype=np.float32)
            for term, tf in zip(terms, tfs, strict=True):
                has = tf > 0
                bm25[has] += keyword.bm25(tf[has], lengths[has], stats.idf(term), stats.avgdl)
        ideal = keyword.ideal(stats.idf(term) for term in terms)
        if plan.vector is not None:
            self._cosines(keys, cosine, eligible, bm25, ideal, updated, confidence, cap)
        return keys, Signals(
            eligible, updated, confidence, bm25=bm25, cosine=cosine if plan.vector is not None else None, ideal=ideal
        )

    def _cosines(
        self,
        keys: list[bytes],
        cosine: Any,
        eligible: Any,
        bm25: Any,
        ideal: float,
        updated: Any,
        confidence: Any,
        cap: float,
    ) -> None:
        """Fill in the cosines the vector lists did not give (NaN), in place: only of the candidates that can
        still reach the page with the highest cosine an item off those lists can have (``cap``, the lists'
        last cosine; 0 when they hold every vector in scope); the others cannot rank: they become ineligible.
        Cosines fetched in an earlier round are not fetched again; the floor they are measured against (the
        page's last score with the vector lists' cosines alone) is kept for the next round's reads."""
        unknown = np.isnan(cosine)
        if not unknown.any():
            return
        need = unknown.copy()
        request, p = self.request, self.request.profile
        want = request.offset + request.limit
        if request.accept is None and bm25 is not None and len(keys) > want:
            base = p.confidence * confidence.astype(np.float64) + p.recency * recency_score(
                updated, self.now, p.half_life_hours
            )
            keyword_weight, semantic_weight = fusion_weights(self.s.model or None)
            kw = keyword_weight * keyword_score(bm25, ideal)
            known = semantic_score(np.where(unknown, 0.0, cosine))
            low = p.similarity * (kw + semantic_weight * known) + base
            sure = eligible & ((bm25 > 0) | (~unknown & (cosine > 0)))  # certain to have evidence
            if sure.sum() >= want:
                floor = np.partition(low[sure], -want)[-want]
                self._floor = float(floor) - SLACK
                top = max(min(cap, 1.0), 0.0)
                high = p.similarity * (kw + semantic_weight * np.where(unknown, top, known)) + base
                need &= high >= floor - SLACK
        chosen = np.flatnonzero(need)
        fetched = self._fetched
        missing = [keys[i] for i in chosen if keys[i] not in fetched]
        if missing:
            rows = self._run(
                " UNION ALL ".join(
                    f"SELECT key, -(embedding <#> %(q)s::vector)::float8 FROM {table} "
                    "WHERE repo = %(repo)s AND branch = %(branch)s AND key = ANY(%(keys)b)"
                    for table in ("engram_doc_vectors", "engram_doc_vectors_fresh")
                ),
                {
                    "q": self._query_text,
                    "repo": self.s.db.repo,
                    "branch": self.branch,
                    "keys": missing,
                },
            )
            fetched.update(dict.fromkeys(missing, 0.0))  # no vector: 0
            fetched.update((bytes(k), float(c)) for k, c in rows)
        cosine[chosen] = [fetched[keys[i]] for i in chosen]
        dropped = unknown & ~need
        cosine[dropped] = 0.0
        eligible[dropped] = False

    def _overlay_cosines(self, plan: ModePlan) -> Any:
        """Cosines of the overlay's documents (0 for unindexed ones), their vectors looked up through the cache and
        scored by PostgreSQL, as the rows' are: a past search then equals a branch rebuilt at that version."""
        extra = self.extra
        if plan.vector is None or self.s.embedder is None:
            return np.zeros(len(extra))
        wanted = [j for j, d in enumerate(extra) if d.indexed]
        out = np.zeros(len(extra))
        if wanted:
            try:
                vectors = embed_through(self.s.embedder, self.s.cache, [extra[j].vector_text for j in wanted])
            except EmbedderError:
                return out
            rows = self._run(
                "SELECT -(u.e::vector <#> %(q)s::vector)::float8 FROM unnest(%(vectors)s::text[]) WITH ORDINALITY "
                "AS u(e, n) ORDER BY u.n",
                {"q": vector_text(plan.vector), "vectors": [vector_text(v) for v in stored(np.stack(vectors))]},
            )
            out[wanted] = [float(r[0]) for r in rows]
        return out

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
        """Fetch and decode the records of these rows (those not fetched yet; fetched with their rows: decoded)."""
        missing = [key for key in keys if key not in self.records]
        if self._raw:
            self.records.update((key, decode_record(self._raw[key])) for key in missing if key in self._raw)
            missing = [key for key in missing if key not in self.records]
        if missing:
            rows = self._run(
                "SELECT key, record FROM engram_docs WHERE repo = %s AND branch = %s AND key = ANY(%b)",
                (self.s.db.repo, self.branch, missing),
            )
            self.records.update((bytes(k), decode_record(bytes(r))) for k, r in rows)

    def _hit(self, key: bytes) -> Hit:
        namespace, item_key = codec.decode_key(key)
        return Hit(namespace, item_key, self.records[key])

    def _fetch(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return self._run(sql, params, binary=True)


__all__ = ["MAX_ROUNDS", "SMALL_SCOPE", "PgQuery"]
