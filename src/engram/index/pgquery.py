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

A search in the past adds an overlay (:class:`PastOverlay`): the head rows of the items that differ are
left out, and the past versions of those items are scored in Python with the past corpus statistics.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engram import codec
from engram.errors import EmbedderError
from engram.index import keyword
from engram.index import text as analysis
from engram.index.cache import embed_through
from engram.index.docs import Doc, confidence_of
from engram.index.pglists import CONFIDENT, FRESH, NEWEST, SLACK, VECTOR, Lists
from engram.index.pgrows import counts_of, like_prefix, vector_text
from engram.index.ranking import (
    KEYWORD_WEIGHT,
    SEMANTIC_WEIGHT,
    Hit,
    Hits,
    ModePlan,
    Request,
    Signals,
    keyword_score,
    plan_mode,
    rank,
    recency_score,
    select,
    semantic_score,
)
from engram.objects import Record, decode_record

if TYPE_CHECKING:
    from engram.index.pgengine import PgEngine, PreFilter


@dataclass(slots=True)
class PastOverlay:
    """A past version against the head rows: keys whose head rows are left out, the past documents to
    score instead, and the corpus statistics' difference (documents, total length, frequencies)."""

    excluded: list[bytes]
    docs: list[Doc]
    docs_delta: int = 0
    length_delta: int = 0
    df_delta: Counter[str] = field(default_factory=Counter)


class PgQuery:
    """One search of one indexed branch (and optional past overlay)."""

    def __init__(
        self,
        engine: PgEngine,
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
        self.extra = [] if overlay is None else [d for d in overlay.docs if self._in_scope(d)]
        for doc in self.extra:
            self.records[doc.key] = doc.record

    def _in_scope(self, doc: Doc) -> bool:
        expires = doc.record.expires_at
        return doc.namespace[: len(self.request.prefix)] == self.request.prefix and (
            expires is None or expires > self.now
        )

    def run(self) -> Hits:
        """The page of hits."""
        if self.request.text is None:
            return self._listing()
        return self._ranked(self.request.text)

    # ------------------------------------------------------------------ listing

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

    # ------------------------------------------------------------------ ranked

    def _ranked(self, text: str) -> Hits:
        s, request = self.s, self.request
        head = s.db.run(
            "SELECT docs, length, vector_error, ref_avgdl, (SELECT greatest(reltuples, 0)::bigint FROM pg_class "
            "WHERE oid = 'engram_doc_vectors'::regclass), vector_pending FROM engram_index_heads "
            "WHERE repo = %s AND branch = %s",
            (s.db.repo, self.branch),
        )[0]
        plan = plan_mode(
            request.mode, has_embedder=s.embedder is not None, vector_error=head[2], embed=lambda: s.query_vector(text)
        )
        terms = list(dict.fromkeys(analysis.terms(text))) if plan.mode != "semantic" else []
        stats = self._stats(terms, int(head[0]), int(head[1]))
        want = request.offset + request.limit
        lists = Lists(
            terms,
            plan,
            request,
            stats,
            exact=s.exact(int(head[0]), int(head[4])),
            excluded=self.excluded,
            filtered=self.pushdown,
        )
        ref = float(head[3])
        model = s.model if plan.vector is not None else None
        self._query_text = vector_text(plan.vector) if plan.vector is not None else ""
        while True:
            summary, rows = self._read(lists) if lists.any() else ({}, [])
            lists.read(summary)
            keys, signals = self._signals(rows, terms, plan, stats, lists.cosine_cap())
            ranking = rank(signals, plan.mode, request.profile, self.now, request.min_score, embedder=model)
            chosen = select(ranking.order(keys.__getitem__, want), request.offset, request.limit, self._admit(keys))
            if lists.settled(ranking, chosen, request, lists.bound(ref, self.now)):
                break
            lists.deepen(ref)
        self._load([keys[i] for i in chosen])
        hits = []
        for i in chosen:
            found = self._hit(keys[i])
            explained = ranking.explain(i) if request.explain else None
            hits.append(Hit(found.namespace, found.key, found.record, ranking.score(i), explained))
        return Hits(hits, plan.mode, plan.requested, plan.degraded, int(head[5]))

    def _read(self, lists: Lists) -> tuple[dict[int, tuple[int, float]], list[tuple[Any, ...]]]:
        """Each list's first items in scope (to ``depth``; all of a short term list): per list, how many were
        read and its last value; and the items read, each with its raw signals (its cosine when the vector
        list holds it, else NaN)."""
        depths = lists.depths
        params = {**self.params, **{f"n{i}": depths[i] for i in range(len(lists.terms))}}
        params["nv"], params["nn"], params["nc"] = (depths.get(k, 0) for k in (VECTOR, NEWEST, CONFIDENT))
        where = " AND ".join(self.where)
        # a correlated scalar subquery, never turned into a join: one primary-key probe per item read
        scope = f"AND (SELECT d.indexed FROM engram_docs d WHERE {where} AND d.key = {{}}.key) "
        parts = []
        for i, term in enumerate(lists.terms):
            params[f"t{i}"] = term
            parts.append(
                f"(SELECT {i} AS l, p.key, p.impact::float8 AS v FROM engram_postings p WHERE p.repo = %(repo)s "
                f"AND p.branch = %(branch)s AND p.term = %(t{i})s {scope.format('p') if self.pushdown else ''}"
                f"ORDER BY p.impact DESC LIMIT %(n{i})s)"
            )
        if lists.vector is not None:
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
            if list_id in depths:
                parts.append(
                    f"(SELECT {list_id}, d.key, d.{column}::float8 FROM engram_docs d WHERE {where} AND d.indexed "
                    f"ORDER BY d.{column} DESC LIMIT %({limit})s)"
                )
        tfs = "".join(
            f", coalesce(d.tf_list[array_position(d.term_list, %(t{i})s)], 0)" for i in range(len(lists.terms))
        )
        empty = ", NULL::real" * len(lists.terms)
        sql = (
            f"WITH lists (l, key, v) AS MATERIALIZED ({' UNION ALL '.join(parts)}) "
            f"SELECT l, count(*), min(v), NULL::bytea, NULL::bigint, NULL::real, NULL::integer{empty} "
            f"FROM lists GROUP BY l UNION ALL SELECT l, NULL, v, key, NULL, NULL, NULL{', NULL' * len(lists.terms)} "
            f"FROM lists WHERE l IN ({VECTOR}, {FRESH}) "
            f"UNION ALL SELECT NULL, NULL, NULL, d.key, d.updated, d.confidence, d.length{tfs} FROM engram_docs d "
            f"WHERE {where} AND d.indexed AND d.key = ANY(ARRAY(SELECT DISTINCT key FROM lists))"
        )
        with self.s.db.connection() as conn, conn.pipeline():  # one round trip for both statements
            # Session settings (the pooled connection keeps them; they only steer HNSW scans).
            conn.execute(
                "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false), "
                "set_config('hnsw.ef_search', %s, false)",
                (str(min(max(params["nv"], 40), 1000)),),
            )
            cursor = conn.execute(sql, params, binary=True, prepare=False)  # a generic plan cannot see depths
            rows = cursor.fetchall()
        summary = {int(r[0]): (int(r[1]), float(r[2])) for r in rows if r[3] is None}
        near = {bytes(r[3]): float(r[2]) for r in rows if r[0] is not None and r[3] is not None}
        nan = math.nan
        return summary, [(r[3], *r[4:7], near.get(bytes(r[3]), nan), *r[7:]) for r in rows if r[0] is None]

    def _signals(
        self, rows: list[tuple[Any, ...]], terms: list[str], plan: ModePlan, stats: keyword.Stats, cap: float
    ) -> tuple[list[bytes], Signals]:
        """The candidates (rows read, then the overlay's documents) and their raw signals."""
        keys = [bytes(row[0]) for row in rows]
        width = 4 + len(terms)
        columns = [np.asarray(c, dtype=np.float64) for c in zip(*(r[1:] for r in rows), strict=True)]
        columns = columns or [np.zeros(0)] * width
        updated = columns[0].astype(np.int64)
        confidence = columns[1].astype(np.float32)
        lengths = columns[2].astype(np.float32)
        cosine = columns[3]
        tfs = [c.astype(np.float32) for c in columns[4:]]
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
        last cosine; 0 when they hold every vector in scope); the others cannot rank: they become ineligible."""
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
            kw = KEYWORD_WEIGHT * keyword_score(bm25, ideal)
            known = semantic_score(np.where(unknown, 0.0, cosine))
            low = p.similarity * (kw + SEMANTIC_WEIGHT * known) + base
            sure = eligible & ((bm25 > 0) | (~unknown & (cosine > 0)))  # certain to have evidence
            if sure.sum() >= want:
                floor = np.partition(low[sure], -want)[-want]
                top = max(min(cap, 1.0), 0.0)
                high = p.similarity * (kw + SEMANTIC_WEIGHT * np.where(unknown, top, known)) + base
                need &= high >= floor - SLACK
        chosen = np.flatnonzero(need)
        found: dict[bytes, float] = {}
        if len(chosen):
            rows = self.s.db.run(
                " UNION ALL ".join(
                    f"SELECT key, -(embedding <#> %(q)s::vector)::float8 FROM {table} "
                    "WHERE repo = %(repo)s AND branch = %(branch)s AND key = ANY(%(keys)b)"
                    for table in ("engram_doc_vectors", "engram_doc_vectors_fresh")
                ),
                {
                    "q": self._query_text,
                    "repo": self.s.db.repo,
                    "branch": self.branch,
                    "keys": [keys[i] for i in chosen],
                },
            )
            found = {bytes(k): float(c) for k, c in rows}
        cosine[chosen] = [found.get(keys[i], 0.0) for i in chosen]
        dropped = unknown & ~need
        cosine[dropped] = 0.0
        eligible[dropped] = False

    def _overlay_cosines(self, plan: ModePlan) -> Any:
        """Cosines of the overlay's documents (0 for unindexed ones), their vectors looked up once."""
        extra = self.extra
        if plan.vector is None or self.s.embedder is None:
            return np.zeros(len(extra))
        wanted = [j for j, d in enumerate(extra) if d.indexed]
        out = np.zeros(len(extra))
        if wanted:
            try:
                vectors = embed_through(self.s.embedder, self.s.cache, [extra[j].text for j in wanted])
            except EmbedderError:
                return out
            out[wanted] = np.stack(vectors) @ plan.vector
        return out

    def _stats(self, terms: list[str], total: int, length: int) -> keyword.Stats:
        """The corpus statistics of the query's terms (with the overlay's difference, in the past)."""
        overlay = self.overlay
        stats = keyword.Stats(total, length)
        if overlay is not None:
            stats.docs += overlay.docs_delta
            stats.length += overlay.length_delta
        if terms:
            rows = self.s.db.run(
                "SELECT term, df FROM engram_index_terms WHERE repo = %s AND branch = %s AND term = ANY(%s)",
                (self.s.db.repo, self.branch, terms),
            )
            stats.df.update({term: int(n) for term, n in rows})
            if overlay is not None:
                stats.df.update({t: overlay.df_delta[t] for t in terms if t in overlay.df_delta})
        return stats

    # ------------------------------------------------------------------ records

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
                "SELECT key, record FROM engram_docs WHERE repo = %s AND branch = %s AND key = ANY(%b)",
                (self.s.db.repo, self.branch, missing),
            )
            self.records.update((bytes(k), decode_record(bytes(r))) for k, r in rows)

    def _hit(self, key: bytes) -> Hit:
        namespace, item_key = codec.decode_key(key)
        return Hit(namespace, item_key, self.records[key])

    def _fetch(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self.s.db.connection() as conn:
            return list(conn.execute(sql, params, binary=True).fetchall())


__all__ = ["PastOverlay", "PgQuery"]
