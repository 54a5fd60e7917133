"""Search execution: candidates, keyword and vector signals, fusion, ranking profiles, filters, paging.

A search runs over one :class:`DocIndex` plus an optional overlay: the documents of a past version
that differ from what the index reflects. Scores for overlay documents use the past version's
corpus statistics, so a search in the past returns what an index built from that version would.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from engram.errors import EmbedderError, InvalidInputError
from engram.index import text as analysis
from engram.index.docs import NEVER, Doc, DocIndex, confidence_of
from engram.index.keyword import Stats, bm25
from engram.objects import Record
from engram.store.filters import compile_filter, matches
from engram.store.item import Item, SearchItem, SearchResults
from engram.store.ops import SearchOp
from engram.store.ranking import get_profile

MODES = ("hybrid", "semantic", "keyword")
#: Weight of the keyword signal in hybrid fusion (the vector signal gets the rest); see docs/search.md.
KEYWORD_WEIGHT = 0.7


def check(request: SearchOp) -> SearchOp:
    """Validate a search operation; return it."""
    if not isinstance(request.limit, int) or request.limit < 0:
        raise InvalidInputError(f"limit must be a non-negative integer, got {request.limit!r}")
    if not isinstance(request.offset, int) or request.offset < 0:
        raise InvalidInputError(f"offset must be a non-negative integer, got {request.offset!r}")
    if request.mode is not None and request.mode not in MODES:
        raise InvalidInputError(f"unknown search mode {request.mode!r}: use hybrid, semantic or keyword")
    if request.min_score is not None and (
        isinstance(request.min_score, bool)
        or not isinstance(request.min_score, int | float)
        or not math.isfinite(request.min_score)
    ):
        raise InvalidInputError(f"min_score must be a finite number, got {request.min_score!r}")
    if request.query is not None and not isinstance(request.query, str):
        raise InvalidInputError(f"query must be a string, got {type(request.query).__name__}")
    return request


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
                rows[chosen] = np.stack(index.vectors_for([self.docs[j].text for j in chosen]))
            self._vectors = rows
        return self._vectors


def _recency(updated: npt.NDArray[np.int64], now_ms: int, half_life_hours: float) -> npt.NDArray[np.float32]:
    age_hours = np.maximum(now_ms - updated, 0) / 3_600_000.0
    return np.asarray(np.power(0.5, age_hours / half_life_hours), dtype=np.float32)


class _Corpus:
    """Head slots and overlay documents side by side, as flat arrays."""

    def __init__(self, index: DocIndex, overlay: Overlay | None, prefix: tuple[str, ...], now_ms: int) -> None:
        self.index = index
        self.overlay = overlay
        self.extra = overlay.docs if overlay is not None else []
        n = index.size
        self.n = n
        mask = index.namespace_mask(prefix) & (index.expires[:n] > now_ms)
        if overlay is None:
            self.candidates, self.indexed = mask, index.indexed[:n]
            self.updated, self.confidence = index.updated[:n], index.confidence[:n]
            self.stats = index.keyword.stats
            return
        mask[overlay.excluded] = False
        extra_ok = np.array([ns[: len(prefix)] == prefix for ns in overlay.namespaces], dtype=bool)
        extra_ok &= overlay.expires > now_ms
        self.candidates = np.concatenate([mask, extra_ok])
        self.indexed = np.concatenate([index.indexed[:n], overlay.indexed])
        self.updated = np.concatenate([index.updated[:n], overlay.updated])
        self.confidence = np.concatenate([index.confidence[:n], overlay.confidence])
        self.stats = overlay.stats

    def doc(self, i: int) -> Doc:
        found = self.index.docs[i] if i < self.n else self.extra[i - self.n]
        assert found is not None
        return found

    def keyword(self, terms: list[str]) -> npt.NDArray[np.float32]:
        head = self.index.keyword.scores(terms, self.n, self.stats)
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

    def cosine(self, query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        vectors = self.index.vectors
        assert vectors is not None
        head = vectors.scores(query, self.n)
        if self.overlay is None:
            return head
        return np.concatenate([head, np.asarray(self.overlay.vectors(self.index) @ query, dtype=np.float32)])


def execute(index: DocIndex, request: SearchOp, now_ms: int, overlay: Overlay | None = None) -> SearchResults:
    """Run a search against an index (and overlay) at time ``now_ms``."""
    check(request)
    compiled = compile_filter(request.filter)
    with index.lock:
        corpus = _Corpus(index, overlay, request.namespace_prefix, now_ms)
        if request.query is None:
            order = _listing_order(corpus, request.offset + request.limit)
            items = _page(corpus, order, None, compiled, request)
            return SearchResults(items, "list", request.mode or "list")
        return _ranked(index, corpus, request, compiled, now_ms)


def _listing_order(corpus: _Corpus, want: int) -> Iterator[int]:
    return _best_first(corpus.updated.astype(np.float64), corpus.candidates, want, corpus)


def _min_max(values: npt.NDArray[np.float32], cand: npt.NDArray[np.bool_]) -> npt.NDArray[np.float32]:
    """Scale to [0, 1] over the candidates (when they are all equal: 1 where positive, else 0)."""
    if not cand.any():
        return np.zeros_like(values)
    low, high = float(values[cand].min()), float(values[cand].max())
    if high <= low:  # one candidate, or all tied: a positive signal counts in full
        return np.asarray(values > 0, dtype=np.float32) if high > 0 else np.zeros_like(values)
    return np.asarray(np.clip((values - low) / (high - low), 0.0, 1.0), dtype=np.float32)


def fuse(
    kw: npt.NDArray[np.float32], cos: npt.NDArray[np.float32], cand: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Hybrid similarity in [0, 1]: ``KEYWORD_WEIGHT`` x min-max BM25 + the rest x min-max cosine.

    Scores, not ranks, are fused: reciprocal-rank fusion of the same two signals lost 6 points of
    recall@10 on LoCoMo, because it throws away how much better the best keyword match is.
    Returns (similarity, normalised BM25, normalised cosine).
    """
    kw_norm, cos_norm = _min_max(kw, cand), _min_max(cos, cand)
    sim = np.asarray(KEYWORD_WEIGHT * kw_norm + (1 - KEYWORD_WEIGHT) * cos_norm, dtype=np.float32)
    return sim, kw_norm, cos_norm


def _ranked(index: DocIndex, corpus: _Corpus, request: SearchOp, compiled: Any, now_ms: int) -> SearchResults:
    requested: str = request.mode or ("hybrid" if index.embedder is not None else "keyword")
    mode, degraded = requested, None
    qvec: npt.NDArray[np.float32] | None = None
    if mode in ("hybrid", "semantic"):
        try:
            if index.embedder is None:
                raise EmbedderError("no embedder is configured for this store")
            if index.vector_error is not None:
                raise EmbedderError(index.vector_error)
            qvec = index.query_vector(request.query or "")
        except EmbedderError as exc:
            if mode == "semantic":
                raise
            mode, degraded = "keyword", f"embedder unavailable, ran keyword search instead: {exc}"
    cand = corpus.candidates & corpus.indexed
    size = len(cand)
    kw = corpus.keyword(analysis.terms(request.query or "")) if mode != "semantic" else np.zeros(size, np.float32)
    cos = corpus.cosine(qvec) if qvec is not None else np.zeros(size, np.float32)
    top_kw = float(kw[cand].max()) if cand.any() else 0.0
    kw_norm = kw / top_kw if top_kw > 0 else kw
    cos_norm: npt.NDArray[np.float32] | None = None
    if mode == "keyword":
        sim = kw_norm
        cand = cand & (kw > 0)
    elif mode == "semantic":
        sim = np.clip(cos, 0.0, 1.0)
        cand = cand & (cos > 0)
    else:
        cand = cand & ((kw > 0) | (cos > 0))
        sim, kw_norm, cos_norm = fuse(kw, cos, cand)
    profile = get_profile(request.profile)
    final = profile.similarity * sim
    rec: npt.NDArray[np.float32] | None = None
    if profile.confidence:
        final = final + profile.confidence * corpus.confidence
    if profile.recency:
        rec = _recency(corpus.updated, now_ms, profile.half_life_hours)
        final = final + profile.recency * rec
    if request.min_score is not None:
        threshold = min(max(float(request.min_score), -1e30), 1e30)  # scores are small: keeps float32 in range
        cand = cand & (final >= threshold)
    order = _best_first(final, cand, request.offset + request.limit, corpus)

    def explain(i: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": mode,
            "profile": profile.name,
            "weights": {"similarity": profile.similarity, "confidence": profile.confidence, "recency": profile.recency},
            "similarity": float(sim[i]),
            "confidence": float(corpus.confidence[i]),
            "recency": float(rec[i])
            if rec is not None
            else float(_recency(corpus.updated[i : i + 1], now_ms, profile.half_life_hours)[0]),
        }
        if mode != "semantic":
            out["bm25"] = float(kw[i])
            out["bm25_normalized"] = float(kw_norm[i])
        if qvec is not None:
            out["cosine"] = float(cos[i])
            if cos_norm is not None:
                out["cosine_normalized"] = float(cos_norm[i])
            assert index.embedder is not None
            out["embedder"] = index.embedder.model_id
        if mode == "hybrid":
            out["keyword_weight"] = KEYWORD_WEIGHT
        return out

    items = _page(corpus, order, final, compiled, request, explain if request.explain else None)
    return SearchResults(items, mode, requested, degraded)


def _best_first(values: npt.NDArray[Any], cand: npt.NDArray[np.bool_], want: int, corpus: _Corpus) -> Iterator[int]:
    """Candidate positions by descending value, selected in growing rounds, so a page costs about its
    own size even when a filter rejects most of what ranks first.

    Equal values go newest first (``updated_at`` descending), then by tree key (namespace, then item
    key): the order the PostgreSQL engine uses too.
    """
    idx = np.flatnonzero(cand)
    take = max(4 * want, 64)
    while len(idx):
        vals = values[idx]
        if take < len(idx):
            part = np.argpartition(-vals, take - 1)[:take]
            cut = vals[part].min()
            chosen = vals >= cut  # keep every tie at the cut
        else:
            chosen = np.ones(len(idx), dtype=bool)
        yield from sorted(
            idx[chosen].tolist(), key=lambda i: (-float(values[i]), -int(corpus.updated[i]), corpus.doc(i).key)
        )
        idx = idx[~chosen]
        take *= 4


def _page(
    corpus: _Corpus,
    order: Iterator[int],
    scores: npt.NDArray[np.float32] | None,
    compiled: Any,
    request: SearchOp,
    explain: Any = None,
) -> list[SearchItem]:
    out: list[SearchItem] = []
    skipped = 0
    for i in order:
        doc = corpus.doc(i)
        if compiled is not None and not matches(compiled, doc.record.value):
            continue
        if skipped < request.offset:
            skipped += 1
            continue
        if len(out) >= request.limit:
            break
        out.append(_search_item(doc, None if scores is None else float(scores[i]), explain(i) if explain else None))
    return out


def _search_item(doc: Doc, score: float | None, explain: dict[str, Any] | None) -> SearchItem:
    return search_item(doc.namespace, doc.item_key, doc.record, score, explain)


def search_item(
    namespace: tuple[str, ...], key: str, record: Record, score: float | None, explain: dict[str, Any] | None
) -> SearchItem:
    """A search result from a stored record (shared by the in-process and the PostgreSQL engines)."""
    base = Item.from_record(namespace, key, record)
    return SearchItem(
        namespace=base.namespace,
        key=base.key,
        value=base.value,
        created_at=base.created_at,
        updated_at=base.updated_at,
        expires_at=base.expires_at,
        author=base.author,
        sources=base.sources,
        score=score,
        explain=explain,
    )


__all__ = ["KEYWORD_WEIGHT", "NEVER", "Overlay", "check", "execute", "search_item"]
