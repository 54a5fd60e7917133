"""The engine a store's searches run on, chosen once when the store opens.

:class:`InProcessSearch` ranks with the branch's in-process index (:mod:`engram.index.docs`, the head's, or the
head's plus an overlay for a past version); :class:`PostgresSearch` ranks in PostgreSQL's search tables
(:mod:`engram.store.pgsearch`) and hands a search they cannot answer to the in-process engine. Every reader (the
live handle, a batch's snapshot, a view of the past) asks its store's engine the same two questions, with the
branch, the root and whether the root is a past version.
"""

from __future__ import annotations

from typing import Protocol

from engram.hashing import ChunkId
from engram.index.corpus import CorpusStats, query_terms
from engram.index.docs import DocIndex, Phases
from engram.index.engine import Overlay
from engram.store.item import SearchResults
from engram.store.operations import SearchOp
from engram.store.search import execute


class SearchEngine(Protocol):
    """What a reader asks of its store's search engine."""

    def search(self, branch: str, root: ChunkId, request: SearchOp, now: int, *, past: bool) -> SearchResults:
        """Run a checked search at ``root`` (``past``: a version other than the branch's head) at time ``now``."""
        ...

    def corpus_stats(self, branch: str, root: ChunkId, query: str, *, past: bool) -> CorpusStats:
        """The keyword statistics a search of ``query`` at ``root`` scores with."""
        ...


class Indexes(Protocol):
    """What the in-process engine needs of a store's index pool (:class:`~engram.store.indexing.IndexPool`)."""

    def index(self, branch: str) -> DocIndex:
        """The branch's index (its lock orders searches and the indexer)."""
        ...

    def current(
        self, branch: str, root: ChunkId, phases: Phases | None = None, *, search: bool = False, embed: bool = True
    ) -> DocIndex:
        """The branch's index brought to its head ``root``."""
        ...

    def past(self, branch: str, root: ChunkId) -> tuple[DocIndex, Overlay | None]:
        """An index and overlay reflecting any version ``root``."""
        ...


class SqlSearch(Protocol):
    """The PostgreSQL search tables of a store (:class:`~engram.store.pgsearch.PgSearch`): None is "run it in
    process"."""

    def search(self, branch: str, root: ChunkId, request: SearchOp, now: int) -> SearchResults | None:
        """A search at the branch head."""
        ...

    def search_past(self, branch: str, root: ChunkId, request: SearchOp, now: int) -> SearchResults | None:
        """A search at any version."""
        ...

    def corpus_stats(self, branch: str, root: ChunkId, query: str, *, past: bool = False) -> CorpusStats | None:
        """The keyword statistics of a search."""
        ...


class InProcessSearch:
    """Searches ranked with the branch's in-process index, under its lock: another thread (a search at another
    root, the background indexer) moves the index only between two searches."""

    def __init__(self, indexes: Indexes) -> None:
        self.indexes = indexes

    def _at(self, branch: str, root: ChunkId, past: bool) -> tuple[DocIndex, Overlay | None]:
        return self.indexes.past(branch, root) if past else (self.indexes.current(branch, root, search=True), None)

    def search(self, branch: str, root: ChunkId, request: SearchOp, now: int, *, past: bool) -> SearchResults:
        """See :meth:`SearchEngine.search`."""
        with self.indexes.index(branch).lock:
            index, overlay = self._at(branch, root, past)
            return execute(index, request, now, overlay)

    def corpus_stats(self, branch: str, root: ChunkId, query: str, *, past: bool) -> CorpusStats:
        """See :meth:`SearchEngine.corpus_stats`: the overlay's statistics in the past, else the index's."""
        with self.indexes.index(branch).lock:
            index, overlay = self._at(branch, root, past)
            with index.lock:
                stats = overlay.stats if overlay is not None else index.keyword.stats
                return CorpusStats.of(stats, query_terms(query))


class PostgresSearch:
    """Searches ranked in PostgreSQL; one its tables cannot answer runs in process (``fallback``)."""

    def __init__(self, sql: SqlSearch, fallback: InProcessSearch) -> None:
        self.sql = sql
        self.fallback = fallback

    def search(self, branch: str, root: ChunkId, request: SearchOp, now: int, *, past: bool) -> SearchResults:
        """See :meth:`SearchEngine.search`."""
        found = (self.sql.search_past if past else self.sql.search)(branch, root, request, now)
        return found if found is not None else self.fallback.search(branch, root, request, now, past=past)

    def corpus_stats(self, branch: str, root: ChunkId, query: str, *, past: bool) -> CorpusStats:
        """See :meth:`SearchEngine.corpus_stats`."""
        found = self.sql.corpus_stats(branch, root, query, past=past)
        return found if found is not None else self.fallback.corpus_stats(branch, root, query, past=past)


__all__ = ["InProcessSearch", "Indexes", "PostgresSearch", "SearchEngine", "SqlSearch"]
