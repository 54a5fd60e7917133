"""LangGraph's vector search for :class:`EngramStore`: every item in scope ranked by its best field.

An item's searchable texts are LangGraph's: for each field path of the item's own ``index`` list (else
the store's ``fields``), the texts ``get_text_at_path`` finds there (``$`` is the whole value as sorted
JSON; ``a[*]`` gives one text per element). Each text has one vector. A query ranks every item in scope
(after the filter): an item's score is its best text's, computed as PostgresStore does for the store's
``distance_type`` (cosine similarity, inner product, or minus the L2 distance); items without a text
(``index=False``, no field present) follow with score None, newest first.

Vectors are derived data: they come from the store's vector cache, by model id and text hash, so a text
is embedded once whatever the version or item that holds it. Those a query needs are kept in process in
one float32 matrix, so ranking N texts is one matrix product, not N lookups.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from langgraph.store.base import get_text_at_path

from engram.embed import Embedder
from engram.errors import EmbedderError
from engram.index.cache import QueryVectors, VectorCache, embed_through, text_hash
from engram.integrations._langgraph_reads import Entry

DistanceType = Literal["cosine", "inner_product", "l2"]
DISTANCE_TYPES: tuple[DistanceType, ...] = ("cosine", "inner_product", "l2")
#: Vectors kept in process beyond what the current query needs, in bytes (those of one query are always kept).
BUDGET = 64 << 20


def item_texts(value: dict[str, Any], paths: Sequence[str]) -> list[str]:
    """The texts LangGraph embeds for ``value`` at ``paths``, in order (one vector each)."""
    texts: list[str] = []
    for path in paths:
        texts.extend(get_text_at_path(value, path))
    return texts


def searchable_texts(entry: Entry, fields: Sequence[str]) -> list[str]:
    """The texts of an item: none when it was put with ``index=False``, else those of its own field list or
    the store's ``fields``."""
    chosen = entry.record.extra.get("index")
    if chosen is False:
        return []
    return item_texts(entry.record.value, chosen if isinstance(chosen, list) else fields)


class FieldVectors:
    """Vectors of field texts, read through a persistent vector cache and kept in one in-process matrix."""

    def __init__(self, embedder: Embedder, cache: VectorCache, budget: int = BUDGET) -> None:
        self.embedder = embedder
        self.cache = cache
        self.budget = budget
        self._rows: dict[bytes, int] = {}
        self._matrix = np.zeros((0, embedder.dim), dtype=np.float32)
        self._used = 0
        self._queries = QueryVectors()
        self._lock = threading.Lock()

    def query(self, text: str) -> npt.NDArray[np.float32]:
        """The query's vector (``embed_query``; the last 1,024 distinct queries are remembered)."""
        vector = np.asarray(self._queries.get(self.embedder, text), dtype=np.float32).reshape(-1)
        return _checked(vector, self.embedder.dim)

    def matrix(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One row per text, embedding (through the cache) only the texts never seen before."""
        hashes = [text_hash(t) for t in texts]
        while True:
            with self._lock:
                rows = [self._rows.get(h) for h in hashes]
                if None not in rows:
                    return self._matrix[np.asarray(rows, dtype=np.int64)]
                missing = {h: t for h, t, row in zip(hashes, texts, rows, strict=True) if row is None}
            found = embed_through(self.embedder, self.cache, list(missing.values()))
            with self._lock:
                self._add(list(zip(missing, found, strict=True)), set(hashes))

    def _add(self, new: list[tuple[bytes, npt.NDArray[np.float32]]], keep: set[bytes]) -> None:
        dim = self.embedder.dim
        if self._used + len(new) > len(self._matrix):
            row_bytes = 4 * dim
            if (self._used + len(new)) * row_bytes > self.budget and self._used > 2 * len(keep):
                kept = [h for h in self._rows if h in keep]  # over budget: keep only what this query needs
                matrix = self._matrix[[self._rows[h] for h in kept]] if kept else self._matrix[:0]
                self._rows = {h: i for i, h in enumerate(kept)}
                self._used = len(kept)
            else:
                matrix = self._matrix[: self._used]
            grown = np.zeros((max(2 * (self._used + len(new)), 1024), dim), dtype=np.float32)
            grown[: len(matrix)] = matrix
            self._matrix = grown
        for h, vector in new:
            if h not in self._rows:
                self._matrix[self._used] = _checked(np.asarray(vector, dtype=np.float32).reshape(-1), dim)
                self._rows[h] = self._used
                self._used += 1


def _checked(vector: npt.NDArray[np.float32], dim: int) -> npt.NDArray[np.float32]:
    if vector.shape != (dim,):
        raise EmbedderError(f"the embeddings gave a vector of {vector.size} numbers, but the index has dims={dim}")
    return vector


def similarities(
    matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32], distance: DistanceType
) -> npt.NDArray[np.float64]:
    """Scores of each row against the query, higher is closer, as PostgresStore reports them: cosine similarity
    (0 for an all-zero vector), inner product, or minus the Euclidean distance."""
    dots = (matrix @ query).astype(np.float64)
    if distance == "inner_product":
        return dots
    q2 = float(query.astype(np.float64) @ query.astype(np.float64))
    norms2: npt.NDArray[np.float64] = np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64)
    if distance == "l2":
        distances: npt.NDArray[np.float64] = np.sqrt(np.maximum(norms2 + q2 - 2 * dots, 0.0))
        return -distances
    scale = np.sqrt(norms2 * q2)
    cosine: npt.NDArray[np.float64] = np.divide(dots, scale, out=np.zeros_like(dots), where=scale > 0)
    return cosine


def rank(
    entries: Sequence[Entry],
    fields: Sequence[str],
    vectors: FieldVectors,
    query: str,
    distance: DistanceType,
) -> list[tuple[Entry, float | None]]:
    """Every entry (given newest first), best first: scored items by their best text, then those without a
    text (score None) in the given order."""
    texts: list[str] = []
    owners: list[int] = []
    for i, entry in enumerate(entries):
        found = searchable_texts(entry, fields)
        texts.extend(found)
        owners.extend([i] * len(found))
    best = np.full(len(entries), np.nan)
    if texts:
        scores = similarities(vectors.matrix(texts), vectors.query(query), distance)
        owner = np.asarray(owners, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        best[owner[starts]] = np.maximum.reduceat(scores, starts)
    scored = np.flatnonzero(~np.isnan(best))
    order = scored[np.argsort(-best[scored], kind="stable")]
    ranked: list[tuple[Entry, float | None]] = [(entries[i], float(best[i])) for i in order.tolist()]
    ranked.extend((entries[i], None) for i in np.flatnonzero(np.isnan(best)).tolist())
    return ranked
