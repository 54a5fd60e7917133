"""Search for the memory API: a :class:`SearchOp` checked and turned into an engine request, and the
engine's hits turned into :class:`SearchResults`.

The engines and the one ranking function live in the index layer (:mod:`engram.index.engine` in
process, :mod:`engram.index.pgengine` in PostgreSQL, :mod:`engram.index.ranking` for both).
"""

from __future__ import annotations

import math
from typing import Any

from engram.errors import InvalidInputError
from engram.index import engine
from engram.index.corpus import CorpusStats
from engram.index.docs import DocIndex
from engram.index.engine import NEVER, Overlay
from engram.index.ranking import KEYWORD_WEIGHT, PROFILES, Hits, Request, get_profile
from engram.objects import Record
from engram.store.filters import compile_filter, matches
from engram.store.item import SearchItem, SearchResults
from engram.store.operations import SearchOp

MODES = ("hybrid", "semantic", "keyword")


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
    if request.rerank is not None and request.query is None:
        raise InvalidInputError("rerank needs a query: a listing has nothing to rerank")
    if request.stats is not None and not isinstance(request.stats, CorpusStats):
        raise InvalidInputError(f"stats must be CorpusStats, got {type(request.stats).__name__}")
    return request


def engine_request(op: SearchOp) -> Request:
    """A checked search operation as the engines take it: the filter compiled into a predicate, the
    profile resolved (a listing has no profile to resolve)."""
    check(op)
    compiled = compile_filter(op.filter)
    accept = None if compiled is None else (lambda value: matches(compiled, value))
    profile = get_profile(op.profile) if op.query is not None else PROFILES["similarity"]
    min_score = None if op.min_score is None else float(op.min_score)
    return Request(
        op.namespace_prefix, op.query, op.mode, profile, op.limit, op.offset, min_score, op.explain, accept, op.stats,
        op.hide_system and not op.namespace_prefix,
    )  # fmt: skip


def results(found: Hits) -> SearchResults:
    """An engine's hits as the memory API's results."""
    items = [search_item(h.namespace, h.key, h.record, h.score, h.explain) for h in found.hits]
    return SearchResults(items, found.mode, found.requested, found.degraded, found.lag)


def execute(index: DocIndex, request: SearchOp, now_ms: int, overlay: Overlay | None = None) -> SearchResults:
    """Run a search against an index (and overlay) at time ``now_ms``, in process."""
    return results(engine.run(index, engine_request(request), now_ms, overlay))


def search_item(
    namespace: tuple[str, ...], key: str, record: Record, score: float | None, explain: dict[str, Any] | None
) -> SearchItem:
    """A search result from a stored record (shared by the in-process and the PostgreSQL engines)."""
    return SearchItem.found(namespace, key, record, score, explain)


__all__ = ["KEYWORD_WEIGHT", "NEVER", "Overlay", "check", "engine_request", "execute", "results", "search_item"]
