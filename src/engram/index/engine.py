"""The in-process search engine: candidates with raw BM25 and cosine from a :class:`DocIndex`.

A search runs over one index plus an optional overlay: the documents of a past version that differ
from what the index reflects. Scores for overlay documents use the past version's corpus statistics,
so a search in the past returns what an index built from that version would. Ranking, paging and
explain are :mod:`engram.index.ranking`'s, shared with the PostgreSQL engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.codec import is_system
from engram.index import keyword as bm25_index
from engram.index import text as analysis
from engram.index.doclist import Doc, confidence_of
from engram.index.docs import NEVER, DocIndex
from engram.index.keyword import Stats, bm25
from engram.index.ranking import (
    Hit,
    Hits,
    Request,
    Signals,
    best_first,
    best_matches,
    plan_mode,
    rank_page,
    select,
    shortlist_size,
)
from engram.index.vector import cosines, stored
from engram.objects import Record


class Overlay:
    """Past versions to score instead of the index's slots ``excluded``, with the past corpus stats.

    Built once per (index root, past root) and reused: per-document arrays are precomputed, and
    vectors are looked up (through the cache) on the first semantic query only.
    """

    def __init__(self, excluded: set[int], docs: list[Doc], stats: Stats) -> None:
        self.excluded = np.fromiter(excluded, dtype=np.int64, count=len(excluded))
        self.docs = docs
        self.stats = stats
        self.namespaces = [d.namespace for d in docs]
        self.expires = np.array([NEVER if d.record.expires_at is None else d.record.expires_at for d in docs], np.int64)
        self.indexed = np.array([d.indexed for d in docs], dtype=bool)
        self.updated = np.array([d.record.updated_at for d in docs], dtype=np.int64)
        self.confidence = np.array([confidence_of(d.record.value) for d in docs], dtype=np.float32)
        self.lengths = np.array([len(d.terms) for d in docs], dtype=np.float32)
        self.counts = [Counter(d.terms) for d in docs]
        self._vectors: npt.NDArray[np.float32] | None = None

    def vectors(self, index: DocIndex) -> npt.NDArray[np.float32]:
        """The documents' vectors (zero rows for unindexed ones), looked up once."""
        if self._vectors is None:
            assert index.vectors is not None
            rows = np.zeros((len(self.docs), index.vectors.dim), dtype=np.float32)
            chosen = [j for j, d in enumerate(self.docs) if d.indexed]
            if chosen:
                rows[chosen] = stored(np.stack(index.vectors_for([self.docs[j].vector_text for j in chosen])))
            self._vectors = rows
        return self._vectors


class _Corpus:
    """The documents a search ranks, as flat arrays over *positions*: head slots, then overlay documents.

    A search over the whole index takes every slot as a position (position = slot). A search whose scope (its
    namespace prefix, alive and unexpired) holds at most ``DocIndex.scope_exact`` items takes only the scope's
    slots (``slots``): its keyword scores are read from the postings at those slots and its cosines computed for
    them exactly, so its cost follows the scope, not the store (a small tenant in a large store).
    """

    def __init__(
        self,
        index: DocIndex,
        overlay: Overlay | None,
        prefix: tuple[str, ...],
        now_ms: int,
        filtered: bool = False,
        hide_system: bool = False,
    ) -> None:
        self.index = index
        self.overlay = overlay
        self.extra = overlay.docs if overlay is not None else []
        self.slots: npt.NDArray[np.int64] | None = None
        mask = index.namespace_mask(prefix, hide_system) & (index.expires[: index.size] > now_ms)
        if overlay is not None:
            mask[overlay.excluded] = False
        if prefix and _exact_scope(int(np.count_nonzero(mask)), len(index), index.scope_exact, filtered):
            self.slots = slots = np.flatnonzero(mask)
            index.embed_scope(slots)  # the scope's latest writes, before a background indexer gets to them
            n = self.n = len(slots)
            mask = np.ones(n, dtype=bool)
            indexed, updated, confidence = index.indexed[slots], index.updated[slots], index.confidence[slots]
        else:
            n = self.n = index.size
            indexed, updated, confidence = index.indexed[:n], index.updated[:n], index.confidence[:n]
        self.stats = index.keyword.stats
        if overlay is None:
            self.candidates, self.indexed, self.updated, self.confidence = mask, indexed, updated, confidence
            return
        extra_ok = np.array(
            [ns[: len(prefix)] == prefix and not (hide_system and is_system(ns)) for ns in overlay.namespaces],
            dtype=bool,
        )
        extra_ok &= overlay.expires > now_ms
        self.candidates = np.concatenate([mask, extra_ok])
        self.indexed = np.concatenate([indexed, overlay.indexed])
        self.updated = np.concatenate([updated, overlay.updated])
        self.confidence = np.concatenate([confidence, overlay.confidence])
        self.stats = overlay.stats

    @property
    def scoped(self) -> bool:
        """Whether the positions are the scope's slots only (exact scoring of a small scope)."""
        return self.slots is not None

    def slot(self, i: int) -> int:
        """The head slot at a position below ``n``."""
        return i if self.slots is None else int(self.slots[i])

    def key(self, i: int) -> bytes:
        return self.index.docs.key(self.slot(i)) if i < self.n else self.extra[i - self.n].key

    def entry(self, i: int) -> tuple[tuple[str, ...], str, Record]:
        if i < self.n:
            return self.index.docs.entry(self.slot(i))
        doc = self.extra[i - self.n]
        return doc.namespace, doc.item_key, doc.record

    def keyword(self, terms: list[str]) -> npt.NDArray[np.float32]:
        if self.slots is None:
            head = self.index.keyword.scores(terms, self.n, self.stats)
        else:
            head = self.index.keyword.scores_at(terms, self.slots, self.stats)
        if self.overlay is None:
            return head
        overlay = self.overlay
        extra = np.zeros(len(overlay.docs), dtype=np.float32)
        for term in dict.fromkeys(terms):
            tf = np.array([counts.get(term, 0) for counts in overlay.counts], dtype=np.float32)
            hit = (tf > 0) & overlay.indexed
            if hit.any():
                extra[hit] += bm25(tf[hit], overlay.lengths[hit], self.stats.idf(term), self.stats.avgdl)
        return np.concatenate([head, extra])

    def cosine(
        self, query: npt.NDArray[np.float32], eligible: npt.NDArray[np.bool_], want: int, *, overlap: bool = False
    ) -> Callable[[npt.NDArray[Any] | None, npt.NDArray[np.int64] | None], tuple[npt.NDArray[np.float32], bool]]:
        """Start a vector search; the function returned finishes it with the query's BM25 (or None) and, when
        the caller has them, its best keyword matches (:func:`best_matches` of the BM25), and gives the cosine
        of every position (exact for the best keyword matches too) and whether it is exact for every eligible
        position (see :meth:`VectorIndex.search`). With ``overlap`` the graph is searched while the caller
        scores keywords (:meth:`VectorIndex.start`). A scoped corpus computes every eligible cosine exactly."""
        vectors = self.index.vectors
        assert vectors is not None
        n = self.n
        if self.slots is not None:
            head = np.zeros(n, dtype=np.float32)
            chosen = np.flatnonzero(eligible[:n])
            if len(chosen):
                head[chosen] = cosines(vectors.rows(self.slots[chosen]), query)

            def exact(
                bm25: npt.NDArray[Any] | None, matches: npt.NDArray[np.int64] | None
            ) -> tuple[npt.NDArray[np.float32], bool]:
                return self._with_past(head, query), True

            return exact
        head_search = vectors.start(query, n, eligible[:n], want, overlap=overlap)

        def finish(
            bm25: npt.NDArray[Any] | None, matches: npt.NDArray[np.int64] | None
        ) -> tuple[npt.NDArray[np.float32], bool]:
            extra = None
            # the caller's matches are the top computed below when they hold all the head's, or its top 256
            reuse = matches is not None and (
                len(matches) < KEYWORD_EXACT or (len(matches) == KEYWORD_EXACT and n == len(eligible))
            )
            if bm25 is not None and vectors.approximate and reuse:
                assert matches is not None
                extra = matches[matches < n]
            if bm25 is not None and vectors.approximate and extra is None:
                matched = np.flatnonzero((bm25[:n] > 0) & eligible[:n])
                if len(matched) > KEYWORD_EXACT:
                    matched = matched[np.argpartition(-bm25[matched], KEYWORD_EXACT - 1)[:KEYWORD_EXACT]]
                extra = matched.astype(np.int64)
            head, complete = head_search(extra)
            return self._with_past(head, query), complete

        return finish

    def _with_past(self, head: npt.NDArray[np.float32], query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The head positions' cosines, then the overlay documents' (computed as the head's are)."""
        if self.overlay is None:
            return head
        return np.concatenate([head, cosines(self.overlay.vectors(self.index), query)])


#: A scope of up to this many items that is a small share of the index (at most 1 in ``SCOPE_SHARE``), or any
#: filtered scope up to this size, is scored exactly too: the graph would be asked for many times the page's
#: neighbours (the page over the scope's share, and over the filter's), more than scoring the scope costs.
SCOPE_SMALL_SHARE = 20_000
SCOPE_SHARE = 8


def _exact_scope(count: int, size: int, limit: int, filtered: bool) -> bool:
    """Whether a scope of ``count`` items in an index of ``size`` live items is scored exactly (``limit``: the
    index's ``scope_exact``; 0 turns scoping off). A scope of half the index or more gains nothing from it."""
    if 2 * count >= size or limit <= 0:
        return False
    return count <= limit or (count <= SCOPE_SMALL_SHARE and (filtered or count * SCOPE_SHARE <= size))


#: Nearest vectors asked of the graph per query, at least (twice the page when that is more).
NEAREST_MIN = 32
#: In a hybrid search over the graph, the best keyword matches get their exact cosine too.
KEYWORD_EXACT = 256


def run(index: DocIndex, request: Request, now_ms: int, overlay: Overlay | None = None) -> Hits:
    """Run a search against an index (and overlay) at time ``now_ms``."""
    with index.lock:
        corpus = _Corpus(index, overlay, request.prefix, now_ms, request.accept is not None, request.hide_system)
        if request.stats is not None:  # a fan-out's statistics of every repository (engram.index.corpus)
            corpus.stats = request.stats.stats()
        want = request.offset + request.limit
        admit = None if request.accept is None else _admit(corpus, request.accept)
        if request.text is None:  # a listing: newest first
            positions = np.flatnonzero(corpus.candidates)
            updated = corpus.updated[positions]
            chosen = select(
                best_first(updated, updated, positions, corpus.key, want), request.offset, request.limit, admit
            )
            return Hits([Hit(*corpus.entry(i)) for i in chosen], "list", request.mode or "list")
        text = request.text
        plan = plan_mode(
            request.mode,
            has_embedder=index.embedder is not None,
            vector_error=index.vector_error,
            embed=lambda: index.query_vector(text),
        )
        terms = analysis.terms(text)
        eligible = corpus.candidates & corpus.indexed
        reach = max(2 * want, NEAREST_MIN)
        # a hybrid search's graph search runs while its keywords are scored
        started = (
            corpus.cosine(plan.vector, eligible, reach, overlap=plan.mode == "hybrid")
            if plan.vector is not None
            else None
        )
        bm25 = corpus.keyword(terms) if plan.mode != "semantic" else None
        model = index.embedder.model_id if index.embedder is not None and plan.vector is not None else None
        matches = best_matches(bm25, eligible, shortlist_size(want)) if bm25 is not None else None
        while True:
            cosine, complete = None, True
            if plan.vector is not None:
                search = started if started is not None else corpus.cosine(plan.vector, eligible, reach)
                started = None
                cosine, complete = search(bm25, None if matches is None else matches[0])
            signals = Signals(
                eligible,
                corpus.updated,
                corpus.confidence,
                bm25=bm25,
                cosine=cosine,
                ideal=bm25_index.ideal(corpus.stats.idf(term) for term in dict.fromkeys(terms)),
            )
            ranking, chosen = rank_page(
                signals, plan.mode, request.profile, now_ms, request.min_score,
                key_of=corpus.key, offset=request.offset, limit=request.limit, admit=admit, matches=matches,
                embedder=model,
            )  # fmt: skip
            if complete or len(chosen) >= request.limit:
                break
            reach *= 8  # the filter rejected most of the nearest vectors the graph gave: ask for more
        hits = []
        for i, score in zip(chosen, ranking.scores_of(chosen), strict=True):
            explained = ranking.explain(i) if request.explain else None
            hits.append(Hit(*corpus.entry(i), score, explained))
        return Hits(hits, plan.mode, plan.requested, plan.degraded, len(index.pending))


def _admit(corpus: _Corpus, accept: Callable[[dict[str, Any]], bool]) -> Callable[[list[int]], list[bool]]:
    """The exact filter over corpus positions."""
    return lambda batch: [accept(corpus.entry(i)[2].value) for i in batch]


__all__ = ["NEVER", "Overlay", "run"]
