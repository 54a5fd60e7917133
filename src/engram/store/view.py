"""Read-only views of the memory at one version."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from engram.errors import ReadOnlyError
from engram.hashing import ChunkId
from engram.index.corpus import CorpusStats
from engram.index.docs import DocIndex
from engram.objects import Commit
from engram.repo import Repository
from engram.store.indexing import IndexPool
from engram.store.item import SearchResults
from engram.store.ops import SearchOp
from engram.store.querycache import QueryCache, for_pool
from engram.store.reader import Reader
from engram.store.search import Overlay


class View(Reader):
    """A read-only view of the memory at one commit (``mem.at(ref)``), with every read method.

    Its searches return exactly what a store built from that version would return.
    """

    def __init__(self, repo: Repository, commit: Commit, *, pool: IndexPool | None = None, branch: str = "main"):
        self.repo = repo
        self.commit = commit
        self._pool = pool if pool is not None else IndexPool.for_repository(repo)
        self._near = branch

    def _root(self) -> ChunkId:
        return self.commit.tree

    def _search_index(self) -> tuple[DocIndex, Overlay | None]:
        return self._pool.past(self._near, self.commit.tree)

    def _search_lock(self) -> AbstractContextManager[object]:
        return self._pool.index(self._near).lock

    def _query_cache(self) -> tuple[QueryCache, str] | None:
        return for_pool(self._pool)

    def _sql_stats(self, query: str) -> CorpusStats | None:
        sql = self._pool.sql
        return sql.corpus_stats(self._near, self.commit.tree, query, past=True) if sql is not None else None

    def _execute(self, request: SearchOp, now: int) -> SearchResults:
        sql = self._pool.sql  # on PostgreSQL: the branch's head rows minus what differs, plus the past versions
        found = sql.search_past(self._near, self.commit.tree, request, now) if sql is not None else None
        return found if found is not None else super()._execute(request, now)

    def put(self, *args: Any, **kwargs: Any) -> None:
        """Views are read-only."""
        raise ReadOnlyError(f"this is a read-only view of {self.commit.short_id}; write through the Memory handle")

    delete = put

    def __repr__(self) -> str:
        return f"<View {self.commit.short_id} {self.commit.message!r}>"
