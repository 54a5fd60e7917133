"""The search indexes of a repository: one per branch head, moved along by diffs, and past versions.

A search at a branch head syncs that branch's index to the head root (cost: the diff since the last
search). A search in the past scores the items that differ between the index's root and the past
root as an overlay; when too many differ it builds a temporary index for that root, cached by root.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence

from engram.embed.base import Embedder
from engram.hashing import ChunkId
from engram.index.cache import VectorCache
from engram.index.docs import DocIndex, make_doc
from engram.index.keyword import OverlayStats
from engram.repo import Repository
from engram.store.search import Overlay
from engram.tree import diff_trees

#: An overlay is used while at most this many items (or this share of the index) differ.
OVERLAY_MIN = 2_000
OVERLAY_SHARE = 0.05
TEMP_INDEXES = 2

# id(repo) -> its pool, for as long as some handle keeps the pool (and so the repository) alive. Keyed
# by id, not weakly by the repository: a pool refers to its repository, so a weak key would never die.
_POOLS: weakref.WeakValueDictionary[int, IndexPool] = weakref.WeakValueDictionary()


class IndexPool:
    """Search indexes of one repository, shared by every handle on it."""

    def __init__(
        self,
        repo: Repository,
        *,
        embedder: Embedder | None = None,
        fields: Sequence[str] = ("$",),
        cache: VectorCache | None = None,
    ) -> None:
        self.repo = repo
        self.embedder = embedder
        self.fields = tuple(fields)
        self.cache = cache
        self._branches: dict[str, DocIndex] = {}
        self._temp: OrderedDict[ChunkId, DocIndex] = OrderedDict()
        self._overlays: OrderedDict[tuple[ChunkId, ChunkId], Overlay] = OrderedDict()
        self._lock = threading.Lock()
        _POOLS[id(repo)] = self

    @classmethod
    def for_repository(cls, repo: Repository) -> IndexPool:
        """The pool registered for ``repo``, or a keyword-only one."""
        found = _POOLS.get(id(repo))
        return found if found is not None and found.repo is repo else cls(repo)

    def _new(self) -> DocIndex:
        return DocIndex(self.repo.nodes, fields=self.fields, embedder=self.embedder, cache=self.cache)

    def index(self, branch: str) -> DocIndex:
        """The (possibly stale) index kept for a branch."""
        with self._lock:
            found = self._branches.get(branch)
            if found is None:
                found = self._branches[branch] = self._new()
            return found

    def head(self, branch: str, root: ChunkId) -> DocIndex:
        """The branch's index, synced to ``root`` (its head)."""
        index = self.index(branch)
        index.sync(root)
        return index

    def past(self, branch: str, root: ChunkId) -> tuple[DocIndex, Overlay | None]:
        """An index and overlay that together reflect ``root`` (any version)."""
        index = self.index(branch)
        with index.lock:
            if index.root is None:
                index.sync(self.repo.commit(self.repo.head(branch)).tree)
            if index.root == root:
                return index, None
            assert index.root is not None
            key = (index.root, root)
            with self._lock:
                cached = self._overlays.get(key)
            if cached is not None:
                return index, cached
            limit = max(OVERLAY_MIN, int(len(index) * OVERLAY_SHARE))
            changes = []
            for change in diff_trees(self.repo.nodes, index.root, root):
                changes.append(change)
                if len(changes) > limit:
                    return self._temporary(root), None
            stats = OverlayStats(index.keyword.stats)
            excluded: set[int] = set()
            docs = []
            for change in changes:
                slot = index.slot_of.get(change.key)
                if slot is not None:
                    excluded.add(slot)
                    if index.indexed[slot]:
                        stats.add(index.keyword.counts(slot), -1)
                if change.new is not None:
                    doc = make_doc(change.key, change.new, self.fields)
                    docs.append(doc)
                    if doc.indexed:
                        stats.add(Counter(doc.terms))
            overlay = Overlay(excluded, docs, stats)
            with self._lock:
                self._overlays[key] = overlay
                while len(self._overlays) > TEMP_INDEXES * 4:
                    self._overlays.popitem(last=False)
            return index, overlay

    def _temporary(self, root: ChunkId) -> DocIndex:
        with self._lock:
            found = self._temp.get(root)
            if found is not None:
                self._temp.move_to_end(root)
                return found
        index = self._new()
        index.sync(root)
        with self._lock:
            self._temp[root] = index
            while len(self._temp) > TEMP_INDEXES:
                self._temp.popitem(last=False)
        return index

    def rebuild(self, branch: str, root: ChunkId, progress: Callable[[int], None] | None = None) -> DocIndex:
        """Drop the branch's index and build it again from ``root`` (``engram reindex``)."""
        index = self._new()
        index.sync(root, progress)
        with self._lock:
            self._branches[branch] = index
        return index
