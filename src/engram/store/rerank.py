"""The second stage of a search: a reranker (a cross-encoder) rescoring the first stage's top candidates.

A search with ``rerank=`` runs its first stage (the usual hybrid, keyword or semantic search, through the
query cache) for the top ``window = max(top_k, offset + limit + 1)`` candidates, asks the reranker for one
logit per (query, text) pair and ranks those candidates by the mapped score (docs/adr/0004-rerank-scores.md)::

    rerank     = 1 / (1 + exp(-logit))            the cross-encoder's probability of relevance, 0 ... 1
    similarity = rerank                           (replaces the first stage's similarity)
    score      = w_similarity * similarity + w_confidence * confidence + w_recency * recency

The score of a returned item depends on the query and that item only (absolute, as in ADR 0002); ties go
by namespace and key as everywhere. Items past the window are not returned: a page past ``top_k`` widens
the window instead. The text read is the item's searchable text (the store's index fields).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from engram import codec
from engram.embed.rerank import Reranker, shared_reranker
from engram.errors import InvalidInputError
from engram.index.paths import document_text
from engram.index.ranking import get_profile
from engram.store.item import SearchItem, SearchResults
from engram.store.operations import SearchOp

First = Callable[[SearchOp], SearchResults]


def reranker_of(rerank: Reranker | str) -> Reranker:
    """The reranker a search names: a :class:`~engram.embed.rerank.Reranker`, or a spec (``onnx:<dir>``)."""
    if isinstance(rerank, str):
        return shared_reranker(rerank)
    if isinstance(rerank, Reranker):
        return rerank
    raise InvalidInputError(f"rerank must be a Reranker or a spec such as 'onnx:<dir>', got {type(rerank).__name__}")


def rerank_score(logit: float) -> float:
    """A cross-encoder's logit as a probability of relevance in [0, 1] (the logistic function)."""
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    e = math.exp(logit)
    return e / (1.0 + e)


def run(request: SearchOp, first: First, fields: tuple[str, ...]) -> SearchResults:
    """Run ``request`` (a query with ``rerank`` set; its page is ``offset``/``limit``): ``first`` runs the first
    stage, and its top candidates are reranked."""
    assert request.rerank is not None and request.query is not None
    reranker = reranker_of(request.rerank)
    window = max(reranker.top_k, request.offset + request.limit)
    found = first(replace(request, rerank=None, offset=0, limit=window, min_score=None, explain=True))
    profile = get_profile(request.profile)
    logits = reranker.score(request.query, [document_text(item.value, fields) for item in found])
    scored: list[tuple[float, bytes, SearchItem]] = []
    for item, logit in zip(found, logits.tolist(), strict=True):
        explained: dict[str, Any] = item.explain or {}
        parts = explained.get("components", {})
        mapped = rerank_score(logit)
        score = profile.similarity * mapped + parts.get("confidence", 0.0) + parts.get("recency", 0.0)
        if request.min_score is not None and score < request.min_score:
            continue
        shown = None
        if request.explain:
            shown = _explain(explained, item.score, logit, mapped, score, profile.similarity, reranker)
        scored.append((score, codec.encode_key(item.namespace, item.key), replace(item, score=score, explain=shown)))
    scored.sort(key=lambda entry: (-entry[0], entry[1]))
    page = [entry[2] for entry in scored[request.offset : request.offset + request.limit]]
    return SearchResults(page, found.mode, found.requested_mode, found.degraded, found.lag)


def _explain(
    first: dict[str, Any], first_score: float | None, logit: float, mapped: float, score: float, weight: float,
    reranker: Reranker,
) -> dict[str, Any]:  # fmt: skip
    """The first stage's explanation, with the rerank signal in place of its similarity."""
    components = {k: v for k, v in first.get("components", {}).items() if k in ("confidence", "recency")}
    return {
        **first,
        "formula": f"{first.get('formula', '')}; reranked: similarity = rerank = 1 / (1 + exp(-logit))",
        "first_stage": {
            "score": first_score,
            "similarity": first.get("similarity"),
            "components": first.get("components", {}),
        },
        "similarity": mapped,
        "rerank": mapped,
        "rerank_logit": logit,
        "reranker": reranker.model_id,
        "score": score,
        "components": {"rerank": weight * mapped, **components},
    }


__all__ = ["First", "rerank_score", "reranker_of", "run"]
