"""Read-only views of the memory at one version."""

from __future__ import annotations

from typing import Any

from engram.errors import ReadOnlyError
from engram.hashing import ChunkId
from engram.objects import Commit
from engram.repo import Repository
from engram.store.indexing import IndexPool
from engram.store.reader import Reader


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

    def _searched(self) -> tuple[IndexPool, str, bool]:
        return self._pool, self._near, True

    def put(self, *args: Any, **kwargs: Any) -> None:
        """Views are read-only."""
        raise ReadOnlyError(f"this is a read-only view of {self.commit.short_id}; write through the Memory handle")

    delete = put

    def __repr__(self) -> str:
        return f"<View {self.commit.short_id} {self.commit.message!r}>"
